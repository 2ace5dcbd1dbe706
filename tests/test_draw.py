"""b200c draw: the timeline model (plain data, no matplotlib), the pictures
of every example, and the command's errors."""
import os
import subprocess
import sys

import pytest

import b200c
from b200c.codegen import lower
from b200c.codegen.targets import schedule_target
from b200c.draw import build_timeline, timeline_from_ir
from conftest import EXAMPLES, HOPPER_EXAMPLES, ROOT, VARIANTS, schedule_key

STAGE7 = ROOT / "examples" / "07_compute_pipeline.py"


def _lane_key(role, q):
    return role if q is None else f"{role}[{q}]"


@pytest.fixture(scope="module")
def stage7():
    schedule = b200c.load_schedule_file(STAGE7)
    ir = lower(schedule)
    return ir, timeline_from_ir(ir, 3)


def test_stage7_lanes_are_the_plans_warp_roles(stage7):
    ir, t = stage7
    want = {_lane_key(r.name, r.q_stage) for r in ir.plan.roles}
    assert {ln.key for ln in t.lanes} == want
    assert {ln.key for ln in t.lanes} >= {"load", "mma", "softmax[0]", "softmax[1]"}


def test_stage7_edges_follow_the_barrier_table(stage7):
    """Every (barrier, producer role, consumer role) of the plan appears as an arrow, and no other."""
    ir, t = stage7
    want = {(b.name, p.role, c) for b in ir.plan.barriers for p in b.producers for c in b.consumers}
    lane_role = {ln.key: ln.role for ln in t.lanes}
    got = {(e.barrier, lane_role[t.steps[e.src].lane], lane_role[t.steps[e.dst].lane]) for e in t.edges}
    assert got == want
    for e in t.edges:  # per-Q-stage barriers connect the softmax warpgroup of that Q stage
        src, dst = t.steps[e.src], t.steps[e.dst]
        b = ir.plan.barrier(e.barrier)
        for step, role in ((src, [p.role for p in b.producers]), (dst, b.consumers)):
            ln = next(x for x in t.lanes if x.key == step.lane)
            assert ln.role in role
            if ln.q_stage is not None and not b.ring:
                assert e.instance == ln.q_stage, (e, step)
        assert dst.column > src.column  # arrows go forward in the layout


def test_stage7_mma_lane_is_the_issue_order(stage7):
    ir, t = stage7
    issue, n = ir.plan.issue, t.iterations
    want = [st.label("0") for st in issue.prologue()]
    for i in range(n - 1 if issue.lead else n):
        want += [st.label(str(i + st.offset)) for st in issue.steps]
    want += [st.label(str(n - 1)) for st in issue.epilogue()]
    assert [s.label for s in t.lane_steps("mma")] == want
    cols = [s.column for s in t.lane_steps("mma")]
    assert cols == sorted(cols) and len(set(cols)) == len(cols)


def test_stage7_loads_softmax_and_maps(stage7):
    ir, t = stage7
    n = t.iterations
    assert [s.label for s in t.lane_steps("load")] == ["load Q"] + [f"load {x}({j})" for j in range(n) for x in "KV"]
    assert [s.label for s in t.lane_steps("softmax[1]")] == [f"softmax S1({j})" for j in range(n)] + ["epilogue O1"]
    assert [(b.name, b.offset, b.size) for b in t.smem] == [(r.name, r.offset, r.size) for r in ir.plan.smem]
    assert {b.name for b in t.tmem} == {f"{k}{q}" for k in "SPO" for q in range(ir.plan.q_stages)}
    assert t.tmem_alloc == ir.plan.tmem_alloc_cols and t.smem_bytes == ir.plan.smem_bytes


def test_iterations_change_the_unrolling():
    s = b200c.load_schedule_file(STAGE7)
    two, four = build_timeline(s, iterations=2), build_timeline(s, iterations=4)
    assert len(four.lane_steps("load")) - len(two.lane_steps("load")) == 4  # K and V of two more tiles
    assert four.columns > two.columns


@pytest.mark.parametrize("bad", [0, 7, 2.5, True, "3"])
def test_iterations_out_of_range(bad):
    with pytest.raises(b200c.DrawError, match="iterations"):
        build_timeline(b200c.load_schedule_file(STAGE7), iterations=bad)


def test_single_role_and_hopper_models():
    t1 = build_timeline(b200c.load_schedule_file(EXAMPLES[0]))
    assert [ln.key for ln in t1.lanes] == ["cta"] and t1.edges
    h = build_timeline(b200c.load_schedule_file(HOPPER_EXAMPLES[-1]))  # target auto: sm90a
    assert h.backend == "sm90" and not h.tmem
    assert any(e.named for e in h.edges)  # the consumers' turn (bar.arrive -> bar.sync)
    assert {ln.key for ln in h.lanes} == {"load", "consumer[0]", "consumer[1]"}


# ---- pictures (matplotlib) -------------------------------------------------------------------------
ALL = EXAMPLES + VARIANTS + HOPPER_EXAMPLES


@pytest.mark.parametrize("path", ALL, ids=[schedule_key(p) for p in ALL])
def test_every_example_draws_to_svg(path, tmp_path):
    pytest.importorskip("matplotlib")
    from b200c.draw.render import render

    schedule = b200c.load_schedule_file(path)
    t = build_timeline(schedule, iterations=2)
    assert t.steps and t.lanes
    assert "b200c.codegen." + t.backend == schedule_target(schedule).backend
    out = tmp_path / "p.svg"
    render(t, out)
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert f">{t.steps[0].label}<" in text  # text stays text (svg.fonttype none)


def run(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout's b200c from any folder
    return subprocess.run([sys.executable, "-m", "b200c.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env)


def _one_line_error(r):
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("b200c: error:"), r.stderr
    return lines[0]


def test_cli_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "stage7.png"
    r = run("draw", str(STAGE7), "-o", str(out), "--iterations", "2")
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 1000 and height > 300


def test_cli_default_output_is_svg_in_cwd(tmp_path):
    pytest.importorskip("matplotlib")
    r = run("draw", str(HOPPER_EXAMPLES[0]), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / f"{HOPPER_EXAMPLES[0].stem}.svg").is_file()


def test_cli_errors(tmp_path):
    assert "writes .svg and .png" in _one_line_error(run("draw", str(STAGE7), "-o", str(tmp_path / "p.pdf")))
    missing = tmp_path / "nope" / "p.svg"
    assert str(tmp_path / "nope") in _one_line_error(run("draw", str(STAGE7), "-o", str(missing)))
    assert "1 to 6" in _one_line_error(run("draw", str(STAGE7), "--iterations", "0"))
    assert "does not exist" in _one_line_error(run("draw", "nope.py"))
    assert "unknown target" in _one_line_error(run("draw", str(STAGE7), "--target", "sm80"))
    assert not (tmp_path / "p.pdf").exists()


def test_cli_without_matplotlib(tmp_path):
    """A clear one-line error naming the extra to install (matplotlib hidden from the import system)."""
    code = ("import sys; sys.modules['matplotlib'] = None; from b200c.cli import main; "
            f"sys.exit(main(['draw', {str(STAGE7)!r}, '-o', {str(tmp_path / 'p.svg')!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    line = _one_line_error(r)
    assert 'pip install "b200c[draw]"' in line and "matplotlib" in line
    assert not (tmp_path / "p.svg").exists()


def test_import_b200c_does_not_load_matplotlib():
    code = "import sys, b200c, b200c.cli, b200c.draw; print('matplotlib' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# ---- backward schedules ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [64, 128, 256])
def test_backward_timeline_follows_the_ring(d):
    """A backward schedule's timeline: the producer thread and one lane per consumer warpgroup; the producer
    loads K and V once, then Q and dO per visit; each consumer visit waits for its stage's q_full (an arrow
    from that visit's load) and frees it (q_empty: an arrow to the load two visits later, the ring's depth)."""
    from b200c.draw.backward import backward_timeline

    n = 4
    t = backward_timeline(b200c.default_backward_schedule(d), iterations=n)
    assert [ln.key for ln in t.lanes] == ["load", "consumer[0]", "consumer[1]"]
    loads = [s.label for s in t.lane_steps("load")]
    assert loads == ["load K, V"] + [f"load Q, dO ({v})" for v in range(n)]
    by_id = {s.id: s for s in t.steps}
    for wg in (0, 1):
        visits = t.lane_steps(f"consumer[{wg}]")
        assert [s.label for s in visits] == [f"visit ({v})" for v in range(n)]
        for v, s in enumerate(visits):
            srcs = {by_id[e.src].label for e in t.edges if e.dst == s.id and e.barrier == "q_full"}
            assert srcs == {f"load Q, dO ({v})"}
            dsts = {by_id[e.dst].label for e in t.edges if e.src == s.id and e.barrier == "q_empty"}
            assert dsts == ({f"load Q, dO ({v + 2})"} if v + 2 < n else set())
            assert any(w.startswith("ds_ready") for w in s.waits)
    dq = ["dq"] if d < 256 else []  # the bulk reduce-add's region (no room for it at 256)
    assert [b.name for b in t.smem] == ["k", "v", "q", "do", "ds", *dq, "lse", "dpsum", "barriers"]
    assert t.tmem == () and "visits (Q tiles)" in t.unit and "dK, dV" in t.registers


def test_a_narrow_pictures_legend_wraps_instead_of_running_over_the_maps(tmp_path):
    """From a new-user trial: the head-dim-256 backward picture (5 step columns) drew its one-line legend over
    the SMEM and TMEM titles beside the lanes; it now wraps to the lanes' width. A wide picture keeps one line."""
    pytest.importorskip("matplotlib")
    from b200c.draw.backward import backward_timeline
    from b200c.draw.render import render

    legend_tail = "scale);  arrows: a barrier phase handed from the step that arrives to the step that waits"
    narrow = tmp_path / "narrow.svg"
    render(backward_timeline(b200c.default_backward_schedule(256)), narrow)
    assert "boxes: each warp role" in narrow.read_text() and legend_tail not in narrow.read_text()
    wide = tmp_path / "wide.svg"
    render(build_timeline(b200c.load_schedule_file(ROOT / "examples" / "07_compute_pipeline.py"), iterations=3), wide)
    assert legend_tail in wide.read_text()

"""`b200c compile` of a BackwardSchedule file (issue 48 step 1): its plan, its IR, its generated module (the
golden file), its cubin (0 spill bytes), its `b200c check` row, and its `b200c draw` picture."""
import subprocess
import sys

import pytest

from conftest import ROOT

FILE = "examples/backward/hopper_backward_d128.py"


def run(*args):
    return subprocess.run([sys.executable, "-m", "b200c", *args], cwd=ROOT, capture_output=True, text=True)


def test_plan_and_cuda():
    r = run("compile", FILE, "--emit", "plan")
    assert r.returncode == 0, r.stderr
    assert "backward plan 'hopper_backward_d128' on sm90a: 384 threads" in r.stdout
    assert "ds 32768 B" in r.stdout and "dq 32768 B" in r.stdout and ": 199208 B" in r.stdout
    r = run("compile", FILE, "-o", "-")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (ROOT / "tests/golden/backward/hopper_backward_d128.cu").read_text()


@pytest.mark.nvcc
def test_cubin_reports_the_main_kernel(tmp_path):
    r = run("compile", FILE, "--emit", "cubin", "-o", str(tmp_path / "b.cubin"))
    assert r.returncode == 0, r.stderr
    assert "b200c_attention_backward" in r.stderr and " 0 spill bytes" in r.stderr
    assert (tmp_path / "b.cubin").stat().st_size > 0


def test_emit_ir():
    r = run("compile", FILE, "--emit", "ir")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("kernel b200c_attention_backward  // hopper_backward_d128")
    assert "bar.sync ds_ready" in r.stdout


@pytest.mark.parametrize("args,words", [
    (("compile", FILE, "--target", "sm100a"), "target 'sm100a' has no backward design yet"),
    (("draw", FILE, "--target", "sm100a"), "target 'sm100a' has no backward design yet"),
])
def test_refusals_name_the_missing_piece(args, words):
    r = run(*args)
    assert r.returncode == 2 and words in r.stderr, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr


@pytest.mark.nvcc
def test_check_gives_the_backward_row():
    r = run("check", FILE)
    assert r.returncode == 0, r.stdout + r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if "hopper_backward_d128" in ln]
    cols = line.split()
    assert cols[2:4] == ["load:1", "spare:3"] and "384" in cols and "199208" in cols
    assert "1 schedule ok (sm_90a, 0 spill bytes)" in r.stdout


def test_draw_pictures_the_backward_roles(tmp_path):
    """`b200c draw` of a backward schedule: lanes for the producer and the two consumer warpgroups, one step per
    visit, the ring's hand-offs as arrows (the timeline itself is checked in tests/test_draw.py): 3 visits make
    1 + 3 producer steps and 2 x 3 consumer steps; kv_full 2, q_full 2 x 3 and q_empty 2 arrows (visit 0 frees
    the stage visit 2 loads, in each warpgroup)."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "bwd.svg"
    r = run("draw", FILE, "-o", str(out), "--iterations", "3")
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and "3 warp-role lanes, 10 steps, 10 barrier arrows" in r.stderr
    text = out.read_text()
    assert "hopper_backward_d128" in text and "visits (Q tiles)" in text and "q_empty[0]" in text


def test_emit_plan_refuses_what_has_no_kernel_yet(tmp_path):
    """--emit plan of a backward schedule that fits its budgets but has no generated kernel (persistent=True)
    is refused as --emit ir and cu are, with one line naming the missing piece (from a new-user trial)."""
    f = tmp_path / "persistent_backward.py"
    f.write_text("import b200c\nschedule = b200c.default_backward_schedule(128).replace(persistent=True)\n")
    r = run("compile", str(f), "--emit", "plan")
    assert r.returncode == 2 and "persistent=True" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_head_dim_with_a_schedule_file_is_refused_unless_it_agrees():
    """From a new-user trial: --head-dim 64 with a head-dim-128 schedule file printed the 128 plan, rc 0."""
    r = run("compile", FILE, "--head-dim", "64", "--emit", "plan")
    assert r.returncode == 2 and "--head-dim 64 goes with 'default'" in r.stderr and "head_dim = 128" in r.stderr
    r = run("compile", FILE, "--head-dim", "128", "--emit", "plan")
    assert r.returncode == 0 and "backward plan 'hopper_backward_d128'" in r.stdout, r.stderr
    r = run("compile", "default", "--head-dim", "64", "--emit", "plan")
    assert r.returncode == 0 and "hopper_default_d64" in r.stdout, r.stderr

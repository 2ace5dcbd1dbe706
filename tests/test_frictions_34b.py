"""The rest of issue 34 (a newcomer's first hour), each pinned: ``b200c check --target emulate`` judges a
schedule by its own (sm100a) build, not by the emulator's spills; ``check`` leaves no temporary folder when
every row passes and keeps only the failing schedules' sources, named in its last line; the Hopper
progression's drawings say "Hopper step", not "blog stage"; the short-key rule in the docstrings is the
code's; scripts/bench_mods.py without a GPU is one line; scripts/compile_time.py fails when a goal is not
met; and one-line errors for ``attention(is_causal=...)``, ``default_schedule("128")`` and
``generate("sm100a", s)``."""
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import b200c
from b200c.nvcc import CompileResult

ROOT = Path(__file__).resolve().parents[1]
EX01 = ROOT / "examples/01_baseline.py"
H11 = ROOT / "examples/hopper/h11_persistent.py"
# accepted by validation but spills 44 B at sm100a (tests/test_schedule_space.py KNOWN_SPILLS)
SPILLING = ("import b200c\n"
            f"schedule = b200c.load_schedule_file({str(ROOT / 'examples/16_split_rowsum.py')!r}).replace(\n"
            "    name='spills', sw_exp2_per16=0, s_load_cols=32, rowmax_max3=False)\n")


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    """A fresh, empty temporary directory for tempfile (and nvcc) in this test."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return tmp


def _fake_compile(monkeypatch, spills):
    """Replace nvcc: ``spills(target name, out path)`` gives the spill bytes of each build's log; the
    source and an empty output are written where compile_cuda writes them."""
    import b200c.nvcc

    def compile_cuda(source, out, fmt="cubin", target="sm_100a", extra=(), keep_source=None):
        out = Path(out)
        out.with_suffix(".cu").write_text(source)
        out.write_bytes(b"")
        n = spills(getattr(target, "name", target), out)
        log = (f"ptxas info    : Function properties for b200c_attention\n"
               f"    {16 if n else 0} bytes stack frame, {n} bytes spill stores, 0 bytes spill loads\n"
               f"ptxas info    : Used 128 registers\n")
        return CompileResult(out, log)

    monkeypatch.setattr(b200c.nvcc, "compile_cuda", compile_cuda)


def _check(capsys, files, **kw):
    from b200c.check import check_files

    rc = check_files([str(f) for f in files], sass=False, jobs=1, **kw)
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- A: the emulation's spills are not the schedule's ---------------------------------------------------

def test_emulated_spills_with_a_clean_sm100a_build_pass(capsys, monkeypatch, tmpdir_env):
    built = []
    _fake_compile(monkeypatch, lambda t, out: built.append(t) or (1884 if t == "emulate" else 0))
    rc, out, err = _check(capsys, [EX01], target="emulate")
    assert rc == 0, out + err
    assert built == ["emulate", "sm100a"]  # the schedule's own build too
    (row,) = [ln for ln in out.splitlines() if "baseline" in ln]
    assert row.endswith("ok (emulated build spills 1884 B: the emulator's software model; "
                        "the sm100a build of this schedule: 0)")
    assert "FAILED" not in out and err == ""
    assert "1 schedule ok (sm_90a, 1 emulated build spills, the emulator's software model; its sm100a build: " \
           "0 spill bytes)" in out
    assert "not the schedule's" in out  # the stack footer does not blame the schedule's register budgets
    assert list(tmpdir_env.iterdir()) == []


def test_clean_emulated_build_compiles_once(capsys, monkeypatch, tmpdir_env):
    built = []
    _fake_compile(monkeypatch, lambda t, out: built.append(t) or 0)
    rc, out, _ = _check(capsys, [EX01], target="emulate")
    assert rc == 0 and built == ["emulate"] and "1 schedule ok (sm_90a, 0 spill bytes)" in out


def test_emulated_build_whose_sm100a_build_spills_fails(capsys, monkeypatch, tmpdir_env):
    _fake_compile(monkeypatch, lambda t, out: 1884 if t == "emulate" else 44)
    rc, out, err = _check(capsys, [EX01], target="emulate")
    assert rc == 1
    assert ("FAILED: 44 spill bytes in the sm100a build of this schedule (emulated build spills 1884 B: "
            "the emulator's software model)") in out
    assert err.startswith("b200c: 1 of 1 schedule failed the check")


def test_emulated_json_rows(capsys, monkeypatch, tmpdir_env):
    import json

    _fake_compile(monkeypatch, lambda t, out: 900 if t == "emulate" else 0)
    rc, out, _ = _check(capsys, [EX01], target="emulate", as_json=True)
    (row,) = json.loads(out)
    assert rc == 0 and "error" not in row and "sources" not in row
    assert row["spill_bytes"] == 900 and row["native_spill_bytes"] == 0 and row["verdict"].startswith("ok (")


def test_native_target_spills_still_fail(capsys, monkeypatch, tmpdir_env):
    built = []
    _fake_compile(monkeypatch, lambda t, out: built.append(t) or 44)
    rc, out, _ = _check(capsys, [EX01], target="sm100a")
    assert rc == 1 and built == ["sm100a"] and "FAILED: 44 spill bytes" in out and "emulat" not in out


# --- B: the temporary folder -----------------------------------------------------------------------------

def test_passing_checks_leave_no_temporary_folder(capsys, monkeypatch, tmpdir_env):
    _fake_compile(monkeypatch, lambda t, out: 0)
    for _ in range(3):
        assert _check(capsys, [EX01, H11])[0] == 0
    assert list(tmpdir_env.iterdir()) == []


def test_only_the_failing_schedules_sources_stay_and_are_named(capsys, monkeypatch, tmpdir_env, tmp_path):
    # two files of one stem (each in its own subfolder) and a third: only a/s.py fails
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "s.py").write_text(f"import b200c\nschedule = b200c.load_schedule_file({str(EX01)!r})\n")
    files = [tmp_path / "a/s.py", tmp_path / "b/s.py", H11]
    _fake_compile(monkeypatch, lambda t, out: 44 if out.parent.name == "0" else 0)
    rc, out, err = _check(capsys, files)
    assert rc == 1
    (d,) = [p for p in tmpdir_env.iterdir()]
    assert d.name.startswith("b200c_check_")
    left = sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    assert left == ["0/s.cu", "0/s.cubin"]  # b/s.py's and h11's files went, and b/s.py's folder
    assert sorted(p.name for p in d.iterdir()) == ["0"]
    assert err.strip() == (f"b200c: 1 of 3 schedules failed the check; the failing schedule's generated sources: "
                           f"{files[0]}: {d / '0/s.cu'}")


def test_several_failing_schedules_each_named(capsys, monkeypatch, tmpdir_env, tmp_path):
    _fake_compile(monkeypatch, lambda t, out: 1884 if t == "emulate" else 44)
    rc, _, err = _check(capsys, [EX01], target="emulate")
    (d,) = tmpdir_env.iterdir()
    assert rc == 1 and err.strip().endswith(
        f"the failing schedule's generated sources: {EX01}: {d / '01_baseline.cu'}, {d / '01_baseline.sm100a.cu'}")
    _fake_compile(monkeypatch, lambda t, out: 44)
    rc, _, err = _check(capsys, [EX01, H11])
    assert rc == 1 and "the failing schedules' generated sources: " in err
    assert f"{EX01}: " in err and f"; {H11}: " in err


def test_a_row_that_failed_before_generating_keeps_nothing(capsys, monkeypatch, tmpdir_env, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import b200c\nschedule = b200c.Schedule(q_stages=9)\n")
    _fake_compile(monkeypatch, lambda t, out: 0)
    rc, _, err = _check(capsys, [EX01, bad])
    assert rc == 1 and err.strip() == "b200c: 1 of 2 schedules failed the check"
    assert list(tmpdir_env.iterdir()) == []


@pytest.mark.nvcc
def test_check_emulate_with_nvcc(tmp_path, tmpdir_env, capsys):
    """With nvcc: the emulated build of example 01 spills and its sm100a build does not (exit 0, nothing left
    in the temporary folder); a schedule whose sm100a build spills fails, and only its sources stay."""
    from b200c.cli import main

    assert main(["check", "--no-sass", "--target", "emulate", str(EX01)]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if "baseline" in ln)
    assert re.search(r"ok \(emulated build spills \d+ B: the emulator's software model; the sm100a build of this "
                     r"schedule: 0\)$", row), out
    assert not list(tmpdir_env.glob("b200c_check_*"))

    spill = tmp_path / "spill.py"
    spill.write_text(SPILLING)
    assert main(["check", "--no-sass", "--target", "emulate", "-j", "2", str(EX01), str(spill)]) == 1
    out, err = capsys.readouterr()
    assert re.search(r"FAILED: \d+ spill bytes in the sm100a build of this schedule \(emulated build spills", out)
    (d,) = tmpdir_env.glob("b200c_check_*")
    assert sorted(p.name for p in d.iterdir()) == ["spill.cu", "spill.cubin", "spill.sm100a.cu", "spill.sm100a.cubin"]
    assert err.strip() == (f"b200c: 1 of 2 schedules failed the check; the failing schedule's generated sources: "
                           f"{spill}: {d / 'spill.cu'}, {d / 'spill.sm100a.cu'}")


# --- C: the smaller frictions ----------------------------------------------------------------------------

def test_hopper_drawings_name_the_hopper_step(tmp_path):
    pytest.importorskip("matplotlib")
    from b200c.draw import draw_schedule
    from b200c.draw.render import stage_label

    assert stage_label(11, "sm90") == "Hopper step h11" and stage_label(3, "sm90") == "Hopper step h03"
    assert stage_label(7, "tcgen05") == "blog stage 7"
    draw_schedule(b200c.load_schedule_file(H11), tmp_path / "h11.svg")
    svg = (tmp_path / "h11.svg").read_text()
    assert "hopper_persistent (Hopper step h11, sm90)" in svg and "blog stage" not in svg
    draw_schedule(b200c.load_schedule_file(ROOT / "examples/07_compute_pipeline.py"), tmp_path / "s07.svg")
    assert "(blog stage 7, tcgen05)" in (tmp_path / "s07.svg").read_text()


def _few(n):
    """Independently of short_kv_tiles: the one-warpgroup preset's key counts at head dim 64 on Hopper (the
    dense preset's 224-row tiles against the short preset's 128-row ones: > 1.15x the keys, at most 4
    tiles; the one-warpgroup preset for at most two 128-row tiles)."""
    def pad(bn):
        return -(-n // bn) * bn
    return n <= 4 * 224 and pad(224) > 1.15 * pad(128) and n <= 256


def test_presets_docstring_says_the_current_short_key_rule():
    from b200c.dsl import presets

    assert [n for n in range(1, 400) if _few(n)] == [*range(1, 129), *range(225, 257)]
    assert [n for n in range(1, 400) if _few(n)] == [
        n for n in range(1, 400) if presets.short_kv_preset(64, "hopper", n) is presets.HOPPER_FEW_KV_PRESETS[64]]
    doc = " ".join(presets.default_schedule.__doc__.split())
    assert "1-128 and 225-256 keys; 129-224 keep the preset's one 224-row tile" in doc
    assert "(4) of the preset's K/V tiles" in doc and "(1.15)" in doc
    assert (presets.SHORT_KV_TILES, presets.SHORT_KV_WASTE, presets.FEW_KV_TILES) == (4, 1.15, 2)


def test_help_of_b200c_default_schedule_says_the_current_short_key_rule():
    doc = " ".join(b200c.default_schedule.__doc__.split())
    assert "at most 256 keys" not in doc
    assert "1-128 or 225-256 keys" in doc


def test_bench_mods_without_a_gpu_is_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script measures")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/bench_mods.py")], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_mods: needs a CUDA GPU ("), r.stdout


def _compile_time_script():
    spec = importlib.util.spec_from_file_location("_compile_time_under_test", ROOT / "scripts/compile_time.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("cold, warm, rc", [(0.010, 0.001, 0), (0.080, 0.001, 1), (0.010, 0.009, 1)])
def test_compile_time_exits_1_when_a_goal_is_not_met(cold, warm, rc, monkeypatch, capsys):
    ct = _compile_time_script()
    monkeypatch.setattr(ct, "_run", lambda cmd, env: (0.02, ""))
    monkeypatch.setattr(ct, "measure", lambda *a: {"total": 0.2, "import": 0.05, "cold": cold, "warm": warm,
                                                   "generate": 0.001, "new": 0.01, "empty": 0.1, "torch": False})
    assert ct.main(["--runs", "1", "--warm", "1", "--examples", "examples/07_compute_pipeline.py:sm100a"]) == rc
    last = capsys.readouterr().out.splitlines()[-1]
    assert ("NOT met" in last) == bool(rc)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(is_causal=True), "got is_causal=True: that is torch SDPA's name; b200c.attention takes "
                           "flash_attn_func's: causal="),
    (dict(scale=0.5), "softmax_scale="),
    (dict(attn_mask=None), "attn_mask is an argument of the SDPA drop-in, b200c.scaled_dot_product_attention"),
    (dict(dropout_p=0.1), "dropout_p is an argument of the SDPA drop-in, b200c.scaled_dot_product_attention"),
    (dict(casual=True), "b200c.attention takes no argument 'casual'; did you mean causal=?"),
    (dict(softcap=30.0), "b200c.attention takes it as a score_mod: score_mod=b200c.mods.softcap(cap)"),
    (dict(alibi_slopes=None), "score_mod=b200c.mods.alibi(slopes)"),
])
def test_attention_names_the_argument_to_use(kwargs, needle):
    import torch

    q = torch.zeros(1, 2, 8, 64, dtype=torch.bfloat16)  # on the CPU: refused for the keyword, before the device
    with pytest.raises(b200c.LaunchError) as e:
        b200c.attention(q, q, q, **kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(b200c.LaunchError, match="CUDA"):  # without the keyword: the usual device error
        b200c.attention(q, q, q)


@pytest.mark.parametrize("head_dim, kind", [("128", "str '128'"), (128.0, "float 128.0"), (True, "bool True")])
@pytest.mark.parametrize("target", ["sm100a", "sm90a"])
def test_default_schedule_says_the_head_dim_must_be_an_int(head_dim, kind, target):
    with pytest.raises(b200c.ScheduleError) as e:
        b200c.default_schedule(head_dim, target=target)
    assert str(e.value) == f"the head dim must be an int (64, 128 or 256), got the {kind}"


def test_default_schedule_takes_integer_types():
    np = pytest.importorskip("numpy")
    assert b200c.default_schedule(np.int64(128)) == b200c.default_schedule(128)
    with pytest.raises(b200c.ScheduleError, match="no built-in schedule for head dim 96; b200c supports"):
        b200c.default_schedule(96)


def test_generate_with_swapped_arguments_is_one_short_line():
    s = b200c.Schedule()
    cases = [(("sm100a", s), "generate() got the target 'sm100a' first and the Schedule 'custom' second; the order "
                             "is generate(schedule, target): generate(schedule, 'sm100a')"),
             ((s, s), "the order is generate(schedule, target)"),
             (("examples/07_compute_pipeline.py", "sm100a"), "b200c.load_schedule_file(path)")]
    for args, needle in cases:
        with pytest.raises(b200c.ScheduleError) as e:
            b200c.generate(*args)
        msg = str(e.value)
        assert needle in msg and "\n" not in msg and len(msg) < 250 and "block_m" not in msg
    from b200c.codegen.targets import resolve

    assert b200c.generate(s, resolve("sm100a")).target == "sm100a"  # a Target record is a target


def test_load_schedule_file_refuses_a_file_that_is_not_python(tmp_path):
    """From Python as from the command line: a README is not a schedule file (was a Python syntax error)."""
    import b200c
    from b200c.errors import ScheduleError

    readme = tmp_path / "README.md"
    readme.write_text("# b200c\n\nnot Python\n")
    with pytest.raises(ScheduleError, match=r"is not a schedule file: a schedule file is Python \(\.py\)"):
        b200c.load_schedule_file(readme)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(layout="bshd"), "attention_varlen takes packed (total_tokens, H, D) tensors"),
    (dict(dropout_p=0.0), "b200c kernels have no dropout"),
    (dict(softcap=30.0), "b200c.attention_varlen takes it as a score_mod"),
    (dict(is_causal=True), "b200c.attention_varlen takes flash_attn_func's: causal="),
    (dict(casual=True), "b200c.attention_varlen takes no argument 'casual'; did you mean causal=?"),
])
def test_attention_varlen_names_the_argument_to_use(kwargs, needle):
    """From a new-user trial: attention_varlen raised a raw TypeError for these (attention explained them)."""
    import torch

    q = torch.zeros(10, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 10], dtype=torch.int32)
    with pytest.raises(b200c.LaunchError) as e:
        b200c.attention_varlen(q, q, q, cu, cu, 10, 10, **kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kind, recipe, call", [("mask_mod", "causal", "b200c.mods.causal()"),
                                                ("score_mod", "softcap", "b200c.mods.softcap(cap)"),
                                                ("mask_mod", "sliding_window", "b200c.mods.sliding_window(left, right=0)")])
def test_a_recipe_passed_uncalled_is_told_to_call_it(kind, recipe, call):
    """From a new-user trial: mask_mod=b200c.mods.causal (not called) was told to take 4 parameters."""
    import b200c.mods

    with pytest.raises(b200c.ScheduleError) as e:
        b200c.kernel_source(128, **{kind: getattr(b200c.mods, recipe)})
    assert f"{kind}=b200c.mods.{recipe} is a recipe, which returns the {kind}: call it, {kind}={call}" in str(e.value)


def test_a_schedule_name_given_as_a_path_is_told_what_a_schedule_is(tmp_path, monkeypatch):
    """From a new-user trial: schedule="hopper_default_d128" said only that the file does not exist."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(b200c.ScheduleError) as e:
        b200c.load_schedule_file("hopper_default_d128")
    assert "looks like a schedule's name" in str(e.value) and "b200c.default_schedule(head_dim" in str(e.value)
    with pytest.raises(b200c.ScheduleError) as e:
        b200c.load_schedule_file("missing/sched.py")
    assert "looks like" not in str(e.value)


def test_a_knob_refusal_says_when_the_schedule_looks_written_for_another_target():
    """From a new-user trial: `b200c check --target sm90a examples/07_compute_pipeline.py` (a B200 blog stage)
    said only 'set block_m=64', and each fix led to the next refusal. The refusal now says the schedule looks
    written for sm100a and where a Hopper schedule starts; a Hopper schedule's own mistakes get no such hint."""
    from b200c.codegen import make_plan

    stage7 = b200c.load_schedule_file(str(ROOT / "examples" / "07_compute_pipeline.py"))
    with pytest.raises(b200c.ScheduleError) as e:
        make_plan(stage7, "sm90a")
    assert "block_m=128" in str(e.value)
    assert "(this schedule looks written for sm100a: it breaks fewer of that target's knob rules; for sm90a, start " \
           "from b200c.default_schedule(head_dim, target='sm90a'))" in str(e.value)
    hopper = b200c.default_schedule(128, target="sm90a")
    with pytest.raises(b200c.ScheduleError) as e:
        make_plan(hopper.replace(q_stages=3), "sm90a")
    assert "q_stages=3" in str(e.value) and "looks written for" not in str(e.value)

"""The b200c command line: emits, one-line errors, exit codes."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, ROOT


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "b200c.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_compile_cu_matches_golden(tmp_path):
    out = tmp_path / "k.cu"
    r = run("compile", str(EXAMPLES[0]), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == (ROOT / "tests/golden" / f"{EXAMPLES[0].stem}.cu").read_text()


@pytest.mark.parametrize("emit,needle", [("plan", "TMEM (alloc 512 of 512 columns)"),
                                         ("ir", "role mma"), ("cu", "extern \"C\" __global__")])
def test_emit_text(emit, needle):
    r = run("compile", str(EXAMPLES[6]), "--emit", emit)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout


def test_emit_ir_shows_issue_order():
    r = run("compile", str(EXAMPLES[6]), "--emit", "ir")
    assert "prologue (blog ch.7)" in r.stdout
    assert "for i in [0, c.n_kv - 1)" in r.stdout
    assert "tcgen05.commit -> kv_empty[slot]" in r.stdout


@pytest.mark.nvcc
def test_emit_cubin(tmp_path):
    out = tmp_path / "k.cubin"
    r = run("compile", str(EXAMPLES[3]), "--emit", "cubin", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0 and "0 spill bytes" in r.stderr


def _one_line_error(r):
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("b200c: error:"), r.stderr
    return lines[0]


def test_missing_file():
    assert "does not exist" in _one_line_error(run("compile", "nope.py"))


def test_no_schedule(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("x = 1\n")
    assert "defines no module-level 'schedule'" in _one_line_error(run("compile", str(f)))


def test_wrong_type(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("schedule = {'q_stages': 2}\n")
    assert "'schedule' is a dict, expected b200c.Schedule" in _one_line_error(run("compile", str(f)))


def test_schedule_raising(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("raise RuntimeError('boom')\n")
    assert "failed to run: RuntimeError: boom" in _one_line_error(run("compile", str(f)))


def test_infeasible_schedule(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import b200c\nschedule = b200c.Schedule(p_storage='tmem', warp_specialized=True, q_stages=3)\n")
    assert "need 768 of 512 TMEM columns" in _one_line_error(run("compile", str(f)))


def test_unwritable_output(tmp_path):
    line = _one_line_error(run("compile", str(EXAMPLES[0]), "-o", str(tmp_path / "no" / "such" / "k.cu")))
    assert "No such file or directory" in line


def test_nested_schedule_error_names_the_outer_file(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import b200c\nprev = b200c.load_schedule_file('missing.py')\nschedule = prev\n")
    line = _one_line_error(run("compile", str(f)))
    assert f"in schedule file '{f}'" in line and "'missing.py' does not exist (relative to" in line


def test_syntax_error_names_the_line(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import b200c\nschedule = b200c.Schedule(\n")
    assert "line 2: syntax error" in _one_line_error(run("compile", str(f)))


def test_help():
    r = run("--help")
    assert r.returncode == 0 and "compile" in r.stdout and "check" in r.stdout


def test_compile_hopper_targets(tmp_path):
    from conftest import HOPPER_EXAMPLES

    out = tmp_path / "h.cu"
    r = run("compile", str(HOPPER_EXAMPLES[-1]), "--target", "sm90a", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == (ROOT / "tests/golden/hopper" / f"{HOPPER_EXAMPLES[-1].stem}.cu").read_text()
    r = run("compile", str(HOPPER_EXAMPLES[-1]), "--target", "sm90a", "--emit", "plan")
    assert "named barriers" in r.stdout and "backend sm90" in r.stdout
    # a Hopper schedule for the default sm100a target: one line naming the knob
    line = _one_line_error(run("compile", str(HOPPER_EXAMPLES[-1])))
    assert "sm100a" in line and ("block_m=64" in line or "pingpong" in line or "p_storage" in line)
    line = _one_line_error(run("compile", str(HOPPER_EXAMPLES[0]), "--target", "sm70"))
    assert "unknown target 'sm70'" in line


@pytest.mark.nvcc
def test_check_hopper_examples():
    from conftest import HOPPER_EXAMPLES

    r = run("check", "--target", "sm90a", "--no-sass", *map(str, HOPPER_EXAMPLES[-2:]))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 schedules ok (sm_90a, 0 spill bytes)" in r.stdout

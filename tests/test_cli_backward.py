"""`b200c compile` of a BackwardSchedule file (issue 48 step 1): its plan, its IR, its generated module (the
golden file), its cubin (0 spill bytes), its `b200c check` row, and `b200c draw` refuses it by name."""
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
    assert "ds 32768 B" in r.stdout and ": 166440 B" in r.stdout
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
    (("draw", FILE), "'schedule' is a BackwardSchedule"),
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
    assert cols[2:4] == ["load:1", "spare:3"] and "384" in cols and "166440" in cols
    assert "1 schedule ok (sm_90a, 0 spill bytes)" in r.stdout

"""`b200c check` prints one row per schedule and exits 0 for the examples;
`b200c build` builds in parallel and a second run builds nothing."""
import json
import os
import subprocess
import sys

import pytest

from conftest import EXAMPLES, ROOT


@pytest.mark.nvcc
def test_check_all_examples():
    r = subprocess.run([sys.executable, "-m", "b200c.cli", "check", *map(str, EXAMPLES)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["stage", "schedule", "warps"]
    rows = [l for l in lines[1:] if len(l.split()) > 8 and l.split()[0].isdigit()]
    assert [int(l.split()[0]) for l in rows] == list(range(1, 19))
    assert "18 schedules ok (sm_100a, 0 spill bytes)" in r.stdout
    if _has_disassembler():  # the second table: one row per warp role's steady-state loop
        loop_rows = [l.split() for l in lines if l.startswith("tma_l2_promotion ")]
        assert [l[1] for l in loop_rows] == ["softmax", "correction", "load", "mma"], r.stdout


def _has_disassembler() -> bool:
    from b200c.errors import BuildError
    from b200c.sass import find_cuobjdump

    try:
        find_cuobjdump()
        return True
    except BuildError:
        return False


@pytest.mark.nvcc
def test_check_json():
    if not _has_disassembler():
        pytest.skip("needs cuobjdump/nvdisasm")
    r = subprocess.run([sys.executable, "-m", "b200c.cli", "check", "--json", str(EXAMPLES[11])],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads(r.stdout)
    assert row["stage"] == 12 and row["spill_bytes"] == 0 and row["UTC*MMA"] > 0
    assert list(row["loops"]) == ["softmax", "correction", "load", "mma"]
    assert row["loops"]["correction"]["LDTM"] > 0 and row["loops"]["load"]["UTMALDG"] > 0
    assert all(c["static"] > 0 and c["line"] > 0 for c in row["loops"].values())
    assert "1 schedule ok" in r.stderr


@pytest.mark.nvcc
def test_check_fails_on_bad_schedule(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import b200c\nschedule = b200c.Schedule(q_stages=3, warp_specialized=True, p_storage='tmem')\n")
    r = subprocess.run([sys.executable, "-m", "b200c.cli", "check", "--no-sass", str(EXAMPLES[0]), str(bad)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1  # documented: a schedule failed the check (not a usage error)
    assert "FAILED: 3 Q stages at head dim 128 need 768 of 512 TMEM columns" in r.stdout
    # bad.py failed before generating a source; the passing schedule's sources are not kept (issue 34)
    *warned, last = r.stderr.strip().splitlines()
    assert last == "b200c: 1 of 2 schedules failed the check"
    # an nvcc other than the tested release adds its one-line warning; nothing else is printed
    assert all(w.startswith("b200c: warning: ") and "nvcc" in w for w in warned), warned


@pytest.mark.nvcc
def test_build_examples_twice(tmp_path):
    env = {**os.environ, "B200C_CACHE_DIR": str(tmp_path)}
    files = [str(p) for p in EXAMPLES[::4]]  # 1, 5, 9, 13, 17: a spread of stages, kept short for CI
    first = subprocess.run([sys.executable, "-m", "b200c.cli", "build", *files], capture_output=True, text=True,
                           cwd=ROOT, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("built") == len(files), first.stdout
    second = subprocess.run([sys.executable, "-m", "b200c.cli", "build", *files], capture_output=True, text=True,
                            cwd=ROOT, env=env)
    assert second.returncode == 0
    assert second.stdout.count("cached") == len(files) and "built" not in second.stdout, second.stdout


@pytest.mark.nvcc
def test_check_each_file_for_its_own_target_and_failed_rows_by_file(tmp_path):
    bad = tmp_path / "bad_knob.py"
    bad.write_text(f"import b200c\nschedule = b200c.load_schedule_file({str(EXAMPLES[6])!r}).replace(kv_stages=9)\n")
    hopper = ROOT / "examples" / "hopper" / "h11_persistent.py"
    r = subprocess.run([sys.executable, "-m", "b200c.cli", "check", "--no-sass", str(EXAMPLES[6]), str(hopper), str(bad)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "target sm100a:" in r.stdout and "target sm90a:" in r.stdout
    assert "hopper_persistent" in r.stdout.split("target sm90a:")[1]
    failed = [l for l in r.stdout.splitlines() if "FAILED" in l]
    assert len(failed) == 1 and str(bad) in failed[0]  # named by its file, not the schedule name it inherits
    assert "1 of 3 schedules failed the check" in r.stderr


def test_check_footer_names_what_the_stack_holds():
    """The footer blamed runtime-indexed phase arrays for every stack frame, also for a bitmask schedule
    whose stack held spilled registers (issue 19: stage 18 with kv_stages=2)."""
    from b200c.check import stack_notes

    spilled = {"stack_frame": 16, "spill_bytes": 68, "phase_tracking": "bitmask"}
    arrays = {"stack_frame": 24, "spill_bytes": 0, "phase_tracking": "array"}
    clean = {"stack_frame": 0, "spill_bytes": 0, "phase_tracking": "bitmask"}
    notes = stack_notes([spilled, clean])
    assert len(notes) == 1 and "spilled to local memory" in notes[0] and "phase-bit" not in notes[0]
    notes = stack_notes([arrays, clean], sass=False)
    assert len(notes) == 1 and "phase-bit arrays" in notes[0] and "LDL/STL" not in notes[0]
    assert len(stack_notes([spilled, arrays])) == 2
    assert stack_notes([clean]) == []


def test_check_fails_a_build_whose_wgmmas_ptxas_serialized():
    """ptxas' C751x performance warnings (a wgmma waits for the one before it for want of registers: no spill
    shows it) are read from the log and fail the check row, naming the warning."""
    from pathlib import Path

    from b200c.check import _serialized
    from b200c.nvcc import CompileResult

    warning = ("ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized "
               "due to insufficient register resources for the function 'b200c_attention_backward'")
    log = "ptxas info    : Used 168 registers\n" + warning + "\nptxas info    : Function properties for x\n"
    res = CompileResult(Path("k.cubin"), log)
    assert res.serialized_wgmma() == [warning.strip()]
    row = {}
    _serialized(row, res)
    assert row["error"].startswith("ptxas serialized the wgmma instructions: (C7512) Potential Performance Loss")
    clean = {}
    _serialized(clean, CompileResult(Path("k.cubin"), "ptxas info    : Used 168 registers\n"))
    assert "error" not in clean and CompileResult(Path("k.cubin"), "(C7500) other").serialized_wgmma() == []

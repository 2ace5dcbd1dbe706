"""Everyday frictions found by a fresh-user trial (issue "Nothing a valid call or a valid schedule can
break", item 5), each pinned: refusing to write over an input, the CLI's spelling of targets, errors
naming the rules of the schedule's own target, one-line errors without a GPU, writability checked before
nvcc, draw's directory hint, help texts (targets, exit status, bench, Schedule's allowed values), no
"blog stage 0", grammar, aligned check tables, the README's outputs ignored by git."""
import dataclasses
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import b200c
from b200c.cli import main, make_parser

ROOT = Path(__file__).resolve().parents[1]
H11 = ROOT / "examples/hopper/h11_persistent.py"


def _err(capsys, argv) -> str:
    assert main(argv) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("b200c: error:"), lines
    return lines[0]


def test_compile_refuses_to_write_over_its_input(tmp_path, capsys):
    f = tmp_path / "s.py"
    f.write_text("import b200c\nschedule = b200c.Schedule()\n")
    line = _err(capsys, ["compile", str(f), "-o", str(f)])
    assert "is the input schedule file" in line and "give another -o" in line
    assert f.read_text().startswith("import b200c")  # the schedule is intact


def test_compile_refuses_to_write_over_a_file_the_schedule_loads(tmp_path, capsys):
    base = tmp_path / "base.py"
    base.write_text("import b200c\nschedule = b200c.Schedule(name='base')\n")
    f = tmp_path / "s.py"
    f.write_text("from pathlib import Path\nimport b200c\n"
                 "schedule = b200c.load_schedule_file(Path(__file__).with_name('base.py')).replace(name='s2')\n")
    line = _err(capsys, ["compile", str(f), "-o", str(base)])
    assert "is a file the schedule loads" in line and "give another -o" in line
    assert base.read_text().startswith("import b200c")
    assert main(["compile", str(f), "-o", str(tmp_path / "k.cu")]) == 0  # another -o is fine


@pytest.mark.parametrize("argv, hint", [(["compile", "--bogus"], "b200c compile --help"),
                                        (["compile", "s.py", "--bogus"], "b200c compile --help"),
                                        (["check", "s.py", "--bogus"], "b200c check --help"),
                                        (["--bogus"], "b200c --help")])
def test_an_unknown_option_is_named_with_its_subcommands_help(argv, hint, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"b200c: error: unrecognized arguments: --bogus; see '{hint}'"


def test_an_unwritable_cuda_output_names_the_option(capsys):
    line = _err(capsys, ["compile", str(H11), "-o", "/proc/nope.cu"])
    assert "cannot write output '/proc/nope.cu'" in line and "writable -o" in line


def test_a_schedule_outside_the_blog_lists_no_blog_stage_in_its_header():
    src = b200c.generate(b200c.Schedule(name="mine")).source
    header = src.split("==== end section: header")[0]
    assert "name = 'mine'" in header and "blog_stage" not in header


def test_target_hints_use_the_cli_spelling(capsys):
    line = _err(capsys, ["compile", str(H11), "--target", "sm100a"])
    assert "--target sm90a" in line and "target='sm90a'" not in line


def test_a_mistake_is_reported_against_the_schedules_own_target(capsys):
    """A Hopper schedule with one knob that means nothing on Hopper names the sm90a rule, not sm100a's."""
    f = Path(tempfile.mkdtemp()) / "h.py"
    f.write_text(f"import b200c\nschedule = b200c.load_schedule_file({str(H11)!r}).replace(correction_warps=4)\n")
    line = _err(capsys, ["compile", str(f)])
    assert "correction_warps=4 means nothing on target sm90a" in line


def test_unwritable_output_is_refused_before_nvcc(capsys):
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "b200c_*")))
    line = _err(capsys, ["compile", str(ROOT / "examples/07_compute_pipeline.py"), "--emit", "ptx", "-o",
                         "/proc/nope.ptx"])
    assert "cannot write output '/proc/nope.ptx'" in line and "nvcc" not in line
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "b200c_*"))) == before  # no temporary folder left


def test_draw_of_a_folder_suggests_one_file_and_the_subcommands_help(capsys):
    line = _err(capsys, ["draw", str(ROOT / "examples")])
    assert "pass one of its .py files" in line and "*.py" not in line and "see 'b200c draw --help'" in line


def test_help_texts():
    p = make_parser()
    subs = p._subparsers._group_actions[0].choices
    for name in ("compile", "check", "build", "draw"):
        text = " ".join(subs[name].format_help().split())
        assert "emulate: the sm100a kernel emulated on Hopper" in text  # every registered target is listed
        assert ("1 check:" in text) == (name == "check")  # the check status only where check runs
    bench = " ".join(subs["bench"].format_help().split())
    assert "needs one" in bench and "Time schedules" in bench
    assert "auto: each schedule's own target (sm90a for examples/hopper and backward schedules, else sm100a) (default)" in " ".join(
        subs["build"].format_help().split())


def test_schedule_help_gives_every_knobs_allowed_values():
    doc = b200c.Schedule.__doc__
    for f in dataclasses.fields(b200c.Schedule):
        assert f"``{f.name}``:" in doc.split("Allowed values")[1], f.name
    assert "``exp2``: 'expf' or 'ex2.approx.ftz'" in doc


def test_no_blog_stage_zero_and_derived_schedules_are_not_blog_stages():
    s = b200c.Schedule(name="scratch")
    assert "blog stage" not in b200c.codegen.lower(s).text().splitlines()[0]
    ex7 = b200c.load_schedule_file(ROOT / "examples/07_compute_pipeline.py")
    assert ex7.blog_stage == 7 and ex7.replace(name="renamed").blog_stage == 7
    assert ex7.replace(kv_stages=4).blog_stage == 0 and ex7.replace(kv_stages=4, blog_stage=7).blog_stage == 7


def test_type_errors_use_the_right_article():
    with pytest.raises(b200c.ScheduleError, match=r"q_stages='2' is a str; expected an int"):
        b200c.Schedule(q_stages="2").validate()
    with pytest.raises(b200c.ScheduleError, match=r"warp_specialized=1 is an int; expected True or False"):
        b200c.Schedule(warp_specialized=1).validate()


def test_check_table_keeps_its_columns_with_a_failed_row():
    from b200c.check import format_table

    rows = [{"file": "a.py", "stage": 1, "name": "baseline", "warps": "cta:4", "threads": 128, "smem": 1, "tmem": 2,
             "registers": 168, "spill_bytes": 0, "stack_frame": 0},
            {"file": "/some/longer/path/bad.py", "stage": 0, "error": "q_stages=9 must be in 1..4"}]
    lines = format_table(rows, sass=False).splitlines()
    assert lines[2].startswith("    -  /some/longer/path/bad.py  FAILED")
    assert lines[0].index("warps per role") == lines[1].index("cta:4")  # the name column fits the file


def test_gpu_job_without_a_gpu_says_so_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gpu_job.py"), "--out", tempfile.mkdtemp()],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [
        "gpu_job.py: error: needs a CUDA GPU (an H100/H200 for the emulation and sm90a targets) and none is visible "
        "here; run it on the GPU machine"]


def test_readme_outputs_are_ignored_by_git():
    names = ["my_schedule.py", "ring4.cu", "ring4.svg", "stage07.png", "my_schedule.ptx", "bench.md", "k07.cu"]
    r = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True)
    assert sorted(r.stdout.split()) == sorted(names)
    assert "--md docs/" not in (ROOT / "README.md").read_text()  # the bench example no longer rewrites a tracked doc

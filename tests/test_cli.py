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
    assert "for i in [0, w.n_kv - 1)" in r.stdout
    assert "tcgen05.commit -> kv_empty[slot_v]" in r.stdout  # V(i) is the last token of K/V tile i


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
    assert "failed to run at line 1: RuntimeError: boom" in _one_line_error(run("compile", str(f)))
    # the innermost line of the schedule file, also inside a function it defines, and in a file it loads
    f.write_text("import b200c\n\ndef base():\n    return 1 / 0\n\nschedule = base()\n")
    assert "failed to run at line 4: ZeroDivisionError" in _one_line_error(run("compile", str(f)))
    g = tmp_path / "outer.py"
    g.write_text("from pathlib import Path\nimport b200c\nschedule = b200c.load_schedule_file(Path(__file__).with_name('s.py'))\n")
    line = _one_line_error(run("compile", str(g)))
    assert f"in schedule file {str(g)!r} at line 3: schedule file {str(f)!r} failed to run at line 4" in line


def test_infeasible_schedule(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import b200c\nschedule = b200c.Schedule(p_storage='tmem', warp_specialized=True, q_stages=3)\n")
    line = _one_line_error(run("compile", str(f)))
    assert "need 768 of 512 TMEM columns" in line
    assert line.startswith(f"b200c: error: {f}: ")  # a budget error names the schedule file


@pytest.mark.parametrize("emit", ["cu", "plan"])
def test_output_in_missing_folder(tmp_path, emit):
    out = tmp_path / "no" / "such" / f"k.{emit}"
    line = _one_line_error(run("compile", str(EXAMPLES[0]), "--emit", emit, "-o", str(out)))
    assert f"cannot write output '{out}': folder '{out.parent}' does not exist" in line


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


# ---- issue 11: version, help, one error format for every subcommand ---------------------


def test_version_and_python_m():
    import b200c

    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"b200c {b200c.__version__}"
    r = subprocess.run([sys.executable, "-m", "b200c", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "compile" in r.stdout and "exit status" in r.stdout


def test_every_option_has_help():
    import argparse

    from b200c.cli import make_parser

    parser = make_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subs.choices) == {"compile", "check", "build", "bench", "draw"}
    for name, sub in subs.choices.items():
        for action in sub._actions:
            assert action.help, f"b200c {name}: {action.option_strings or action.dest} has no help text"


@pytest.mark.parametrize("cmd", ["check", "build"])
@pytest.mark.parametrize("jobs", ["0", "-3", "two"])
def test_jobs_must_be_positive(cmd, jobs):
    line = _one_line_error(run(cmd, "-j", jobs, str(EXAMPLES[0])))
    assert "argument -j/--jobs: must be" in line and f"see 'b200c {cmd} --help'" in line


def test_unknown_option_one_line():
    line = _one_line_error(run("compile", str(EXAMPLES[0]), "--emit", "sass"))
    assert "invalid choice: 'sass'" in line


@pytest.mark.parametrize("cmd", ["compile", "check", "build"])
def test_missing_and_directory_schedule_files(cmd, tmp_path):
    assert "does not exist" in _one_line_error(run(cmd, str(tmp_path / "nope.py")))
    line = _one_line_error(run(cmd, str(ROOT / "examples")))
    assert "is a directory, not a file" in line


def test_directory_names_a_file_inside():
    line = _one_line_error(run("compile", "examples"))
    assert "pass one of its schedule files, e.g. 'examples/01_baseline.py'" in line


def test_other_schedule_names_are_listed(tmp_path):
    f = tmp_path / "two.py"
    f.write_text("import b200c\nfast = b200c.Schedule(name='fast')\nslow = b200c.Schedule(name='slow')\n")
    line = _one_line_error(run("compile", str(f)))
    assert "defines no module-level 'schedule'; it defines Schedules named 'fast', 'slow'" in line
    assert "schedule = fast" in line


def test_build_invalid_schedule_is_an_error(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import b200c\nschedule = b200c.Schedule(p_storage='tmem', warp_specialized=True, q_stages=3)\n")
    line = _one_line_error(run("build", str(f)))
    assert f"{f}: 3 Q stages at head dim 128 need 768 of 512 TMEM columns" in line


def test_build_without_nvcc_is_an_error(tmp_path):
    import os

    env = {**os.environ, "B200C_NVCC": str(tmp_path / "no-nvcc"), "B200C_CACHE_DIR": str(tmp_path / "c")}
    r = subprocess.run([sys.executable, "-m", "b200c", "build", str(EXAMPLES[0])], capture_output=True, text=True,
                       cwd=ROOT, env=env)
    assert "nvcc not found" in _one_line_error(r)


def test_check_without_nvcc_is_an_error(tmp_path):
    import os

    env = {**os.environ, "B200C_NVCC": str(tmp_path / "no-nvcc")}
    r = subprocess.run([sys.executable, "-m", "b200c", "check", str(EXAMPLES[0])], capture_output=True, text=True,
                       cwd=ROOT, env=env)
    assert "nvcc not found" in _one_line_error(r)


def test_output_is_a_directory(tmp_path):
    assert "is a directory; give a file name" in _one_line_error(run("compile", str(EXAMPLES[0]), "-o", str(tmp_path)))


def test_dash_output_means_stdout(tmp_path):
    r = run("compile", str(EXAMPLES[0]), "-o", "-", cwd=tmp_path)
    assert r.returncode == 0 and 'extern "C" __global__' in r.stdout
    assert not (tmp_path / "-").exists()


@pytest.mark.nvcc
@pytest.mark.parametrize("emit", ["ptx", "cubin"])
def test_nvcc_emits_leave_no_temporary_folder(tmp_path, emit):
    import os

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / f"k.{emit}"
    r = subprocess.run([sys.executable, "-m", "b200c", "compile", str(EXAMPLES[0]), "--emit", emit, "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0 and f"wrote {out}" in r.stderr
    assert list(tmp.iterdir()) == []


@pytest.mark.nvcc
def test_nvcc_emit_to_missing_folder_names_the_output(tmp_path):
    out = tmp_path / "missing" / "k.ptx"
    line = _one_line_error(run("compile", str(EXAMPLES[0]), "--emit", "ptx", "-o", str(out)))
    assert f"cannot write output '{out}'" in line and "/tmp/" not in line.replace(str(tmp_path), "")


@pytest.mark.nvcc
def test_cubin_to_stdout(tmp_path):
    r = subprocess.run([sys.executable, "-m", "b200c", "compile", str(EXAMPLES[0]), "--emit", "cubin", "-o", "-"],
                       capture_output=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout[:4] == b"\x7fELF" and b"wrote stdout" in r.stderr
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("content", [b"x\x00\xff\xfe", bytes(range(256)) * 4, b"\xef\xbb\xbf\xff\xff"])
def test_garbage_schedule_file_is_one_line(tmp_path, content):
    f = tmp_path / "garbage.py"
    f.write_bytes(content)
    line = _one_line_error(run("compile", str(f)))
    assert f"schedule file '{f}'" in line and "None" not in line
def test_compile_hopper_targets(tmp_path):
    from conftest import HOPPER_EXAMPLES

    out = tmp_path / "h.cu"
    r = run("compile", str(HOPPER_EXAMPLES[-1]), "--target", "sm90a", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == (ROOT / "tests/golden/hopper" / f"{HOPPER_EXAMPLES[-1].stem}.cu").read_text()
    r = run("compile", str(HOPPER_EXAMPLES[-1]), "--target", "sm90a", "--emit", "plan")
    assert "named barriers" in r.stdout and "backend sm90" in r.stdout
    # the default target is the schedule's own: a Hopper example compiles for sm90a without the flag
    out2 = tmp_path / "h2.cu"
    r = run("compile", str(HOPPER_EXAMPLES[-1]), "-o", str(out2))
    assert r.returncode == 0, r.stderr
    assert out2.read_text() == out.read_text()
    # a Hopper schedule for the sm100a target asked for: one line naming the knob
    line = _one_line_error(run("compile", str(HOPPER_EXAMPLES[-1]), "--target", "sm100a"))
    assert "sm100a" in line and ("block_m=64" in line or "pingpong" in line or "p_storage" in line)
    line = _one_line_error(run("compile", str(HOPPER_EXAMPLES[0]), "--target", "sm70"))
    assert "unknown target 'sm70'" in line


@pytest.mark.nvcc
def test_check_hopper_examples():
    from conftest import HOPPER_EXAMPLES

    r = run("check", "--target", "sm90a", "--no-sass", *map(str, HOPPER_EXAMPLES[-2:]))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 schedules ok (sm_90a, 0 spill bytes)" in r.stdout


def test_empty_output_name_is_an_error(tmp_path):
    for cmd in (("compile", str(EXAMPLES[6])), ("draw", str(EXAMPLES[6]))):
        line = _one_line_error(run(*cmd, "-o", ""))
        assert "-o was given an empty name" in line


def test_loading_never_mutates_sys_path_in_place(monkeypatch):
    # b200c check loads schedule files in a thread pool while other threads import modules; an in-place
    # insert/pop on sys.path under a running import made one CI run fail with "No module named 'jinja2'"
    import sys

    import b200c

    class NoInPlace(list):
        def insert(self, *a):
            raise AssertionError("sys.path.insert while loading a schedule file")

        def pop(self, *a):
            raise AssertionError("sys.path.pop while loading a schedule file")

    watched = NoInPlace(sys.path)
    monkeypatch.setattr(sys, "path", watched)
    s = b200c.load_schedule_file(EXAMPLES[17])  # loads the 17 files before it, each with its folder on sys.path
    assert s.blog_stage == 18
    assert list(watched) == list(sys.path)  # restored, and the list another thread held is untouched


def test_extension_that_names_another_format_gets_a_note(tmp_path):
    r = run("compile", str(EXAMPLES[6]), "--emit", "plan", "-o", str(tmp_path / "k.cu"))
    assert r.returncode == 0 and (tmp_path / "k.cu").read_text().startswith("plan for 'compute_pipeline'")
    assert "b200c: note: --emit plan writes the plan (text) into" in r.stderr and "pass --emit cu" in r.stderr
    r = run("compile", str(EXAMPLES[6]), "-o", str(tmp_path / "k2.cu"))
    assert r.returncode == 0 and "note" not in r.stderr


def test_a_schedule_outside_the_blog_has_no_stage_in_headers(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text("import b200c\nschedule = b200c.Schedule(name='mine')\n")
    plan = run("compile", str(f), "--emit", "plan")
    assert plan.stdout.splitlines()[0] == "plan for 'mine' (backend tcgen05)"
    cu = run("compile", str(f), "-o", "-")
    assert "// b200c generated kernel: mine\n" in cu.stdout
    assert "(blog stage 7)" in run("compile", str(EXAMPLES[6]), "-o", "-").stdout


def test_schedule_files_loading_each_other_in_a_cycle(tmp_path):
    load = "from pathlib import Path\nimport b200c\nschedule = b200c.load_schedule_file(Path(__file__).with_name({!r}))\n"
    (tmp_path / "a.py").write_text(load.format("b.py"))
    (tmp_path / "b.py").write_text(load.format("a.py"))
    (tmp_path / "me.py").write_text(load.format("me.py"))
    r = run("compile", "a.py", "--emit", "plan", cwd=tmp_path)
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and "RecursionError" not in r.stderr
    assert "schedule files load each other in a cycle: 'a.py' -> 'b.py' -> 'a.py'" in r.stderr
    r = run("compile", "me.py", "--emit", "plan", cwd=tmp_path)
    assert "schedule file 'me.py' loads itself" in r.stderr and len(r.stderr) < 300

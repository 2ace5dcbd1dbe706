"""The small frictions of issue 34 (a newcomer's first hour), each pinned: bare ``b200c`` prints the help,
"did you mean" for a mistyped subcommand, choice or option, a file that is not a schedule file is named
as such, ``check -j`` and ``build -j`` share one default, the Hopper GPU job's ``--out`` is a folder the
docs name, and a mod's kernel is printed by ``b200c compile --score-mod/--mask-mod``."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from b200c.cli import main, make_parser

ROOT = Path(__file__).resolve().parents[1]
H11 = ROOT / "examples/hopper/h11_persistent.py"


def _err(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("b200c: error:"), lines
    return lines[0]


def test_bare_b200c_prints_the_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("usage: b200c") and "compile" in out.out and "exit status" in out.out
    assert out.err == ""


def test_bare_b200c_on_the_command_line():
    r = subprocess.run([sys.executable, "-m", "b200c"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("usage: b200c") and "error" not in r.stderr


@pytest.mark.parametrize("argv, suggestion", [
    (["compil", "x.py"], "(did you mean 'compile'?)"),
    (["chek", "x.py"], "(did you mean 'check'?)"),
    (["compile", str(H11), "--ouput", "k.cu"], "(did you mean '--output'?)"),
    (["compile", str(H11), "--ouput=k.cu"], "(did you mean '--output'?)"),
    (["compile", str(H11), "--emit", "cuu"], "(did you mean 'cu'?)"),
    (["check", str(H11), "--jsn"], "(did you mean '--json'?)"),
])
def test_did_you_mean(argv, suggestion, capsys):
    line = _err(capsys, argv)
    assert suggestion in line and line.endswith("--help'")


def test_nothing_close_suggests_nothing(capsys):
    assert "did you mean" not in _err(capsys, ["compile", str(H11), "--bogus"])
    assert "did you mean" not in _err(capsys, ["frobnicate"])


@pytest.mark.parametrize("cmd", ["compile", "draw", "check", "build"])
def test_a_file_that_is_not_python_is_not_a_schedule_file(cmd, capsys):
    assert main([cmd, str(ROOT / "README.md")]) == 2
    line = capsys.readouterr().err.strip()
    assert "README.md' is not a schedule file" in line and "(.py)" in line
    assert "syntax" not in line.lower()


def test_check_and_build_share_the_jobs_default(monkeypatch):
    p = make_parser()
    check = p.parse_args(["check", "x.py"])
    build = p.parse_args(["build", "x.py"])
    assert check.jobs is None and build.jobs is None  # both: the CPU count
    helps = {name: next(a.help for a in sub._actions if "--jobs" in a.option_strings)
             for name, sub in p._subparsers._group_actions[0].choices.items() if name in ("check", "build")}
    assert all("default: CPU count" in h for h in helps.values()), helps

    import b200c.check
    import b200c.toolchain

    seen = {}
    monkeypatch.setattr(b200c.toolchain, "find_nvcc", lambda: "nvcc")
    monkeypatch.setattr(b200c.check, "check_files", lambda files, **kw: seen.update(kw) or 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    assert main(["check", str(H11)]) == 0 and seen["jobs"] == 7
    assert main(["check", "-j", "3", str(H11)]) == 0 and seen["jobs"] == 3


def test_docs_name_the_gpu_jobs_out_folder():
    """``--out $OUT`` named a variable nobody defines; the docs give a folder."""
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert "--out $OUT" not in f.read_text(), f.name


MODS = """import torch
table = torch.arange(16 * 64 * 64, dtype=torch.float32).reshape(16, 64, 64)

def bias(score, b, h, q_idx, kv_idx):
    return score + table[h, q_idx // 64, kv_idx // 64]

def local(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() < 256
"""


def test_compile_prints_the_kernel_with_mods(tmp_path, capsys, monkeypatch):
    """``--score-mod``/``--mask-mod`` print the CUDA ``b200c.attention(schedule=FILE, score_mod=...)``
    compiles: the same source as generate(schedule, mods=<the traced functions, small indices>)."""
    import msgspec

    import b200c
    from b200c.dsl.mods import trace_mods

    (tmp_path / "my_mods.py").write_text(MODS)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(H11), "--score-mod", "my_mods.py:bias", "--mask-mod", "my_mods.py:local"]) == 0
    src = capsys.readouterr().out
    assert "// score_mod, traced with torch.fx: score + cap0[h, q_idx // 64, kv_idx // 64]" in src
    assert "// mask_mod, traced with torch.fx: abs(q_idx - kv_idx) < 256" in src

    ns: dict = {}
    exec(MODS, ns)
    ms, _ = trace_mods(score_mod=ns["bias"], mask_mod=ns["local"])
    ms = msgspec.structs.replace(ms, small_indices=True)
    assert src == b200c.generate(b200c.load_schedule_file(H11), "sm90a", mods=ms).source
    assert main(["compile", str(H11)]) == 0
    assert "score_mod, traced" not in capsys.readouterr().out  # without the options: no mods


@pytest.mark.parametrize("argv, needle", [
    (["--score-mod", "my_mods.py"], "write FILE.py:FUNCTION or MODULE:FUNCTION"),
    (["--score-mod", "nope.py:bias"], "file 'nope.py' does not exist"),
    (["--score-mod", "my_mods.py:nope"], "defines no function 'nope'"),
    (["--score-mod", "no_such_module_b200c:f"], "cannot import module 'no_such_module_b200c'"),
    (["--score-mod", "my_mods.py:local"], "--score-mod: score_mod must take exactly 5 positional parameters"),
    (["--mask-mod", "my_mods.py:local", "--emit", "plan"], "not its plan; use --emit cu"),
])
def test_mod_option_mistakes_are_one_line(argv, needle, tmp_path, capsys, monkeypatch):
    (tmp_path / "my_mods.py").write_text(MODS)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(H11), *argv]) == 2
    line = capsys.readouterr().err.strip()
    assert needle in line and line.startswith("b200c: error:") and "\n" not in line
    assert not line.startswith(f"b200c: error: {H11}")  # the function's mistake, not the schedule file's


def test_plain_compile_stays_torch_free(tmp_path):
    code = ("import sys; from b200c.cli import main; rc = main(['compile', %r, '-o', %r]); "
            "print(rc, 'torch' in sys.modules)") % (str(H11), str(tmp_path / "k.cu"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "B200C_COMPILE_CACHE": "0"})
    assert r.stdout.split() == ["0", "False"], r.stderr
    assert re.search(r"__global__", (tmp_path / "k.cu").read_text())

"""`b200c check -j N` gives the rows of `-j 1` (issue 33): a schedule in a folder that also holds
b200c (the README's my_schedule.py in an editable repository root) once made the loader forget
b200c's own modules while another check thread imported them (KeyError 'b200c.codegen.render',
"partially initialized module"), in about one run of four.

The repository root is shared with other work, so the test does not write there: it builds a
folder laid out as the root is (a copy of the b200c package, ``examples`` linked in, the README's
my_schedule.py) and runs ``python -m b200c`` from it with that folder first on the import path,
so b200c is imported from the schedule's own folder exactly as from an editable root. nvcc is
replaced by a stand-in (``B200C_NVCC``) whose register count is a hash of the generated source,
so a row still follows its file's kernel while a run takes well under a second."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
B200C_SRC = ROOT / "b200c"  # the package copied into the root-like folder

README_SCHEDULE = """\
from pathlib import Path
import b200c

prev = b200c.load_schedule_file(Path(__file__).parent / "examples" / "07_compute_pipeline.py")
schedule = prev.replace(name="ring4", kv_stages=4)
"""

FAKE_NVCC = """\
import hashlib, sys
a = sys.argv[1:]
out, src = a[a.index("-o") + 1], [x for x in a if x.endswith(".cu")][-1]
h = int(hashlib.sha256(open(src, "rb").read()).hexdigest(), 16)
open(out, "wb").write(b"stand-in cubin")
print(f"ptxas info    : Used {h % 251 + 1} registers")
print("ptxas info    : 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads")
"""


def _layout(tmp: Path):
    """(root-like folder, files to check, environment) under ``tmp``."""
    root = tmp / "root"
    root.mkdir()
    shutil.copytree(B200C_SRC, root / "b200c", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "examples").symlink_to(ROOT / "examples")
    (root / "my_schedule.py").write_text(README_SCHEDULE)
    (root / "second.py").write_text(README_SCHEDULE.replace("07_compute_pipeline", "14_persistent")
                                    .replace('"ring4", kv_stages=4', '"second", kv_stages=3'))
    other = tmp / "elsewhere"
    other.mkdir()
    (other / "h33_check_knobs.py").write_text("STAGES = 3\n")
    (other / "my_schedule.py").write_text(textwrap.dedent(f"""\
        import b200c
        from h33_check_knobs import STAGES
        schedule = b200c.load_schedule_file({str(ROOT / "examples/12_split_correction.py")!r}).replace(
            name="elsewhere", kv_stages=STAGES)
        """))  # the same file name as the root's: each -j thread must write its own sources
    nvcc = tmp / "nvcc"
    nvcc.write_text(f"#!{sys.executable}\n" + FAKE_NVCC)
    nvcc.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(root), "B200C_NVCC": str(nvcc)}
    files = ["my_schedule.py", "examples/18_tma_l2_promotion.py", "second.py", str(other / "my_schedule.py"),
             str(ROOT / "examples/variants/ring4.py")]
    return root, files, env


def _rows(root, files, env, jobs, cache):
    env = {**env, "B200C_CACHE_DIR": str(cache)}  # a cold compile cache per run (temporary)
    r = subprocess.run([sys.executable, "-m", "b200c", "check", "--no-sass", "--json", "-j", str(jobs), *files],
                       cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"-j {jobs}: exit {r.returncode}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout)


def test_parallel_check_gives_the_rows_of_one_thread(tmp_path):
    root, files, env = _layout(tmp_path)
    where = subprocess.run([sys.executable, "-c", "import b200c; print(b200c.__file__)"], cwd=root, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where) == root / "b200c" / "__init__.py"  # b200c comes from the schedule's folder
    serial = _rows(root, files, env, 1, tmp_path / "cache-serial")
    assert [r.get("name") for r in serial] == ["ring4", "tma_l2_promotion", "second", "elsewhere", "ring4"]
    assert not [r for r in serial if "error" in r], serial
    assert serial[0]["registers"] != serial[3]["registers"]  # the stand-in's rows follow the kernel
    for i in range(20):
        assert _rows(root, files, env, 4, tmp_path / f"cache-{i}") == serial, f"run {i}"

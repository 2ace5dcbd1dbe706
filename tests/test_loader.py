"""The schedule loader forgets only the schedule's own helper modules (issue 33): a helper next to the
schedule is run again on the next load, while b200c's modules and installed packages stay imported
wherever the schedule file lies (a schedule in an editable repository root sits next to b200c/)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import b200c
from b200c.dsl import load_schedule_file, load_with_dependencies

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def _bump(path: Path):
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))


def test_b200c_modules_stay_when_the_schedule_lies_next_to_b200c(tmp_path):
    """A folder laid out as an editable repository root (a copy of b200c beside the schedule; b200c
    imported from it): b200c modules imported for the first time during the load (as another
    `b200c check` thread does) and those imported before stay in sys.modules, the same objects."""
    root = tmp_path / "root"
    shutil.copytree(ROOT / "b200c", root / "b200c", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "examples").symlink_to(ROOT / "examples")
    _write(root / "my_schedule.py", """\
        from pathlib import Path
        import b200c
        import b200c.check  # first imported during the load
        prev = b200c.load_schedule_file(Path(__file__).parent / "examples" / "07_compute_pipeline.py")
        schedule = prev.replace(name="ring4", kv_stages=4)
        """)
    script = textwrap.dedent("""\
        import json, sys
        import b200c
        assert "b200c.check" not in sys.modules
        before = {k: v for k, v in sys.modules.items() if k == "b200c" or k.startswith("b200c.")}
        s = b200c.load_schedule_file("my_schedule.py")
        s2, deps = b200c.dsl.load_with_dependencies("my_schedule.py")
        print(json.dumps({"file": b200c.__file__, "name": s.name,
                          "lost": sorted(k for k, m in before.items() if sys.modules.get(k) is not m),
                          "check": "b200c.check" in sys.modules, "deps": [p for p, _ in deps]}))
        """)
    r = subprocess.run([sys.executable, "-c", script], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert Path(out["file"]) == root / "b200c" / "__init__.py" and out["name"] == "ring4"
    assert out["lost"] == [] and out["check"]
    pkg = (root / "b200c").resolve()  # b200c's own modules are not the schedule's helpers (whatever the clone's name)
    assert not [p for p in out["deps"] if Path(p).resolve().is_relative_to(pkg)], out["deps"]


def test_helper_next_to_the_schedule_is_run_again(tmp_path):
    """A helper module and a helper package beside the schedule (its folder is on sys.path only while it
    runs): forgotten after each load, so an edit is seen, and listed as dependencies."""
    knobs = _write(tmp_path / "h33_loader_knobs.py", "STAGES = 1\n")
    _write(tmp_path / "h33_loader_pkg" / "__init__.py", "")
    names = _write(tmp_path / "h33_loader_pkg" / "names.py", "NAME = 'first'\n")
    f = _write(tmp_path / "s.py", """\
        import b200c
        from h33_loader_knobs import STAGES
        from h33_loader_pkg.names import NAME
        schedule = b200c.Schedule(name=f"{NAME}{STAGES}")
        """)
    s, deps = load_with_dependencies(f)
    assert s.name == "first1"
    assert {str(knobs.resolve()), str(names.resolve()), str(f.resolve())} <= {p for p, _ in deps}
    assert not [m for m in sys.modules if m.startswith(("h33_loader_knobs", "h33_loader_pkg"))]
    knobs.write_text("STAGES = 2\n")
    names.write_text("NAME = 'second'\n")
    _bump(knobs)
    _bump(names)
    assert load_schedule_file(f).name == "second2"


def test_a_package_on_sys_path_inside_the_folder_stays(tmp_path, monkeypatch):
    """Packages importable without the schedule's folder stay imported and are not run again: one in a
    folder on sys.path below the schedule's (a virtual environment inside a project) and one an
    import finder maps into the schedule's folder (an editable install)."""
    runs = tmp_path / "runs.txt"
    site = tmp_path / "venv" / "site-packages"
    for pkg_dir in (site / "h33_installed", tmp_path / "h33_editable"):
        _write(pkg_dir / "__init__.py", f"open({str(runs)!r}, 'a').write(__name__ + '\\n')\n")
    monkeypatch.syspath_prepend(str(site))

    import importlib.machinery
    import importlib.util

    class Editable:  # maps one name into the schedule's folder, as setuptools' editable finder does
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "h33_editable":
                return importlib.util.spec_from_file_location(name, tmp_path / "h33_editable" / "__init__.py")
            return None

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Editable])
    for m in ("h33_installed", "h33_editable"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    f = _write(tmp_path / "s.py", """\
        import b200c
        import h33_installed, h33_editable
        schedule = b200c.Schedule(name="pk")
        """)
    assert load_schedule_file(f).name == "pk"
    first = sys.modules["h33_installed"], sys.modules["h33_editable"]
    assert load_schedule_file(f).name == "pk"
    assert (sys.modules["h33_installed"], sys.modules["h33_editable"]) == first
    assert runs.read_text().split() == ["h33_installed", "h33_editable"]  # each run once

"""Issue 47 item 5: the nvcc release b200c is tested with is pinned ([nvcc] extra, README), recognised, named by
`b200c check`, and any other release gets one UntestedCompilerWarning per process and nvcc; the nvcc tests use
the nvcc b200c finds (not only one on PATH)."""
import os
import stat
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

import b200c
from b200c import toolchain

ROOT = Path(__file__).resolve().parents[1]


def _fake_nvcc(tmp_path, release: str) -> str:
    """An executable that prints nvcc --version for ``release`` (``13.5.37``)."""
    major_minor = ".".join(release.split(".")[:2])
    p = tmp_path / "nvcc"
    p.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                 f"echo 'Cuda compilation tools, release {major_minor}, V{release}'\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_the_extra_pins_the_tested_release():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = dict(r.split("==") for r in extras["nvcc"])
    assert {k: v for k, v in pins.items() if k != "nvidia-cuda-cccl"} == {
        "nvidia-cuda-nvcc": "13.0.88", "nvidia-cuda-crt": "13.0.88", "nvidia-nvvm": "13.0.88"}
    assert pins["nvidia-cuda-cccl"].startswith(toolchain.TESTED_NVCC + ".")
    assert all(v.startswith(toolchain.TESTED_NVCC + ".") for v in pins.values())
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[nvcc]"' in readme and "pip install nvidia-cuda-nvcc" not in readme


def test_releases_are_read_and_judged(tmp_path):
    assert toolchain.nvcc_release(_fake_nvcc(tmp_path, "13.0.88")) == "13.0.88"
    assert toolchain.tested("13.0.88") and toolchain.tested("13.0")
    assert not toolchain.tested("13.5.37") and not toolchain.tested("13.00.1") and not toolchain.tested("unknown")


def test_an_untested_release_warns_once(tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "_warned", set())
    monkeypatch.setattr(toolchain, "_version_cache", {})
    new = _fake_nvcc(tmp_path, "13.5.37")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert toolchain.warn_untested(new) == "13.5.37"
        assert toolchain.warn_untested(new) == "13.5.37"
    hits = [w for w in seen if issubclass(w.category, b200c.UntestedCompilerWarning)]
    assert len(hits) == 1 and "nvcc 13.5.37" in str(hits[0].message) and ".[nvcc]" in str(hits[0].message)
    (tmp_path / "t").mkdir()
    tested = _fake_nvcc(tmp_path / "t", "13.0.88")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        toolchain.warn_untested(tested)
    assert not [w for w in seen if issubclass(w.category, b200c.UntestedCompilerWarning)]


def test_nvcc_tests_use_the_nvcc_b200c_finds(monkeypatch, tmp_path):
    """conftest's nvcc marker follows find_nvcc: an nvcc named by B200C_NVCC (or a wheel's) counts, PATH alone
    does not decide."""
    sys.path.insert(0, str(ROOT / "tests"))
    import conftest

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc on PATH
    monkeypatch.setenv("B200C_NVCC", _fake_nvcc(tmp_path, "13.0.88"))
    assert conftest._has_nvcc()
    monkeypatch.setenv("B200C_NVCC", str(tmp_path / "missing"))
    assert not conftest._has_nvcc()


@pytest.mark.nvcc
def test_check_names_the_compiler(capsys):
    from b200c.check import check_files

    assert check_files([str(ROOT / "examples/01_baseline.py")], sass=False, jobs=1) == 0
    out = capsys.readouterr()
    nvcc = toolchain.find_nvcc()
    assert f"nvcc {toolchain.nvcc_release(nvcc)} at {nvcc}" in out.out + out.err

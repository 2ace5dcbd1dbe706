"""Finding nvcc without a toolkit on PATH: /usr/local/cuda/bin, then pip's CUDA compiler wheels
(nvidia-cuda-nvcc: site-packages/nvidia/cu13/bin/nvcc), whose missing C++ core headers (nvidia-cuda-cccl:
nv/target) are named before nvcc stops on them."""
import os
import sys

import pytest

from b200c import toolchain
from b200c.errors import BuildError


def _fake_wheel(root, with_cccl: bool):
    bin_ = root / "site-packages" / "nvidia" / "cu13" / "bin"
    bin_.mkdir(parents=True)
    nvcc = bin_ / "nvcc"
    nvcc.write_text("#!/bin/sh\necho fake\n")
    nvcc.chmod(0o755)
    if with_cccl:
        (root / "site-packages" / "nvidia" / "cu13" / "include" / "nv").mkdir(parents=True)
        (root / "site-packages" / "nvidia" / "cu13" / "include" / "nv" / "target").write_text("")
    return nvcc


@pytest.fixture
def no_toolkit(monkeypatch, tmp_path):
    monkeypatch.delenv("B200C_NVCC", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    real = os.path.isfile
    monkeypatch.setattr(toolchain.Path, "is_file", lambda self: False if str(self).startswith("/usr/local/cuda")
                        else real(str(self)))


def test_wheel_nvcc_is_found(no_toolkit, tmp_path, monkeypatch):
    nvcc = _fake_wheel(tmp_path, with_cccl=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site-packages")] + sys.path)
    assert toolchain.find_nvcc() == str(nvcc)


def test_wheel_nvcc_without_its_headers_names_the_wheel(no_toolkit, tmp_path, monkeypatch):
    _fake_wheel(tmp_path, with_cccl=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site-packages")] + sys.path)
    with pytest.raises(BuildError, match="pip install nvidia-cuda-cccl"):
        toolchain.find_nvcc()


def test_nothing_found_says_where_it_looked(no_toolkit, monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "site-packages" not in p] or ["/nonexistent"])
    monkeypatch.setattr(toolchain, "_wheel_nvccs", lambda: [])
    with pytest.raises(BuildError, match=r"/usr/local/cuda/bin or pip's CUDA compiler wheels"):
        toolchain.find_nvcc()

"""Shared pytest options and skips.

``--update-golden`` rewrites tests/golden/*.cu from the current generator
(review the diff before committing). ``gpu`` tests need a CUDA GPU; ``nvcc``
tests need nvcc on PATH; both skip cleanly otherwise.
"""
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))
HOPPER_EXAMPLES = sorted((ROOT / "examples/hopper").glob("h[0-9][0-9]_*.py"))


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="regenerate tests/golden/*.cu instead of comparing")


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    gpu = _has_gpu()
    nvcc = shutil.which("nvcc") is not None
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (run on the H200 with the emulation target)"))
        if "nvcc" in item.keywords and not nvcc:
            item.add_marker(pytest.mark.skip(reason="needs nvcc on PATH"))


@pytest.fixture(scope="session")
def examples():
    """Example schedule files in stage order."""
    return EXAMPLES


@pytest.fixture(scope="session")
def generated():
    """{example stem: GeneratedKernel} for every example, generated once."""
    import b200c

    return {p.stem: b200c.generate(b200c.load_schedule_file(p)) for p in EXAMPLES}


@pytest.fixture(scope="session")
def generated_sm90():
    """{Hopper example stem: GeneratedKernel for target sm90a}, generated once."""
    import b200c

    return {p.stem: b200c.generate(b200c.load_schedule_file(p), "sm90a") for p in HOPPER_EXAMPLES}

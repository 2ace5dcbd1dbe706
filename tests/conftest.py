"""Shared pytest options and skips.

``--update-golden`` rewrites tests/golden/*.cu from the current generator and
tests/golden/sass_loops.json from the current SASS (review the diff before
committing). ``gpu`` tests need a CUDA GPU; ``nvcc`` tests need the nvcc b200c finds;
both skip cleanly otherwise.
"""
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py"))
VARIANTS = sorted((ROOT / "examples" / "variants").glob("*.py"))
HOPPER_EXAMPLES = sorted((ROOT / "examples/hopper").glob("h[0-9][0-9]_*.py"))


def op_recording_mode():
    """A torch TorchDispatchMode that records the name of every op it sees (``.ops``) and runs it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    return Seen()


def schedule_key(path: Path) -> str:
    """``18_tma_l2_promotion`` or ``variants/ring4``: a schedule file's name under examples/."""
    return path.relative_to(ROOT / "examples").with_suffix("").as_posix()


def pytest_configure(config):
    """Hermetic: every test process uses a temporary kernel and compile cache, never the user's
    (``$B200C_TEST_CACHE_DIR`` names one to reuse across runs, e.g. on the GPU machine)."""
    import tempfile

    root = os.environ.get("B200C_TEST_CACHE_DIR")
    if not root:
        root = tempfile.mkdtemp(prefix="b200c-test-cache-")
        config._b200c_cache_tmp = root
    os.environ["B200C_CACHE_DIR"] = root


def pytest_unconfigure(config):
    root = getattr(config, "_b200c_cache_tmp", None)
    if root:
        shutil.rmtree(root, ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="regenerate tests/golden/*.cu instead of comparing")


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def _has_nvcc() -> bool:
    """Whether b200c finds an nvcc (b200c.toolchain.find_nvcc: B200C_NVCC, PATH, CUDA_HOME, /usr/local/cuda or
    pip's compiler wheels): the nvcc tests use the one b200c builds with."""
    try:
        from b200c.toolchain import find_nvcc

        find_nvcc()
        return True
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    gpu = _has_gpu()
    nvcc = _has_nvcc()
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU (run on the H200 with the emulation target)"))
        if "nvcc" in item.keywords and not nvcc:
            item.add_marker(pytest.mark.skip(reason="needs nvcc (b200c.toolchain.find_nvcc found none)"))


@pytest.fixture(scope="session")
def examples():
    """Example schedule files in stage order."""
    return EXAMPLES


@pytest.fixture(scope="session")
def generated():
    """{example stem: GeneratedKernel} for every example, generated once."""
    import b200c

    return {p.stem: b200c.generate(b200c.load_schedule_file(p)) for p in EXAMPLES}


class Sm100aBuild:
    """One schedule compiled for sm_100a twice: ``plain`` (the build's flags)
    and ``lines`` (plus ``-lineinfo``); each a CompileResult, or the
    BuildError re-raised where it is used."""

    def __init__(self, source, plain, lines):
        self.source, self._plain, self._lines = source, plain, lines

    @staticmethod
    def _get(r):
        if isinstance(r, Exception):
            raise r
        return r

    @property
    def plain(self):
        return self._get(self._plain)

    @property
    def lines(self):
        return self._get(self._lines)


@pytest.fixture(scope="session")
def sm100a_builds(tmp_path_factory):
    """{schedule key: Sm100aBuild} for every example and variant, compiled in
    parallel once per session (the nvcc tests share it)."""
    import b200c
    from b200c.errors import B200cError
    from b200c.nvcc import compile_cuda
    from b200c.sass.roles import LINEINFO

    if not _has_nvcc():
        pytest.skip("needs nvcc (b200c.toolchain.find_nvcc found none)")
    d = tmp_path_factory.mktemp("sm100a")
    sources = {schedule_key(p): b200c.generate(b200c.load_schedule_file(p)).source for p in EXAMPLES + VARIANTS}

    def build(job):
        key, extra = job
        out = d / (key.replace("/", "__") + ("_lines" if extra else "") + ".cubin")
        try:
            return compile_cuda(sources[key], out, "cubin", "sm_100a", extra=extra)
        except B200cError as e:
            return e

    jobs = [(k, extra) for k in sources for extra in ((), LINEINFO)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        results = dict(zip(jobs, ex.map(build, jobs)))
    return {k: Sm100aBuild(src, results[(k, ())], results[(k, LINEINFO)]) for k, src in sources.items()}
@pytest.fixture(scope="session")
def generated_sm90():
    """{Hopper example stem: GeneratedKernel for target sm90a}, generated once."""
    import b200c

    return {p.stem: b200c.generate(b200c.load_schedule_file(p), "sm90a") for p in HOPPER_EXAMPLES}

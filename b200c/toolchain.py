"""nvcc discovery and nvcc flags of a target.

What each target builds with is its record's (:mod:`b200c.codegen.targets`):
``nvcc_flags`` (architecture, defines), ``include_headers`` (``-I`` the
b200c headers folder; their text joins the cache key) and ``bounded_waits``:

* ``"always"`` (the emulation target): every mbarrier wait is bounded, bound
  ``$B200C_WAIT_TIMEOUT_MS`` (default 4000 ms);
* ``"debug"`` (sm90a): bounded only in a debug build, ``B200C_BOUNDED_WAIT=1``
  (part of the cache key);
* ``"never"`` (sm100a).
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

from .errors import BuildError

log = logging.getLogger("b200c.runtime")

_version_cache: dict[str, str] = {}


TOOLKIT_HOMES = ("/usr/local/cuda",)  # where a CUDA toolkit lives when nothing says so

# the nvcc releases b200c's spill-free builds and pinned SASS counts are checked with (``pip install -e
# ".[nvcc]"`` installs this one); another release gets one UntestedCompilerWarning per process
TESTED_NVCC = "13.0"
_warned: set = set()


def _wheel_nvccs() -> list:
    """nvcc executables of pip's CUDA compiler wheels (``nvidia-cuda-nvcc``: ``site-packages/nvidia/cu13/bin``,
    or ``nvidia/cuda_nvcc/bin`` for the CUDA 12 wheels), in ``sys.path`` order."""
    import sys

    out = []
    for root in sys.path:
        for rel in ("nvidia/cu13/bin/nvcc", "nvidia/cuda_nvcc/bin/nvcc"):
            cand = Path(root or ".") / rel
            if cand.is_file() and os.access(cand, os.X_OK):
                out.append(str(cand))
    return out


def check_wheel_nvcc(nvcc: str) -> None:
    """A wheel's nvcc compiles only with the CUDA C++ core headers beside it (``nv/target``, from the
    ``nvidia-cuda-cccl`` wheel: without it nvcc stops on ``cuda_fp16.h``: fatal error: nv/target).

    Raises:
        BuildError: the header is missing (the message names the wheel to install).
    """
    include = Path(nvcc).parent.parent / "include"
    if "site-packages" in Path(nvcc).parts and not (include / "nv" / "target").is_file():
        raise BuildError(f"{nvcc} is pip's nvcc but {include} has no nv/target (the CUDA C++ core headers): "
                         f"pip install nvidia-cuda-cccl of the same CUDA version as nvidia-cuda-nvcc")


def find_nvcc() -> str:
    """Path of nvcc: env ``B200C_NVCC``, else ``PATH``, else ``$CUDA_HOME/bin/nvcc`` (or ``$CUDA_PATH``),
    else ``/usr/local/cuda/bin/nvcc``, else the nvcc of pip's CUDA compiler wheels (``pip install
    nvidia-cuda-nvcc nvidia-cuda-cccl``, the versions of the CUDA runtime torch uses: the same compiler as
    the toolkit's, so the same SASS; it needs a host C++ compiler on PATH).

    Raises:
        BuildError: none of them names an executable nvcc, or a wheel's nvcc lacks its headers.
    """
    env = os.environ.get("B200C_NVCC")
    if env:
        p = shutil.which(env)
        if p is None:
            raise BuildError(
                f"nvcc not found: B200C_NVCC={env!r} is not an executable; "
                "set B200C_NVCC to nvcc's path or CUDA_HOME to the CUDA toolkit"
            )
        return p
    p = shutil.which("nvcc")
    if p:
        return p
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *TOOLKIT_HOMES):
        if home:
            cand = Path(home) / "bin" / "nvcc"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    wheels = _wheel_nvccs()
    if wheels:
        check_wheel_nvcc(wheels[0])
        return wheels[0]
    raise BuildError("nvcc not found on PATH, in $CUDA_HOME/bin, /usr/local/cuda/bin or pip's CUDA compiler wheels; "
                     "install the CUDA toolkit or the tested compiler wheels (pip install -e \".[nvcc]\" in a b200c "
                     "checkout), or set B200C_NVCC")


def nvcc_release(nvcc: str) -> str:
    """The release of ``nvcc`` as ``nvcc --version`` prints it (``"13.0.88"``: ``V13.0.88``; ``"13.0"`` when
    only ``release 13.0`` is printed), or ``"unknown"`` (no release printed, or ``--version`` failed: the
    build itself reports a broken nvcc)."""
    try:
        text = nvcc_version(nvcc)
    except BuildError:
        return "unknown"
    import re

    m = re.search(r"\bV(\d+\.\d+\.\d+)", text) or re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else "unknown"


def tested(release: str) -> bool:
    """Whether ``release`` (:func:`nvcc_release`) is the nvcc release b200c is tested with (:data:`TESTED_NVCC`)."""
    return release == TESTED_NVCC or release.startswith(TESTED_NVCC + ".")


def warn_untested(nvcc: str) -> str:
    """``nvcc``'s release; once per process and nvcc path, an :class:`b200c.errors.UntestedCompilerWarning`
    when it is not the tested one (:data:`TESTED_NVCC`): ptxas's register allocation differs between releases,
    so a build checked spill-free with the tested one may spill with another (the examples and built-in
    presets are also checked with nvcc 13.5.37, where earlier generated code spilled 8-184 B) and the pinned
    SASS counts differ. An nvcc whose release cannot be read is not warned about."""
    release = nvcc_release(nvcc)
    if release != "unknown" and not tested(release) and nvcc not in _warned:
        import warnings

        from .errors import UntestedCompilerWarning

        _warned.add(nvcc)
        warnings.warn(f"{nvcc} is nvcc {release}; b200c's spill-free builds and SASS counts are checked with nvcc "
                      f"{TESTED_NVCC} (pip install -e \".[nvcc]\" installs it; or B200C_NVCC): with another release "
                      f"ptxas may allocate registers differently: a tuned schedule may spill, and SASS counts differ from "
                      f"the pinned ones", UntestedCompilerWarning, stacklevel=3)
    return release


def nvcc_version(nvcc: str) -> str:
    """Text of ``nvcc --version`` (cached per process and per nvcc path).

    Raises:
        BuildError: nvcc cannot be run or exits non-zero.
    """
    if nvcc not in _version_cache:
        try:
            r = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            raise BuildError(f"cannot run nvcc {nvcc!r}: {e}; set B200C_NVCC or CUDA_HOME") from None
        if r.returncode != 0:
            raise BuildError(f"{nvcc} --version failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[:200]}")
        _version_cache[nvcc] = r.stdout.strip()
    return _version_cache[nvcc]


def nvcc_flags(target) -> list[str]:
    """nvcc flags (without input/output) of a target (a name or a
    :class:`~b200c.codegen.targets.Target`).

    Raises:
        TargetError: unknown target.
        BuildError: ``B200C_WAIT_TIMEOUT_MS`` is not a whole number.
    """
    from .codegen.targets import resolve

    t = resolve(target)
    flags = [t.nvcc_flags[0], "-cubin", "-O3", "-std=c++17", *t.nvcc_flags[1:]]
    if t.include_headers:
        from .codegen import cuda_include_dir

        flags += ["-I", cuda_include_dir()]
    if t.bounded_waits == "debug" and os.environ.get("B200C_BOUNDED_WAIT", "") in ("1", "true", "yes"):
        flags.append("-DB200C_BOUNDED_WAIT")
    if t.bounded_waits == "always" or "-DB200C_BOUNDED_WAIT" in flags:
        timeout = os.environ.get("B200C_WAIT_TIMEOUT_MS")
        if timeout:  # longer bounded waits, e.g. under compute-sanitizer (part of the cache key)
            if not timeout.isdigit():
                raise BuildError(f"B200C_WAIT_TIMEOUT_MS={timeout!r} must be a whole number of milliseconds")
            flags.append(f"-DB200C_WAIT_TIMEOUT_MS={int(timeout)}")
    return flags


def header_digest_text(target) -> str:
    """Contents of the b200c headers a target's build reads (``""`` unless its record has
    ``include_headers``; the generated sources inline their own header).

    The emulation target includes headers from :func:`b200c.codegen.cuda_include_dir`;
    their text goes into the cache key so editing them rebuilds.
    """
    from .codegen.targets import resolve

    if not resolve(target).include_headers:
        return ""
    from .codegen import cuda_include_dir

    parts = []
    for p in sorted(Path(cuda_include_dir()).glob("*.cuh")):
        parts.append(f"// {p.name}\n{p.read_text()}")
    return "\n".join(parts)

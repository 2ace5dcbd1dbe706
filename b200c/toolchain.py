"""Build targets, nvcc discovery and nvcc flags.

Targets:

* ``"sm100a"``: the native B200 kernel (``nvcc -arch=sm_100a``).
* ``"emulate"``: the same source built for Hopper (``-arch=sm_90a``) with the
  tcgen05 software model (``-DB200C_EMULATE``) and bounded mbarrier waits
  (``-DB200C_BOUNDED_WAIT``, bound ``$B200C_WAIT_TIMEOUT_MS``, default 4000 ms);
  correctness only, never speed.
* ``"sm90a"``: the native Hopper kernel of the sm90 backend
  (``-gencode=arch=compute_90a,code=sm_90a``: ``-arch=sm_90a`` would also run
  a plain sm_90 pass, which rejects wgmma). ``B200C_BOUNDED_WAIT=1`` builds it
  with bounded mbarrier waits (a debug build; part of the cache key).
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

from .errors import BuildError

log = logging.getLogger("b200c.runtime")

TARGETS = ("sm100a", "emulate", "sm90a")
# spellings accepted for the native target; the value says whether to log a note
_NATIVE_ALIASES = {"sm100a": False, "sm_100a": False, "sm_100": True, "sm100": True}
_HOPPER_ALIASES = {"sm90a": False, "sm_90a": False, "sm_90": True, "sm90": True}

_version_cache: dict[str, str] = {}


def normalize_target(target: str) -> str:
    """Return the canonical target name: ``"sm100a"``, ``"emulate"`` or ``"sm90a"``.

    ``"sm_100"``/``"sm100"`` are upgraded to ``"sm100a"`` (tcgen05 and TMEM
    exist only in the arch-specific ``sm_100a`` ISA) with a logged note, and
    ``"sm_90"``/``"sm90"`` to ``"sm90a"`` (wgmma and setmaxnreg are sm_90a-only).

    Raises:
        BuildError: unknown target (the message lists the allowed ones).
    """
    t = str(target).strip().lower()
    if t == "emulate":
        return t
    if t in _NATIVE_ALIASES:
        if _NATIVE_ALIASES[t]:
            log.info("b200c: target %r upgraded to 'sm100a' (tcgen05 needs the arch-specific sm_100a ISA)", target)
        return "sm100a"
    if t in _HOPPER_ALIASES:
        if _HOPPER_ALIASES[t]:
            log.info("b200c: target %r upgraded to 'sm90a' (wgmma needs the arch-specific sm_90a ISA)", target)
        return "sm90a"
    raise BuildError(f"unknown build target {target!r}; allowed: 'sm_100a' (also spelled 'sm100a', 'sm_100'), "
                     f"'emulate', 'sm_90a' (also 'sm90a', 'sm_90')")


def find_nvcc() -> str:
    """Path of nvcc: env ``B200C_NVCC``, else ``PATH``, else ``$CUDA_HOME/bin/nvcc``.

    Raises:
        BuildError: none of them names an executable nvcc.
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
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        cand = Path(home) / "bin" / "nvcc"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    raise BuildError("nvcc not found on PATH or in $CUDA_HOME/bin; set B200C_NVCC or CUDA_HOME")


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


def nvcc_flags(target: str) -> list[str]:
    """nvcc flags (without input/output) for a canonical target.

    Raises:
        BuildError: unknown target.
    """
    target = normalize_target(target)
    common = ["-cubin", "-O3", "-std=c++17"]
    if target == "sm100a":
        return ["-arch=sm_100a", *common]
    if target == "sm90a":
        return ["-gencode=arch=compute_90a,code=sm_90a", *common, *_sm90_debug_flags()]
    from .codegen import cuda_include_dir

    flags = ["-arch=sm_90a", *common, "-DB200C_EMULATE", "-DB200C_BOUNDED_WAIT", "-I", cuda_include_dir()]
    timeout = os.environ.get("B200C_WAIT_TIMEOUT_MS")
    if timeout:  # longer bounded waits, e.g. under compute-sanitizer (part of the cache key)
        if not timeout.isdigit():
            raise BuildError(f"B200C_WAIT_TIMEOUT_MS={timeout!r} must be a whole number of milliseconds")
        flags.append(f"-DB200C_WAIT_TIMEOUT_MS={int(timeout)}")
    return flags


def _sm90_debug_flags() -> list[str]:
    """``B200C_BOUNDED_WAIT=1``: bounded mbarrier waits in sm90a builds (debug)."""
    if os.environ.get("B200C_BOUNDED_WAIT", "") not in ("1", "true", "yes"):
        return []
    flags = ["-DB200C_BOUNDED_WAIT"]
    timeout = os.environ.get("B200C_WAIT_TIMEOUT_MS")
    if timeout:
        if not timeout.isdigit():
            raise BuildError(f"B200C_WAIT_TIMEOUT_MS={timeout!r} must be a whole number of milliseconds")
        flags.append(f"-DB200C_WAIT_TIMEOUT_MS={int(timeout)}")
    return flags


def header_digest_text(target: str) -> str:
    """Contents of the b200c headers a target's build reads (``""`` for sm100a).

    The emulation target includes headers from :func:`b200c.codegen.cuda_include_dir`;
    their text goes into the cache key so editing them rebuilds.
    """
    if normalize_target(target) != "emulate":
        return ""
    from .codegen import cuda_include_dir

    parts = []
    for p in sorted(Path(cuda_include_dir()).glob("*.cuh")):
        parts.append(f"// {p.name}\n{p.read_text()}")
    return "\n".join(parts)

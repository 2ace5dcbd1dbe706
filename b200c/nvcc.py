"""Run nvcc on generated sources (CLI ``--emit ptx|cubin`` and ``check``).

Targets: ``sm_100a`` (native; plain ``sm_100`` is upgraded because every
``tcgen05`` instruction needs the ``a`` suffix, sm100-facts.md) and the
emulated ``sm_90a`` build (``-DB200C_EMULATE -DB200C_BOUNDED_WAIT``).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError

NATIVE_ARCH = "sm_100a"
EMULATED_ARCH = "sm_90a"


def find_nvcc() -> str:
    """Path of nvcc: ``$B200C_NVCC``, else PATH, else ``$CUDA_HOME/bin``.

    Raises:
        BuildError: none found.
    """
    env = os.environ.get("B200C_NVCC")
    if env:
        if Path(env).is_file() and os.access(env, os.X_OK):
            return env
        raise BuildError(f"B200C_NVCC={env!r} is not an executable file; point it at nvcc or unset it")
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    raise BuildError(
        "nvcc not found: install the CUDA toolkit (12.8+ for sm_100a), put nvcc on PATH, "
        "or set B200C_NVCC or CUDA_HOME"
    )


@functools.lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    """``nvcc --version`` text (part of the build-cache key)."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise BuildError(f"cannot run {nvcc}: {e}") from None
    return out.stdout.strip()


def arch_flags(target: str) -> list:
    """nvcc flags of a target: ``sm_100a`` (``sm_100`` upgraded) or ``emulate``.

    Raises:
        BuildError: unknown target.
    """
    from .codegen import cuda_include_dir

    if target in ("sm_100a", "sm100a", "sm_100", "native"):
        return [f"-arch={NATIVE_ARCH}"]
    if target in ("emulate", "sm_90a"):
        return [f"-arch={EMULATED_ARCH}", "-DB200C_EMULATE", "-DB200C_BOUNDED_WAIT", f"-I{cuda_include_dir()}"]
    raise BuildError(f"unknown target {target!r}: use 'sm_100a' (native B200) or 'emulate' (sm_90a, Hopper)")


@dataclass(frozen=True)
class CompileResult:
    """Output of one nvcc run: the artifact path and ptxas' resource report."""

    path: Path
    log: str

    def resources(self) -> dict:
        """Registers, spill bytes and stack frame from ``-Xptxas -v``."""
        res = {}
        m = re.search(r"Used (\d+) registers", self.log)
        res["registers"] = int(m.group(1)) if m else None
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", self.log)
        res["spill_bytes"] = int(m.group(1)) + int(m.group(2)) if m else None
        m = re.search(r"(\d+) bytes stack frame", self.log)
        res["stack_frame"] = int(m.group(1)) if m else None
        return res


def first_error_line(log: str) -> str:
    """The first line of a compiler log that mentions an error."""
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()
    lines = [l for l in log.splitlines() if l.strip()]
    return lines[0].strip() if lines else "(no output)"


def compile_cuda(source: str, out: Path, fmt: str = "cubin", target: str = "sm_100a",
                 extra: tuple = (), keep_source: Path | None = None) -> CompileResult:
    """Compile ``source`` to ``out`` (``fmt`` = ``ptx`` or ``cubin``).

    The source is written next to ``out`` (or to ``keep_source``) so a failing
    build names a file the user can open.

    Raises:
        BuildError: nvcc missing or failing (message: the .cu path and the first
            error line).
    """
    nvcc = find_nvcc()
    out = Path(out)
    src = Path(keep_source) if keep_source else out.with_suffix(".cu")
    if src.resolve() == out.resolve():
        src = out.with_name(out.stem + ".src.cu")
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(source)
    flag = "-ptx" if fmt == "ptx" else "-cubin"
    cmd = [nvcc, *arch_flags(target), flag, "-O3", "-std=c++17", "-Xptxas", "-v", *extra, str(src), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except OSError as e:
        raise BuildError(f"cannot run {nvcc}: {e}") from None
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src}: {first_error_line(log)}")
    return CompileResult(out, log)


def compile_to_temp(source: str, fmt: str = "cubin", target: str = "sm_100a") -> CompileResult:
    """Compile into a fresh temporary folder (kept for inspection)."""
    d = Path(tempfile.mkdtemp(prefix="b200c_"))
    return compile_cuda(source, d / f"kernel.{fmt}", fmt, target)

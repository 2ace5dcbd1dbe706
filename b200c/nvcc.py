"""Run nvcc on one generated source (CLI ``--emit ptx|cubin`` and ``check``);
targets, nvcc discovery and flags live in :mod:`b200c.toolchain`."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import BuildError
from .toolchain import find_nvcc, nvcc_flags, warn_untested


@dataclass(frozen=True)
class CompileResult:
    """Output of one nvcc run: the artifact path and ptxas' resource report."""

    path: Path
    log: str

    def functions(self) -> list:
        """The functions ``-Xptxas -v`` reports on, in the log's order."""
        return [name for name, _ in self._sections()]

    def _sections(self) -> list:
        parts = re.split(r"ptxas info\s*: Function properties for ", self.log)[1:]
        return [(part.split(None, 1)[0] if part.strip() else "", part) for part in parts]

    def _report(self, function: str) -> str:
        """The part of the log about ``function``; the whole log when it names no such function."""
        return next((part for name, part in self._sections() if name == function), self.log)

    def spills(self, function: str) -> tuple:
        """``(spill store bytes, spill load bytes)`` of ``function`` from ``-Xptxas -v``, or None."""
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", self._report(function))
        return (int(m.group(1)), int(m.group(2))) if m else None

    def resources(self, function: str = "b200c_attention") -> dict:
        """Registers, spill bytes and stack frame of ``function`` from ``-Xptxas -v`` (a module may hold
        more than one kernel: a split-KV build's combine kernel too); the whole log when it names no
        function."""
        res = {}
        log = self._report(function)
        m = re.search(r"Used (\d+) registers", log)
        res["registers"] = int(m.group(1)) if m else None
        spills = self.spills(function)
        res["spill_bytes"] = sum(spills) if spills else None
        m = re.search(r"(\d+) bytes stack frame", log)
        res["stack_frame"] = int(m.group(1)) if m else None
        return res

    def serialized_wgmma(self) -> list:
        """ptxas' performance warnings that it serialized a kernel's wgmma instructions (C7510-C7519, e.g.
        C7512 "wgmma.mma_async instructions are serialized due to insufficient register resources"): every
        wgmma then waits for the one before, a slow kernel with no spill to show it. One line per warning."""
        return [line.strip() for line in self.log.splitlines() if re.search(r"\(C751\d\)", line)]


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
            error line), or ``out``'s folder does not exist.
    """
    out = Path(out)
    if not out.parent.is_dir():  # else nvcc's error names its own temporary file
        raise BuildError(f"cannot write {str(out)!r}: folder {str(out.parent)!r} does not exist; create it first")
    nvcc = find_nvcc()
    warn_untested(nvcc)  # once per process: the spill-free builds are checked with TESTED_NVCC
    src = Path(keep_source) if keep_source else out.with_suffix(".cu")
    if src.resolve() == out.resolve():
        src = out.with_name(out.stem + ".src.cu")
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(source)
    flags = ["-ptx" if f == "-cubin" and fmt == "ptx" else f for f in nvcc_flags(target)]  # the build's flags
    cmd = [nvcc, *flags, "-Xptxas", "-v", *extra, str(src), "-o", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except OSError as e:
        raise BuildError(f"cannot run {nvcc}: {e}") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"nvcc ran over 900 s on {src}; compile it by hand: {' '.join(cmd)}") from None
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src}: {first_error_line(log)}")
    return CompileResult(out, log)

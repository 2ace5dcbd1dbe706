"""SASS instruction counts of a cubin, without a GPU.

Uses ``cuobjdump -sass`` (which calls ``nvdisasm``) from PATH, the CUDA
toolkit, or the ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm`` pip
packages (``site-packages/nvidia/cu13/bin``).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import BuildError

# counted opcodes: name -> regex over one SASS instruction line
COUNTERS = {
    "MUFU.EX2": r"\bMUFU\.EX2\b",
    "FMUL": r"\bFMUL\b",
    "FFMA": r"\bFFMA\b",
    "FMUL2/FFMA2": r"\b(FMUL2|FFMA2|FADD2)\b",
    "FSETP.GEU": r"\bFSETP\.GEU\b",
    "predicated": r"^\s*/\*[0-9a-f]+\*/\s+@!?U?P",
    "LDL/STL": r"\b(LDL|STL)\b",
    "UTC*MMA": r"\bUTC\w*MMA\w*\b",
    "HGMMA": r"\bHGMMA\b",
}


def _tool_dirs() -> list:
    dirs = []
    try:
        import nvidia  # namespace package of the pip wheels

        for p in nvidia.__path__:
            for sub in ("cu13/bin", "cuda_cuobjdump/bin", "cuda_nvdisasm/bin"):
                if (Path(p) / sub).is_dir():
                    dirs.append(str(Path(p) / sub))
    except ImportError:
        pass
    home = os.environ.get("CUDA_HOME")
    if home:
        dirs.append(str(Path(home) / "bin"))
    return dirs


def find_cuobjdump() -> tuple:
    """(cuobjdump path, PATH value that also finds nvdisasm).

    Raises:
        BuildError: cuobjdump or nvdisasm missing (install nvidia-cuda-cuobjdump
            and nvidia-cuda-nvdisasm, or the CUDA toolkit).
    """
    path = os.pathsep.join(_tool_dirs() + [os.environ.get("PATH", "")])
    exe = shutil.which("cuobjdump", path=path)
    if not exe or not shutil.which("nvdisasm", path=path):
        raise BuildError(
            "cuobjdump/nvdisasm not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm "
            "(or put the CUDA toolkit's bin on PATH)"
        )
    return exe, path


def disassemble(cubin: Path) -> str:
    """SASS text of a cubin.

    Raises:
        BuildError: the disassembler is missing or fails.
    """
    exe, path = find_cuobjdump()
    proc = subprocess.run([exe, "-sass", str(cubin)], capture_output=True, text=True,
                          env={**os.environ, "PATH": path}, timeout=300)
    if proc.returncode != 0 or "fatal" in proc.stderr + proc.stdout[:200]:
        raise BuildError(f"cuobjdump failed on {cubin}: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def function_sass(sass: str, name: str) -> str:
    """The part of ``cuobjdump -sass`` text that is function ``name`` (from its ``Function : name`` line to
    the next function's); the whole text when no such line is there (a listing of one function)."""
    parts = re.split(r"(?m)^\s*Function : ", sass)
    for part in parts[1:]:
        if part.split(None, 1)[0] == name:
            return "Function : " + part
    return sass


def count(sass: str) -> dict:
    """Instruction counts per COUNTERS name, plus ``static`` (all instructions)."""
    lines = [l for l in sass.splitlines() if re.match(r"^\s*/\*[0-9a-f]{4,}\*/", l)]
    out = {"static": len(lines)}
    for name, rx in COUNTERS.items():
        r = re.compile(rx)
        out[name] = sum(1 for l in lines if r.search(l))
    return out

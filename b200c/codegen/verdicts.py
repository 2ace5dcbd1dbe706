"""Cached verdicts of the barrier-protocol verifier (:mod:`b200c.codegen.verify`).

A protocol that passed once is not simulated again: :func:`known_good` says
whether a kernel IR with exactly this content passed before, in this process
or (through :mod:`b200c.compile_cache`) in an earlier one; :func:`record_good`
remembers one that just passed. Only passes are kept: a broken protocol is
simulated (and reported) every time.

The key is a sha256 of ``repr(ir)``: every field of every IR node, of the role
programs and of the plan (barriers, named barriers, tile, stages, SMEM map),
with each node's type name; that is all the verifier reads (the verifier
tells the node types of :mod:`b200c.codegen.ir` apart, so no backend node class
may share a name with one of them: tests/test_protocol.py checks). On disk
the folder name also carries a sha256 of the source of the modules whose code
decides the verdict (:data:`_VERIFIER_SOURCES`), so a changed verifier never
reads an old verdict; each entry holds its own key behind a sha256 and is
checked on read (a damaged entry is a miss and is rewritten).
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

# the modules (relative to b200c/codegen) whose code, given repr(ir), decides the verdict
_VERIFIER_SOURCES = ("verify.py", "verify_tcgen05.py", "cexpr.py", "ir.py", "barriers.py", "plan.py", "tile.py",
                     "verdicts.py", "tcgen05/ir.py", "sm90/ir.py", "sm90/plan.py")
_HERE = Path(__file__).parent
_PASSED: set = set()  # keys of the IRs that passed in this process


def ir_key(ir) -> str:
    """The verdict key of ``ir``: sha256 (hex) of its ``repr``."""
    return hashlib.sha256(repr(ir).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def _folder():
    from ..compile_cache import compile_cache_dir

    h = hashlib.sha256()
    try:
        for name in _VERIFIER_SOURCES:
            h.update(name.encode() + b"\0" + (_HERE / name).read_bytes() + b"\0")
    except OSError:  # sources not readable (a zipped install): no on-disk verdicts
        return None
    return compile_cache_dir("verdicts", h.hexdigest())


def known_good(key: str) -> bool:
    """Whether the IR with verdict key ``key`` passed the verifier before (this
    process, or an intact on-disk entry written by the same verifier code)."""
    if key in _PASSED:
        return True
    folder = _folder()
    if folder is None:
        return False
    from ..compile_cache import read_entry

    if read_entry(folder, key) == key.encode():
        _PASSED.add(key)
        return True
    return False


def record_good(key: str) -> None:
    """Remember that the IR with verdict key ``key`` passed (in process and on disk)."""
    _PASSED.add(key)
    folder = _folder()
    if folder is not None:
        from ..compile_cache import write_entry

        write_entry(folder, key, key.encode())


def forget() -> None:
    """Drop this process's remembered verdicts (tests; the disk entries stay)."""
    _PASSED.clear()

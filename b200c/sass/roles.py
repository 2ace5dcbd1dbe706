"""Each warp role's steady-state (K/V) loop in the SASS of a generated kernel.

A generated kernel is split into ``// ==== section: NAME ====`` blocks, one
``role NAME`` section per warp role, and the ``entry`` section calls each
role function (``role_softmax(smem_ptr, q)``, ``role_mma(smem_ptr)``). A role's K/V loop is
a ``for (int i = ...`` or ``for (int j = ...`` statement right after
``#pragma unroll 1`` whose line ends with a comment starting ``// K/V`` or
``// steady state`` (the softmax's loop over masked tiles -- the partial
last K/V tile, the causal diagonal -- is commented ``// masked tiles`` and is
not a steady-state loop).

The kernel is compiled with ``-lineinfo`` (which leaves the instruction
stream unchanged; tests/test_sass_loops.py checks it on every example) and
disassembled with ``nvdisasm -gi``: each instruction carries its inlining
chain, whose frame inside a role section gives the source line in the role
function and whose next frame out gives the entry call site, i.e. the role
copy. A SASS loop (see :mod:`b200c.sass.loops`) belongs to a K/V ``for``
statement when its last back edge maps to a line of that statement in that
role copy; the largest such loop is the steady-state loop (mbarrier retry
loops inside it are smaller and merge into it when they share its header).

Counts are static SASS instructions of the loop body as ptxas laid it out,
i.e. per K/V tile as each loop stands: the MMA loop covers both Q stages of
one tile (and runs ``n_kv - 1`` times after its prologue), the load loop
issues the K and V tokens of one tile, each ``softmax[q]`` copy handles one
Q stage's tile. Retry blocks of mbarrier waits that ptxas moved out of line
are not counted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from .loops import find_loops, is_spin_wait, mix, parse_listing

_SECTION = re.compile(r"^// ==== (end )?section: (.+?) ====\s*$")
_KV_FOR = re.compile(r"^\s*for \(int [ij] = [^;]*;([^;]*);[^)]*\)\s*\{?\s*(?://\s*(.*))?$")
_CALL = re.compile(r"\brole_(\w+?)(?:<(\d+)>)?\((?:c|smem_ptr)[,)]")


@dataclass(frozen=True)
class KvLoopSource:
    """One role's K/V ``for`` statement: role section name, lines (1-based)."""

    role: str
    first: int
    last: int


@dataclass(frozen=True)
class KernelLayout:
    """Where the roles, their K/V loops and their call sites are in a source."""

    sections: dict  # name -> (first line, last line)
    kv_loops: tuple  # KvLoopSource, in source order
    calls: dict  # entry line -> role label ("softmax[0]", "mma")

    def role_at(self, line: int):
        """Name of the ``role`` section holding ``line`` (``"softmax"``), or None."""
        for name, (a, b) in self.sections.items():
            if name.startswith("role ") and a <= line <= b:
                return name[5:]
        return None


def _statement_end(lines: list, first: int) -> int:
    """Last line (1-based) of the braced statement that starts on ``first``."""
    depth, opened = 0, False
    for n in range(first, len(lines) + 1):
        code = lines[n - 1].split("//", 1)[0]
        for ch in code:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
        if opened and depth <= 0:
            return n
    raise BuildError(f"unbalanced braces after line {first} of the generated source")


def kernel_layout(source: str) -> KernelLayout:
    """Sections, K/V loops and role call sites of a generated kernel.

    Raises:
        BuildError: the source has no ``role`` sections or no ``entry`` section
            (not a b200c kernel), or unbalanced braces after a K/V ``for``.
    """
    lines = source.splitlines()
    sections, open_ = {}, {}
    for n, line in enumerate(lines, 1):
        m = _SECTION.match(line)
        if m and m.group(1):
            if m.group(2) in open_:
                sections[m.group(2)] = (open_.pop(m.group(2)), n)
        elif m:
            open_[m.group(2)] = n
    if "entry" not in sections or not any(s.startswith("role ") for s in sections):
        raise BuildError("not a b200c kernel: no '// ==== section: role ...' / 'entry' markers in the source")
    layout = KernelLayout(sections, (), {})
    kv = []
    for n, line in enumerate(lines, 1):
        m = _KV_FOR.match(line)
        role = layout.role_at(n)
        if not m or role is None:
            continue
        prev = next((lines[k].strip() for k in range(n - 2, -1, -1) if lines[k].strip()), "")
        comment = (m.group(2) or "").strip()
        if prev == "#pragma unroll 1" and comment.startswith(("K/V", "steady state")):
            kv.append(KvLoopSource(role, n, _statement_end(lines, n)))
    a, b = sections["entry"]
    found = []
    for n in range(a, b + 1):
        m = _CALL.search(lines[n - 1])
        if m:
            found.append((n, m.group(1), m.group(2)))
    calls = {}
    for n, role, arg in found:
        same = [f for f in found if f[1] == role]
        calls[n] = role if len(same) == 1 else f"{role}[{arg if arg is not None else same.index((n, role, arg))}]"
    return KernelLayout(sections, tuple(kv), calls)


def _position(layout: KernelLayout, frames: tuple, src_name: str):
    """(role label, line in the role function) of an instruction, or None."""
    own = [line for f, line in frames if Path(f).name == src_name]
    for k in range(len(own) - 1, -1, -1):  # outermost frame inside a role section
        role = layout.role_at(own[k])
        if role is not None:
            caller = own[k + 1] if k + 1 < len(own) else None
            return layout.calls.get(caller, role), own[k]
    return None


def role_loops(source: str, listing: str, src_name: str | None = None) -> dict:
    """{role label: mix} of every role's steady-state loop.

    ``listing`` is ``nvdisasm -gi`` output of the cubin built from ``source``
    with ``-lineinfo``; ``src_name`` is the file name nvcc compiled (default:
    the file of the kernel's first instruction's outermost frame); frames of
    other files, e.g. CUDA headers, are skipped. Role labels are
    the role names, with ``[k]`` per copy when the entry calls a role more
    than once (``softmax[0]``, ``softmax[1]``); rows follow the entry's call
    order (a role with two K/V loops would get a second row ``label@line``).
    Each mix is :func:`b200c.sass.loops.mix` of the loop body plus ``line``,
    the K/V ``for`` line in the source.

    Raises:
        BuildError: the listing has no line info (not built with -lineinfo),
            or a K/V ``for`` statement of a called role has no SASS loop.
    """
    layout = kernel_layout(source)
    funcs = parse_listing(listing)
    framed = [i.frames for f in funcs for i in f.instrs if i.frames]
    if not framed:
        raise BuildError("the SASS listing has no line info: compile with -lineinfo and disassemble with nvdisasm -gi")
    src_name = src_name or Path(framed[0][-1][0]).name
    best = {}  # (label, for line) -> loop
    for fn in funcs:
        for loop in find_loops(fn):
            if is_spin_wait(loop):
                continue
            pos = _position(layout, loop.latch.frames, src_name)
            if pos is None:
                continue
            label, line = pos
            for kv in layout.kv_loops:
                if kv.first <= line <= kv.last:
                    key = (label, kv.first)
                    if key not in best or len(loop.body) > len(best[key].body):
                        best[key] = loop
    rows = {}
    for label in dict.fromkeys(layout.calls.values()):
        role = label.split("[")[0]
        for kv in layout.kv_loops:
            if kv.role != role:
                continue
            loop = best.get((label, kv.first))
            if loop is None:
                raise BuildError(f"no SASS loop found for role {label}'s K/V loop (source line {kv.first})")
            name = label if label not in rows else f"{label}@{kv.first}"
            rows[name] = {**mix(loop.body), "line": kv.first}
    return rows


def cubin_role_loops(source: str, cubin: Path) -> dict:
    """:func:`role_loops` of a cubin that nvcc built from ``source`` with
    ``-lineinfo`` (see :func:`compile_with_lines`).

    Raises:
        BuildError: nvdisasm missing or failing, or as :func:`role_loops`.
    """
    from .loops import disassemble_lines

    return role_loops(source, disassemble_lines(cubin))


LINEINFO = ("-lineinfo",)


def compile_with_lines(source: str, out: Path):
    """Compile ``source`` for sm_100a to the cubin ``out`` with ``-lineinfo``
    (same flags as the build otherwise); returns the
    :class:`b200c.nvcc.CompileResult`.

    Raises:
        BuildError: nvcc missing or failing.
    """
    from ..nvcc import compile_cuda

    return compile_cuda(source, out, "cubin", "sm_100a", extra=LINEINFO)

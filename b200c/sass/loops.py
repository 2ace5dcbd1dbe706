"""Loops of a cubin's SASS and their instruction mix, without a GPU.

``nvdisasm -gi`` prints every instruction with its source line and inlining
chain (when the cubin was built with ``-lineinfo``; without it the chains are
empty). :func:`parse_listing` reads that text, :func:`find_loops` builds each
function's control-flow graph and returns its natural loops (a back edge is a
branch to a block that dominates it, so the jumps back from the out-of-line
retry blocks that ptxas puts after the function are not loops), and
:func:`mix` counts the opcodes of :data:`LOOP_COLS` in a loop body.

Counts are static: each instruction of the loop body once, as ptxas laid the
body out (see :attr:`Loop.body`), not executed instructions.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..errors import BuildError

# mix columns (see mix()): these match the opcode without its modifiers
_BASE_COLS = ("FFMA", "FFMA2", "FADD", "FADD2", "FMUL", "FMUL2", "FMNMX", "FMNMX3", "F2FP", "LDTM", "STTM",
              "SYNCS", "UTMALDG")
LOOP_COLS = ("MUFU.EX2", *_BASE_COLS, "UTC*MMA", "predicated")
_UTC_MMA = re.compile(r"UTC\w*MMA")

_INSTR = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(?:(@!?U?P\w+)\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_LABEL = re.compile(r"^([.$\w]+):\s*$")
_LINE = re.compile(r'^\s*//## File "([^"]*)", line (\d+)')
_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_TARGET = re.compile(r"`\(([^)]+)\)")


@dataclass(frozen=True)
class Instr:
    """One SASS instruction.

    ``frames`` is the inlining chain of its source position, innermost first:
    ``((file, line), (file of the caller, line of the call), ...)``; empty
    without line info. ``guard`` is the predicate guard (``"@!P0"``) or ``""``.
    """

    addr: int
    guard: str
    opcode: str
    operands: str
    frames: tuple = ()

    @property
    def base(self) -> str:
        """Opcode without modifiers (``FMNMX3`` for ``FMNMX3.NAN``)."""
        return self.opcode.split(".")[0]


@dataclass
class Function:
    """The instructions of one ``.text`` section and its labels (name -> index)."""

    name: str
    instrs: list = field(default_factory=list)
    labels: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Loop:
    """A natural loop (all back edges to one header merged).

    ``body`` is the loop's instructions from its header to its last back
    edge, in address order: the body as it stands in the listing. Blocks of
    the loop that ptxas moved out of line past the last back edge (the
    retry blocks of mbarrier waits) are not in it; ``out_of_line`` counts them.
    """

    function: str
    header: int  # index of the header instruction
    latches: tuple  # indices of the back-edge branches
    body: tuple
    out_of_line: int

    @property
    def latch(self) -> Instr:
        """The last back-edge branch."""
        return self.body[-1]

    def contains(self, other: "Loop") -> bool:
        """True if ``other`` is another loop nested in this one's address range."""
        return (other is not self and other.function == self.function
                and self.header <= other.header and max(other.latches) <= max(self.latches))


def disassemble_lines(cubin: Path, encodings: bool = False) -> str:
    """``nvdisasm -gi -c`` text of a cubin (code only, line and inlining info;
    with ``encodings`` also ``-hex``: each instruction's 128-bit encoding).

    Raises:
        BuildError: nvdisasm is missing or fails.
    """
    import shutil

    from .disasm import find_cuobjdump

    _, path = find_cuobjdump()
    exe = shutil.which("nvdisasm", path=path)
    proc = subprocess.run([exe, "-gi", "-c", *(["-hex"] if encodings else []), str(cubin)],
                          capture_output=True, text=True,
                          env={**os.environ, "PATH": path}, timeout=300)
    if proc.returncode != 0:
        raise BuildError(f"nvdisasm failed on {cubin}: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def parse_listing(text: str) -> list:
    """Functions of an ``nvdisasm`` listing (with or without ``-g``/``-gi``).

    Raises:
        BuildError: the text holds no SASS instruction.
    """
    funcs, fn = [], None
    chain, chain_open, pending = [], False, []
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            fn = Function(m.group(1))
            funcs.append(fn)
            chain, chain_open, pending = [], False, []
            continue
        m = _LINE.match(line)
        if m:
            if not chain_open:
                chain, chain_open = [], True
            chain.append((m.group(1), int(m.group(2))))
            continue
        m = _INSTR.match(line)
        if m and fn is not None:
            chain_open = False
            for lab in pending:
                fn.labels[lab] = len(fn.instrs)
            pending = []
            fn.instrs.append(Instr(int(m.group(1), 16), m.group(2) or "", m.group(3), m.group(4).strip(),
                                   tuple(chain)))
            continue
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
    funcs = [f for f in funcs if f.instrs]
    if not funcs:
        raise BuildError("no SASS instructions in the disassembler output")
    return funcs


def _branch(ins: Instr):
    """(target label or None, falls through) of one instruction."""
    if ins.base in ("BRA", "JMP"):
        m = _TARGET.search(ins.operands)
        before = ins.operands[:m.start()].strip().rstrip(",").strip() if m else ""
        never = before in ("!PT", "!UPT") or ins.guard in ("@!PT", "@!UPT")
        cond = bool(ins.guard) or (before not in ("", "PT", "UPT"))
        if never:
            return None, True
        return (m.group(1) if m else None), cond
    if ins.base in ("EXIT", "RET", "BRX", "JMX", "KILL"):
        return None, bool(ins.guard)
    return None, True


def _blocks(fn: Function):
    """Basic blocks as (start, end) instruction index ranges, and edges."""
    n = len(fn.instrs)
    leaders = {0} | {i for i in fn.labels.values() if i < n}
    for i, ins in enumerate(fn.instrs):
        target, falls = _branch(ins)
        if (target or not falls) and i + 1 < n:
            leaders.add(i + 1)
    starts = sorted(leaders)
    block_of = {}
    blocks = []
    for b, s in enumerate(starts):
        e = starts[b + 1] if b + 1 < len(starts) else n
        blocks.append((s, e))
        for i in range(s, e):
            block_of[i] = b
    edges = []
    for b, (s, e) in enumerate(blocks):
        target, falls = _branch(fn.instrs[e - 1])
        if target is not None and target in fn.labels and fn.labels[target] < n:
            edges.append((b, block_of[fn.labels[target]]))
        if falls and e < n:
            edges.append((b, b + 1))
    return blocks, edges


def find_loops(fn: Function) -> list:
    """Natural loops of one function, in header address order.

    A back edge is an edge to a block that dominates its source. Dominators
    are computed from a virtual root that enters the function's first block
    and every block without a predecessor: the targets of an indirect branch
    (``BRX``, e.g. FA4's warp-role dispatch table) and subroutines reached only
    by ``CALL`` have no edge in the listing, so each is taken as an entry.
    """
    import networkx as nx

    blocks, edges = _blocks(fn)
    g = nx.DiGraph()
    g.add_nodes_from(range(len(blocks)))
    g.add_edges_from(edges)
    root = -1
    g.add_edges_from((root, b) for b in range(len(blocks)) if b == 0 or g.in_degree(b) == 0)
    idom = nx.immediate_dominators(g, root)

    def dominates(h, b):
        while True:
            if b == h:
                return True
            if idom.get(b, b) == b:
                return False
            b = idom[b]

    back = {}
    for u, h in edges:
        if u in idom and dominates(h, u):
            back.setdefault(h, []).append(u)
    loops = []
    for h, latches in sorted(back.items()):
        members, stack = {h}, [u for u in latches]
        while stack:
            b = stack.pop()
            if b not in members:
                members.add(b)
                stack.extend(p for p in g.predecessors(b) if p != root)
        last = max(blocks[u][1] - 1 for u in latches)
        first = blocks[h][0]
        idx = sorted(i for b in members for i in range(*blocks[b]))
        if last < first:  # a latch laid out above its header: no contiguous body, take the whole loop
            first, last = idx[0], idx[-1]
        body = tuple(fn.instrs[i] for i in idx if first <= i <= last)
        loops.append(Loop(fn.name, blocks[h][0], tuple(sorted(blocks[u][1] - 1 for u in latches)), body,
                          sum(1 for i in idx if not first <= i <= last)))
    return loops


SPIN_WAIT_MAX = 16  # instructions; the mbarrier retry loops of ptxas 13 are 2-5
_WAIT_ONLY = {"SYNCS", "NANOSLEEP", "BRA", "MOV", "UMOV", "SHF", "USHF", "NOP"}


def is_spin_wait(loop: Loop) -> bool:
    """True for an mbarrier wait's retry loop: a ``SYNCS.PHASECHK`` (try_wait)
    with nothing but other ``SYNCS``, ``NANOSLEEP``, moves, shifts and the
    branch around it, at most :data:`SPIN_WAIT_MAX` instructions."""
    body = loop.body
    return (len(body) <= SPIN_WAIT_MAX and any(i.opcode.startswith("SYNCS.PHASECHK") for i in body)
            and all(i.base in _WAIT_ONLY or i.opcode.startswith("IMAD.MOV") for i in body))


def mix(instrs) -> dict:
    """Counts of ``static`` (all instructions) and each :data:`LOOP_COLS` name.

    ``MUFU.EX2`` and the ``F*``/``LDTM``/``STTM``/``SYNCS``/``UTMALDG`` columns
    match the opcode without modifiers (``FADD`` counts ``FADD.FTZ``, not
    ``FADD2``); ``UTC*MMA`` is every ``UTC..MMA`` (``UTCHMMA``, ``UTCQMMA``, ...);
    ``predicated`` counts instructions with a guard predicate (``@P0``, ``@!UP1``).
    """
    instrs = list(instrs)
    out = {"static": len(instrs)}
    out["MUFU.EX2"] = sum(1 for i in instrs if i.opcode.startswith("MUFU.EX2"))
    for name in _BASE_COLS:
        out[name] = sum(1 for i in instrs if i.base == name)
    out["UTC*MMA"] = sum(1 for i in instrs if _UTC_MMA.fullmatch(i.base))
    out["predicated"] = sum(1 for i in instrs if i.guard)
    return out


def opcode_stream(text: str) -> list:
    """Every instruction's guard, opcode and operands in listing order (what
    ``-lineinfo`` must not change)."""
    return [(i.guard, i.opcode, i.operands) for f in parse_listing(text) for i in f.instrs]


def encoding_stream(text: str) -> list:
    """The 64-bit words of every instruction's encoding (with control bits), in
    listing order, from a listing made with ``encodings=True``."""
    return re.findall(r"/\* (0x[0-9a-f]{16}) \*/", text)


# role by instruction mix, first match wins (kernels without b200c's section markers)
MIX_ROLES = (
    ("mma", lambda m: m["UTC*MMA"] > 0),
    ("load", lambda m: m["UTMALDG"] > 0),
    ("softmax", lambda m: m["MUFU.EX2"] > 0),
    ("correction", lambda m: m["LDTM"] > 0 and m["STTM"] > 0),
)


class MixRole(NamedTuple):
    """Loops of one role found by :func:`loops_by_mix`: ``steady`` (innermost,
    largest first) and ``enclosing`` (loops of the role around them, e.g. a
    persistent kernel's per-tile loop; smallest first)."""

    steady: list
    enclosing: list


def loops_by_mix(functions) -> dict:
    """{role: MixRole} of a kernel without section markers (e.g. FlashAttention-4).

    Each loop that is not a spin wait gets the first role of :data:`MIX_ROLES`
    its mix matches: a ``UTC*MMA`` makes it the MMA warp's, a ``UTMALDG`` the
    load warp's, a ``MUFU.EX2`` softmax's, ``LDTM`` and ``STTM`` without those
    the correction warps'. A role's steady-state loops are its loops with no
    loop of the same role inside them: the per-tile loop of a persistent
    kernel encloses the K/V loop and has the same mix. Loops that match no
    role are left out.
    """
    by_role = {}
    for fn in functions:
        for loop in find_loops(fn):
            if is_spin_wait(loop):
                continue
            m = mix(loop.body)
            role = next((name for name, test in MIX_ROLES if test(m)), None)
            if role is not None:
                by_role.setdefault(role, []).append(loop)
    out = {}
    for name, _ in MIX_ROLES:
        loops = by_role.get(name, [])
        inner = [a for a in loops if not any(a.contains(b) for b in loops)]
        outer = [a for a in loops if a not in inner]
        if loops:
            out[name] = MixRole(sorted(inner, key=lambda l: -len(l.body)), sorted(outer, key=lambda l: len(l.body)))
    return out

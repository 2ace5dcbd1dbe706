"""Kernel IR shared by every backend: per warp role, a structured program of
loops, barrier waits/arrives and TMA loads. Backends add their own nodes (MMA
issue, TMEM access, softmax blocks) in ``b200c/codegen/<backend>/ir.py``.

The emitter renders exactly these nodes (one jinja2 template per node type,
``templates/stmt/<NodeType>.j2`` here or in the backend's folder), so
``b200c compile --emit ir`` shows what the kernel does. Expressions are small
C expressions over the role's variables (``j`` is the K/V tile, ``i`` the
steady-state iteration, ``c`` the kernel context); they print verbatim, and the
protocol verifier (:mod:`b200c.codegen.verify`) evaluates the integer ones.
"""
from __future__ import annotations

import msgspec
from typing import Optional


class Node(msgspec.Struct, frozen=True):
    """Base of every IR statement. IR classes are frozen ``msgspec.Struct`` s
    (subclasses inherit ``frozen``): compared and hashed by type and fields,
    ``repr`` names every field, ``msgspec.structs.replace`` makes edited copies."""

    def children(self) -> tuple:
        """The nested statements (a node's ``body``; () for a leaf)."""
        return getattr(self, "body", ())

    def describe(self) -> str:
        """One-line text of the node for ``--emit ir``."""
        parts = []
        for name in self.__struct_fields__:
            if name == "body" or name == "params":
                continue
            v = getattr(self, name)
            if v is None or v == () or v is False:
                continue
            parts.append(f"{name}={v}")
        return f"{type(self).__name__.lower()} " + " ".join(parts)


class PhaseRef(msgspec.Struct, frozen=True):
    """Phase-parity state of a barrier as seen by one role: variable ``var``,
    one bit per barrier instance (``index`` expression selects it), flipped
    after each completed wait. ``storage``: ``scalar``, ``array`` or
    ``bitmask`` (minor optimization 17), or ``value``: ``var`` holds the
    parity to wait for and the wait does not flip it (a ring position that
    :class:`RingAdvance` moves, sm_90a consumers)."""

    var: str
    index: Optional[str] = None
    storage: str = "scalar"

    def __str__(self) -> str:
        return self.var if self.index is None else f"{self.var}[{self.index}]"


class Comment(Node):
    text: str

    def describe(self) -> str:
        return f"// {self.text}"


class Decl(Node):
    """Role-local variable: ``ctype name[array] = init``. ``model``: the
    expression the protocol verifier uses instead of ``init`` for an integer
    that depends on run-time data (e.g. ``full_tiles(c, w, q)``)."""

    ctype: str
    name: str
    init: str
    array: Optional[int] = None
    model: Optional[str] = None

    def describe(self) -> str:
        arr = f"[{self.array}]" if self.array else ""
        return f"decl {self.ctype} {self.name}{arr} = {self.init}"


class PhaseDecl(Node):
    """Phase bits of one barrier family for this role, all starting at ``init``
    (0 for consumers of full barriers, 1 for producers waiting on empty ones)."""

    var: str
    count: int
    init: int
    storage: str

    def describe(self) -> str:
        return f"phase {self.var}[{self.count}] = {self.init} ({self.storage})"


class Assign(Node):
    target: str
    expr: str

    def describe(self) -> str:
        return f"{self.target} = {self.expr}"


class WorkLoop(Node):
    """Work items of this CTA: one (``blockIdx.x``) or, persistent, a
    grid-stride loop (blog ch.14). Binds ``w`` (WorkItem) in the body."""

    persistent: bool
    body: tuple = ()

    def describe(self) -> str:
        return "for work = blockIdx.x; work < num_work; work += gridDim.x" if self.persistent else "work = blockIdx.x"


class Loop(Node):
    """``for (int var = start; var < stop; ++var)``."""

    var: str
    start: str
    stop: str
    body: tuple = ()
    note: str = ""

    def describe(self) -> str:
        return f"for {self.var} in [{self.start}, {self.stop})" + (f"   // {self.note}" if self.note else "")


class If(Node):
    cond: str
    body: tuple = ()

    def describe(self) -> str:
        return f"if {self.cond}"


class Single(Node):
    """Body run by one thread: ``thread0`` (thread 0 of the CTA) or ``elect``
    (``elect.sync`` lane of the warp, then ``__syncwarp``); or ``warp``: the
    whole warp runs the body, converged, and each asynchronous arrival in it
    (a ``tcgen05.commit`` with ``elect``) is issued by one lane elected inside
    its asm, so the protocol verifier counts each once."""

    who: str
    body: tuple = ()

    def describe(self) -> str:
        return f"single {self.who}"


class Wait(Node):
    """Wait for a phase of mbarrier ``barrier[index]``; flip the phase bit.
    ``fence_after``: the waiting thread's later asynchronous-unit operations are
    ordered after the wait (the backend's ``fence_after_sync`` text; tcgen05:
    ``tcgen05.fence::after_thread_sync`` for the reader of TMEM or the MMA issuer
    after a hand-off, PTX 9.7.16.6.4)."""

    barrier: str
    index: Optional[str]
    phase: PhaseRef
    site: int
    iter: str = "-1"
    fence_after: bool = False

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        f = "; fence after sync" if self.fence_after else ""
        return f"wait {self.barrier}{idx} parity {self.phase} (site {self.site}){f}"


class Arrive(Node):
    """Arrive on ``barrier[index]``. ``by``: ``warp`` (one arrival per warp, from
    lane 0 once the warp's threads are done: the backend's ``warp_arrive`` text)
    or ``thread``. ``tx_bytes`` makes it ``arrive.expect_tx``. ``fence_before``:
    the arriving threads' asynchronous-unit writes are ordered before the
    arrival (the backend's ``fence_before_sync`` text; tcgen05:
    ``tcgen05.wait::st`` + ``tcgen05.fence::before_thread_sync`` for TMEM
    writers, PTX 9.7.16.6.4)."""

    barrier: str
    index: Optional[str] = None
    by: str = "warp"
    tx_bytes: Optional[str] = None
    fence_before: bool = False

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        tx = f" expect_tx {self.tx_bytes}" if self.tx_bytes else ""
        fb = "fence before sync; " if self.fence_before else ""
        return f"{fb}arrive {self.barrier}{idx} by {self.by}{tx}"


class AsyncArrive(Node):
    """Base of nodes after which the hardware arrives once on ``barrier[index]``
    when earlier asynchronous work completes (e.g. ``tcgen05.commit``); the
    protocol verifier counts one arrival."""

    barrier: str
    index: Optional[str] = None


class TmaLoadTile(Node):
    """TMA-load one tile of ``tensor`` (q/k/v; its bytes are the plan's tile
    bytes): ``rows`` rows starting at row ``row`` of head ``head``, batch
    coordinate ``batch``, into SMEM offset ``dst``; completes the bytes on
    ``barrier[index]``, one box of ``box_cols`` columns per slice of
    ``slice_bytes`` (per the swizzle mode, blog ch.1/3). ``rows``,
    ``box_cols`` and ``slice_bytes`` are the backend plan's constants (text:
    a number or a constant's name)."""

    tensor: str
    dst: str
    row: str
    barrier: str
    index: Optional[str] = None
    head: str = "w.h"
    rows: str = "128"
    batch: str = "w.tma_b"
    box_cols: str = "TMA_BOX_INNER"
    slice_bytes: str = "TMA_SLICE_BYTES"
    # split-KV builds: a K/V tile may come from a paged KV cache (c.block_table): then boxes of c.page_box rows,
    # each inside one page, at the page's block coordinate; ``first_key``: the tile's first key in the sequence
    paged: bool = False
    first_key: str = ""

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return (f"tma.load {self.tensor.upper()} rows {self.row} head {self.head} -> smem {self.dst} "
                f"(complete_tx {self.barrier}{idx})" + ("; paged: one box per page run" if self.paged else ""))


class TxLoad(Node):
    """Base of a backend's asynchronous copy that completes ``tx_bytes`` transaction bytes on barrier
    ``barrier`` (instance ``index``), besides the TMA tile loads: the protocol verifier counts its bytes
    (sm90's ``BulkLoad``, a 1-D ``cp.async.bulk``)."""

    barrier: str
    index: Optional[str] = None
    tx_bytes: str = "0"


class Scope(Node):
    """A braced block with a comment (one MMA step, one K/V token)."""

    note: str
    body: tuple = ()

    def describe(self) -> str:
        return f"{{ {self.note}"


class RingAdvance(Node):
    """Move a ring position to the next slot: ``slot`` += 1, wrapping to 0
    after ``stages`` slots, where ``phase`` (the parity to wait for) flips."""

    slot: str
    phase: str
    stages: str

    def describe(self) -> str:
        return f"ring advance {self.slot} (mod {self.stages}, flip {self.phase} on wrap)"


class NamedBarSync(Node):
    """``bar.sync`` on named barrier ``barrier[index]`` (PTX ISA 9.7.13.1):
    add this role instance's threads to the current generation and block until
    it completes. ``printed``: a C expression of the same value that the
    kernel evaluates instead of ``index`` (a re-read, so the compiler does
    not keep the value live); the verifier evaluates ``index``."""

    barrier: str
    index: Optional[str] = None
    note: str = ""
    printed: Optional[str] = None  # the C expression the kernel prints for ``index`` (None: ``index``)

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return f"bar.sync {self.barrier}{idx}" + (f"   // {self.note}" if self.note else "")


class NamedBarArrive(Node):
    """``bar.arrive`` on named barrier ``barrier[index]``: add this role
    instance's threads to the current generation without waiting."""

    barrier: str
    index: Optional[str] = None
    note: str = ""
    printed: Optional[str] = None  # the C expression the kernel prints for ``index`` (None: ``index``)

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return f"bar.arrive {self.barrier}{idx}" + (f"   // {self.note}" if self.note else "")


class Stamp(Node):
    """Profiling builds: record ``%globaltimer`` (PTX ISA 10.x special register,
    ns) with event ``event`` into this role instance's trace track; ``edge``
    ``B``/``E`` opens/closes the span ``name``. Any backend can emit it: the
    header helper ``trace_stamp`` writes one 8-byte record (timer << 8 | event)
    from one thread of the role instance; the host turns the buffer into a
    Chrome/Perfetto trace (``b200c.bench.trace``). Protocol-neutral."""

    event: int
    name: str
    edge: str

    def describe(self) -> str:
        return f"stamp {self.edge} {self.name!r} (event {self.event})"


class SetMaxNReg(Node):
    """``setmaxnreg.inc/dec`` for this warpgroup (PTX 9.7.19.5)."""

    regs: int
    inc: bool

    def describe(self) -> str:
        return f"setmaxnreg.{'inc' if self.inc else 'dec'} {self.regs}"


class RoleIR(msgspec.Struct, frozen=True):
    """One warp role's program.

    Attributes:
        name: role name (``cta``, ``load``, ``mma``, ``softmax``, ``correction``,
            ``spare``).
        warps: warp ids; softmax roles list one warp range per Q stage in
            ``instances`` instead.
        instances: (q_stage, warps) for roles instantiated per Q stage.
        body: the program.
        blog: blog chapters whose change lives in this role.
    """

    name: str
    warps: tuple
    body: tuple
    instances: tuple = ()
    regs: Optional[int] = None
    blog: str = ""


class KernelIR(msgspec.Struct, frozen=True):
    """The whole kernel: plan + role programs + wait-site table (+ the trace
    tracks and events of a profiling build)."""

    plan: object
    roles: tuple
    wait_sites: tuple = ()
    trace_tracks: tuple = ()
    trace_events: tuple = ()
    functions: tuple = ()  # backend nodes that define device functions the roles call

    def text(self) -> str:
        """Printable IR (``b200c compile --emit ir``)."""
        p = self.plan
        from .signature import KERNEL_NAME

        stage = f" (blog stage {p.blog_stage})" if p.blog_stage else ""
        out = [f"kernel {getattr(p, 'kernel_name', KERNEL_NAME)}  // {p.name}{stage}",
               f"  threads={p.threads} dynamic_smem={p.smem_bytes} tmem_cols={p.tmem_alloc_cols}"]
        for r in self.roles:
            inst = ", ".join(f"q={q}: warps {w[0]}-{w[-1]}" for q, w in r.instances) if r.instances else \
                (f"warps {r.warps[0]}-{r.warps[-1]}" if len(r.warps) > 1 else f"warp {r.warps[0]}")
            regs = f", setmaxnreg {r.regs}" if r.regs else ""
            out.append(f"\nrole {r.name} ({inst}{regs})" + (f"   // {r.blog}" if r.blog else ""))
            _print(r.body, 1, out)
        if self.functions:
            out.append("\nfunctions:")
            _print(self.functions, 1, out)
        out.append("\nwait sites:")
        for w in self.wait_sites:
            out.append(f"  {w.id:3d}  {w.role:<12s} {w.barrier}")
        return "\n".join(out) + "\n"


def _print(body, depth, out):
    for n in body:
        out.append("  " * depth + n.describe())
        _print(n.children(), depth + 1, out)

"""Kernel IR: per warp role, a structured program of barrier waits/arrives,
TMA loads, MMA issues/commits, TMEM loads/stores and softmax blocks.

The emitter renders exactly these nodes (one jinja2 template per node type,
``templates/stmt/<NodeType>.j2``), so ``b200c compile --emit ir`` shows what the
kernel does. Expressions are small C expressions over the role's variables
(``j`` is the K/V tile, ``i`` the steady-state iteration, ``c`` the kernel
context); they print verbatim.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional


@dataclass(frozen=True)
class Node:
    """Base of every IR statement."""

    def children(self) -> tuple:
        return getattr(self, "body", ())

    def describe(self) -> str:
        """One-line text of the node for ``--emit ir``."""
        parts = []
        for f in fields(self):
            if f.name == "body" or f.name == "params":
                continue
            v = getattr(self, f.name)
            if v is None or v == () or v is False:
                continue
            parts.append(f"{f.name}={v}")
        return f"{type(self).__name__.lower()} " + " ".join(parts)


@dataclass(frozen=True)
class PhaseRef:
    """Phase-parity state of a barrier as seen by one role: variable ``var``,
    one bit per barrier instance (``index`` expression selects it), flipped
    after each completed wait. ``storage``: ``scalar``, ``array`` or
    ``bitmask`` (minor optimization 17)."""

    var: str
    index: Optional[str] = None
    storage: str = "scalar"

    def __str__(self) -> str:
        return self.var if self.index is None else f"{self.var}[{self.index}]"


@dataclass(frozen=True)
class Comment(Node):
    text: str

    def describe(self) -> str:
        return f"// {self.text}"


@dataclass(frozen=True)
class Decl(Node):
    """Role-local variable: ``ctype name[array] = init``."""

    ctype: str
    name: str
    init: str
    array: Optional[int] = None

    def describe(self) -> str:
        arr = f"[{self.array}]" if self.array else ""
        return f"decl {self.ctype} {self.name}{arr} = {self.init}"


@dataclass(frozen=True)
class PhaseDecl(Node):
    """Phase bits of one barrier family for this role, all starting at ``init``
    (0 for consumers of full barriers, 1 for producers waiting on empty ones)."""

    var: str
    count: int
    init: int
    storage: str

    def describe(self) -> str:
        return f"phase {self.var}[{self.count}] = {self.init} ({self.storage})"


@dataclass(frozen=True)
class Assign(Node):
    target: str
    expr: str

    def describe(self) -> str:
        return f"{self.target} = {self.expr}"


@dataclass(frozen=True)
class WorkLoop(Node):
    """Work items of this CTA: one (``blockIdx.x``) or, persistent, a
    grid-stride loop (blog ch.14). Binds ``w`` (WorkItem) in the body."""

    persistent: bool
    body: tuple = ()

    def describe(self) -> str:
        return "for work = blockIdx.x; work < num_work; work += gridDim.x" if self.persistent else "work = blockIdx.x"


@dataclass(frozen=True)
class Loop(Node):
    """``for (int var = start; var < stop; ++var)``."""

    var: str
    start: str
    stop: str
    body: tuple = ()
    note: str = ""

    def describe(self) -> str:
        return f"for {self.var} in [{self.start}, {self.stop})" + (f"   // {self.note}" if self.note else "")


@dataclass(frozen=True)
class If(Node):
    cond: str
    body: tuple = ()

    def describe(self) -> str:
        return f"if {self.cond}"


@dataclass(frozen=True)
class Single(Node):
    """Body run by one thread: ``thread0`` (thread 0 of the CTA) or ``elect``
    (``elect.sync`` lane of the warp, then ``__syncwarp``)."""

    who: str
    body: tuple = ()

    def describe(self) -> str:
        return f"single {self.who}"


@dataclass(frozen=True)
class Wait(Node):
    """Wait for a phase of mbarrier ``barrier[index]``; flip the phase bit.
    ``fence_after`` adds ``tcgen05.fence::after_thread_sync`` (the reader of
    TMEM or the MMA issuer after a hand-off, PTX 9.7.16.6.4)."""

    barrier: str
    index: Optional[str]
    phase: PhaseRef
    site: int
    iter: str = "-1"
    fence_after: bool = False

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        f = "; tcgen05.fence::after_thread_sync" if self.fence_after else ""
        return f"wait {self.barrier}{idx} parity {self.phase} (site {self.site}){f}"


@dataclass(frozen=True)
class Arrive(Node):
    """Arrive on ``barrier[index]``. ``by``: ``warp`` (``__syncwarp`` then lane
    0; one arrival per warp) or ``thread``. ``tx_bytes`` makes it
    ``arrive.expect_tx``. ``fence_before`` = ``tcgen05.wait::st`` +
    ``tcgen05.fence::before_thread_sync`` (TMEM writers, PTX 9.7.16.6.4)."""

    barrier: str
    index: Optional[str] = None
    by: str = "warp"
    tx_bytes: Optional[str] = None
    fence_before: bool = False

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        tx = f" expect_tx {self.tx_bytes}" if self.tx_bytes else ""
        fb = "tcgen05.fence::before_thread_sync; " if self.fence_before else ""
        return f"{fb}arrive {self.barrier}{idx} by {self.by}{tx}"


@dataclass(frozen=True)
class Commit(Node):
    """``tcgen05.commit`` to ``barrier[index]``: one arrival once every MMA this
    thread issued so far has completed."""

    barrier: str
    index: Optional[str] = None

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return f"tcgen05.commit -> {self.barrier}{idx}"


@dataclass(frozen=True)
class TmaLoadTile(Node):
    """TMA-load one 128 x 128 BF16 tile of ``tensor`` (q/k/v), rows starting
    at ``row`` of (batch w.b, head w.h), into SMEM offset ``dst``; completes
    on ``barrier[index]`` (slices per the swizzle mode, blog ch.1/3)."""

    tensor: str
    dst: str
    row: str
    barrier: str
    index: Optional[str] = None

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return f"tma.load {self.tensor.upper()} rows {self.row} -> smem {self.dst} (complete_tx {self.barrier}{idx})"


@dataclass(frozen=True)
class MmaQK(Node):
    """S[tmem s_col] = Q[smem q] . K[smem k]^T: 8 MMAs of K=16 (blog ch.1 §A)."""

    q_stage: int
    s_col: str
    q_buf: str
    k_buf: str

    def describe(self) -> str:
        return f"mma.qk  S{self.q_stage}[tmem {self.s_col}] = Q{self.q_stage}[smem {self.q_buf}] . K[smem {self.k_buf}]^T   (8 x tcgen05.mma K=16)"


@dataclass(frozen=True)
class MmaPV(Node):
    """O[tmem o_col] (+)= P . V for K steps [k_lo, k_hi) (blog ch.1 §C, ch.2,
    ch.13). P from TMEM column ``p_col`` or SMEM buffer ``p_buf``."""

    q_stage: int
    o_col: str
    v_buf: str
    k_lo: int
    k_hi: int
    accumulate: str
    p_col: Optional[str] = None
    p_buf: Optional[str] = None

    def describe(self) -> str:
        src = f"P{self.q_stage}[tmem {self.p_col}]" if self.p_col else f"P[smem {self.p_buf}]"
        return (f"mma.pv  O{self.q_stage}[tmem {self.o_col}] += {src} . V[smem {self.v_buf}]  k-steps "
                f"[{self.k_lo},{self.k_hi}) accumulate={self.accumulate}")


@dataclass(frozen=True)
class SoftmaxParams:
    """Everything the softmax/correction/epilogue templates need.

    Columns are TMEM column offsets from the allocation base; ``q`` is the C
    expression of the Q stage (a template parameter in softmax roles).
    """

    q: str
    s_col: str
    o_col: str
    p_col: Optional[str]
    p_storage: str
    p_buf: Optional[str]
    exp2: str
    sw_exp2_per16: int
    s_cache_cols: int
    s_load_cols: int
    deferred_s_wait: bool
    rowmax_chains: int
    split_rowsum: bool
    rescale_threshold: Optional[float]
    swizzle: str

    def describe(self) -> str:
        bits = [f"exp={self.exp2}"]
        if self.sw_exp2_per16:
            bits.append(f"sw_exp2={self.sw_exp2_per16}/16")
        if self.s_cache_cols:
            bits.append(f"s_cache={self.s_cache_cols} (P high->low)")
        bits.append(f"ld=x{self.s_load_cols}")
        if self.deferred_s_wait:
            bits.append("deferred wait::ld")
        if self.rowmax_chains > 1:
            bits.append(f"rowmax_chains={self.rowmax_chains}")
        if self.split_rowsum:
            bits.append("split rowsum")
        if self.rescale_threshold is not None:
            bits.append(f"rebase if gap>={self.rescale_threshold}")
        p = f"P->tmem {self.p_col}" if self.p_storage == "tmem" else f"P->smem {self.p_buf}"
        bits.append(p)
        return " ".join(bits)


@dataclass(frozen=True)
class SoftmaxRowmax(Node):
    """Pass 1 over S: tile rowmax (and the S register cache, ch.10)."""

    params: SoftmaxParams

    def describe(self) -> str:
        p = self.params
        bits = [f"ld=x{p.s_load_cols}"]
        if p.s_cache_cols:
            bits.append(f"keep high {p.s_cache_cols} columns in registers")
        if p.deferred_s_wait:
            bits.append("deferred wait::ld")
        if p.rowmax_chains > 1:
            bits.append(f"{p.rowmax_chains} rowmax chains")
        return f"softmax.rowmax S[tmem {p.s_col}]  " + " ".join(bits)


@dataclass(frozen=True)
class SoftmaxRebase(Node):
    """New running rowmax, rescale factor, rowsum *= rescale (ch.1, 8, 11)."""

    params: SoftmaxParams

    def describe(self) -> str:
        t = self.params.rescale_threshold
        return "softmax.rebase  " + ("always" if t is None else f"only if gap >= {t} (log2 units)")


@dataclass(frozen=True)
class RescaleO(Node):
    """O *= rescale over the 128 O columns of this warp's 32 lanes. ``source``:
    ``reg`` (softmax warps, factor in a register) or ``smem`` (correction
    warps read the factor published by softmax, ch.12). ``skip_unit``: skip the
    warp's pass when no row rebased (warp-uniform, ch.11)."""

    params: SoftmaxParams
    source: str = "reg"
    skip_unit: bool = False

    def describe(self) -> str:
        s = " (skipped when no row of the warp rebased)" if self.skip_unit else ""
        return f"rescale.o O[tmem {self.params.o_col}] *= factor from {self.source}{s}"


@dataclass(frozen=True)
class StoreStats(Node):
    """Softmax publishes a per-row value to SMEM for the correction warps:
    ``what`` = ``scale`` (this tile's rescale factor) or ``rowsum`` (final)."""

    q: str
    what: str

    def describe(self) -> str:
        return f"stats.store {self.what}[q={self.q}][row]"


@dataclass(frozen=True)
class SoftmaxP(Node):
    """Pass 2: P = exp(S - rowmax) for the columns of ``part`` (``all``,
    ``hi``: the first-published high columns, ``lo``: the rest), rowsum +=,
    P stored to TMEM or SMEM (ch.1, 2, 8, 9, 10, 13, 16)."""

    params: SoftmaxParams
    part: str = "all"
    cols: tuple = (0, 128)

    def describe(self) -> str:
        return f"softmax.p part={self.part} S cols [{self.cols[0]},{self.cols[1]})  {self.params.describe()}"


@dataclass(frozen=True)
class Epilogue(Node):
    """O / rowsum -> BF16 -> global memory for this warp's 32 rows (ch.1).
    ``rowsum`` from ``reg`` (softmax warps) or ``smem`` (correction warps)."""

    params: SoftmaxParams
    rowsum: str = "reg"

    def describe(self) -> str:
        return f"epilogue O[tmem {self.params.o_col}] / rowsum({self.rowsum}) -> out (bf16, rows of Q tile w.q_tile+{self.params.q})"


@dataclass(frozen=True)
class CtaSync(Node):
    """Named barrier 1 over the role threads (not the emulator warp), with the
    writers' fences before it (``fence.proxy.async`` for P in SMEM,
    ``tcgen05.wait::st`` + ``fence::before_thread_sync`` for TMEM) and
    ``tcgen05.fence::after_thread_sync`` after it."""

    threads: int
    proxy_fence: bool = False
    tcgen05_fences: bool = True

    def describe(self) -> str:
        pre = "fence.proxy.async; " if self.proxy_fence else ""
        pre += "tcgen05.wait::st; tcgen05.fence::before_thread_sync; " if self.tcgen05_fences else ""
        post = "; tcgen05.fence::after_thread_sync" if self.tcgen05_fences else ""
        return f"{pre}bar.sync 1, {self.threads}{post}"


@dataclass(frozen=True)
class Scope(Node):
    """A braced block with a comment (one MMA step, one K/V token)."""

    note: str
    body: tuple = ()

    def describe(self) -> str:
        return f"{{ {self.note}"


@dataclass(frozen=True)
class SetMaxNReg(Node):
    """``setmaxnreg.inc/dec`` for this warpgroup (PTX 9.7.19.5)."""

    regs: int
    inc: bool

    def describe(self) -> str:
        return f"setmaxnreg.{'inc' if self.inc else 'dec'} {self.regs}"


@dataclass(frozen=True)
class IssueEnd(Node):
    """The MMA issuer issues nothing more (emulator STOP; nothing natively)."""

    def describe(self) -> str:
        return "tcgen05 issue end"


@dataclass(frozen=True)
class RoleIR:
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


@dataclass(frozen=True)
class KernelIR:
    """The whole kernel: plan + role programs + wait-site table."""

    plan: object
    roles: tuple
    wait_sites: tuple = field(default=())

    def text(self) -> str:
        """Printable IR (``b200c compile --emit ir``)."""
        p = self.plan
        s = p.schedule
        from .launch import KERNEL_NAME

        out = [f"kernel {KERNEL_NAME}  // {s.name} (blog stage {s.blog_stage})",
               f"  threads={p.threads} dynamic_smem={p.smem_bytes} tmem_cols={p.tmem_alloc_cols}"]
        for r in self.roles:
            inst = ", ".join(f"q={q}: warps {w[0]}-{w[-1]}" for q, w in r.instances) if r.instances else \
                (f"warps {r.warps[0]}-{r.warps[-1]}" if len(r.warps) > 1 else f"warp {r.warps[0]}")
            regs = f", setmaxnreg {r.regs}" if r.regs else ""
            out.append(f"\nrole {r.name} ({inst}{regs})" + (f"   // {r.blog}" if r.blog else ""))
            _print(r.body, 1, out)
        out.append("\nwait sites:")
        for w in self.wait_sites:
            out.append(f"  {w.id:3d}  {w.role:<12s} {w.barrier}")
        return "\n".join(out) + "\n"


def _print(body, depth, out):
    for n in body:
        out.append("  " * depth + n.describe())
        _print(n.children(), depth + 1, out)

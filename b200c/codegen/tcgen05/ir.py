"""IR nodes of the tcgen05 backend (sm_100a): MMA issue into TMEM, commits,
TMEM loads/stores of the softmax, correction and epilogue blocks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..ir import AsyncArrive, Node


@dataclass(frozen=True)
class Commit(AsyncArrive):
    """``tcgen05.commit`` to ``barrier[index]``: one arrival once every MMA this
    thread issued so far has completed (PTX ISA 9.7.16.12.1)."""

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return f"tcgen05.commit -> {self.barrier}{idx}"

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
class IssueEnd(Node):
    """The MMA issuer issues nothing more (emulator STOP; nothing natively)."""

    def describe(self) -> str:
        return "tcgen05 issue end"


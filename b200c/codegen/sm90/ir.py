"""IR nodes of the Hopper backend (sm_90a): wgmma issue and waits, and the
consumer warpgroup's register-resident softmax (FlashAttention-3 §3).

Call nodes (in role bodies) render as one call each; the ``*Fn`` nodes (in
``KernelIR.functions``) define those device functions once, with the
schedule's decisions (exp mode, software-exp2 split, rescale threshold)
already made in Python.
"""
from __future__ import annotations

from typing import Optional

from ..ir import Node, TmaLoadTile, WorkLoop


class DenseWorkLoop(WorkLoop):
    """The sm_90a kernel's work loop over dense (b, h, Q tile) items (``c.num_work``, no varlen
    items to skip); the shared :class:`~b200c.codegen.ir.WorkLoop` walks the shared work
    decomposition's items."""


def tma_tile(tensor: str, dst: str, row: str, barrier: str, index: Optional[str] = None) -> TmaLoadTile:
    """A TMA tile load of this backend's dense context (head ``w.h``, batch ``w.b``): boxes of 64
    columns by BLOCK_M (Q) or BLOCK_N (K, V) rows, each box TMA_Q/KV_SLICE_BYTES."""
    kind = "Q" if tensor == "q" else "KV"
    return TmaLoadTile(tensor, dst, row, barrier, index, head="w.h", rows="BLOCK_M" if tensor == "q" else "BLOCK_N",
                       batch="w.b", box_cols="64", slice_bytes=f"TMA_{kind}_SLICE_BYTES")


class WgmmaQK(Node):
    """S = Q K^T: head_dim / 16 SS wgmmas (m64 n{block_n} k16) into the ``s``
    registers, then ``wgmma.commit_group`` (PTX ISA 9.7.15.5.2, 9.7.15.7).
    ``q_addr``/``k_addr``: shared-window addresses (C expressions) of the tiles."""

    q_addr: str
    k_addr: str

    def describe(self) -> str:
        return f"wgmma.qk  s = Q[{self.q_addr}] . K[{self.k_addr}]^T   (SS, commit group)"


class WgmmaPV(Node):
    """O += P V: block_n / 16 RS wgmmas (A = P from the ``p`` registers, B = V
    N-major), then ``wgmma.commit_group``."""

    v_buf: str

    def describe(self) -> str:
        return f"wgmma.pv  o += p . V[smem {self.v_buf}]   (RS, commit group)"


class WgmmaWait(Node):
    """``wgmma.wait_group pending`` (at most ``pending`` groups still in flight),
    then a compiler fence on the registers the completed groups wrote
    (``regs``: ``s``, ``o`` or ``so``) so no read is hoisted above the wait."""

    pending: int
    regs: str
    note: str = ""

    def describe(self) -> str:
        return f"wgmma.wait_group {self.pending}; fence {self.regs}" + (f"   // {self.note}" if self.note else "")


class Softmax(Node):
    """Online softmax of the ``s`` registers in place (S -> unnormalised P,
    FP32); ``last``: C condition of the partial last K/V tile (its columns >=
    S_kv are masked to -inf first)."""

    last: str

    def describe(self) -> str:
        return f"softmax(s) in place; mask columns >= seq_kv if {self.last}"


class RescaleO(Node):
    """O *= the row factors of the last softmax (before the next PV accumulates)."""

    def describe(self) -> str:
        return "rescale o by the last softmax's row factors"


class PackP(Node):
    """``p`` = bf16x2 pairs of ``s``: the A fragments of the next PV."""

    def describe(self) -> str:
        return "p = bf16x2(s)  (the A fragments of PV)"


class ConsumerInit(Node):
    """New work item: running max -inf, row sums 0, O = 0."""

    def describe(self) -> str:
        return "row max = -inf, row sums = 0, o = 0"


class StoreO(Node):
    """Epilogue: quad-reduce the row sums, O / l, BF16, store this warpgroup's
    64 rows (Q stage ``q`` of the work item; rows >= S_q skipped)."""

    q: str

    def describe(self) -> str:
        return f"store o / rowsum -> out rows of Q stage {self.q}"


class SoftmaxFn(Node):
    """Defines ``softmax_tile`` (its lines ``code``, written by :mod:`b200c.codegen.sm90.softmax`
    from these decisions): tile row max (4 independent chains + 2 quad shuffles), rebase of the
    running max (only past ``threshold`` log2 units if set, blog ch.11), P = exp(S c - m c) with
    ``mode`` ``expf`` (natural-log units, ``__expf``) or ``ex2`` (``ex2.approx.ftz``, scale folded
    into log2 units, blog ch.8), the last ``sw_per16`` of every 16 registers through the FMA-pipe
    polynomial (blog ch.9), per-thread partial row sums; ``nan``: the row max is ``max.NaN``;
    ``top_p``: the rowsum takes the BF16 rounding of the tile's largest P, by the exp2 of its
    column when ``top_sw_from`` is set (:mod:`b200c.codegen.softmax_rules`)."""

    mode: str
    threshold: Optional[float]
    sw_per16: int
    nan: bool = False
    top_p: bool = False
    top_sw_from: Optional[int] = None
    code: tuple = ()

    def describe(self) -> str:
        thr = "always rebase" if self.threshold is None else f"rebase only if the max grew >= {self.threshold} log2"
        sw = f", {self.sw_per16} of 16 via the FMA-pipe exp2" if self.sw_per16 else ""
        return f"fn softmax_tile: {self.mode}{sw}; {thr}"


class RescaleFn(Node):
    """Defines ``rescale_o`` (its lines ``code``); with ``skip`` the warp skips it when none of its
    rows rebased (blog ch.11)."""

    skip: bool
    code: tuple = ()

    def describe(self) -> str:
        return "fn rescale_o" + (" (skipped when no row of the warp rebased)" if self.skip else "")

"""IR nodes of the Hopper backend (sm_90a): wgmma issue and waits, and the
consumer warpgroup's register-resident softmax (FlashAttention-3 §3).

Call nodes (in role bodies) render as one call each; the ``*Fn`` nodes (in
``KernelIR.functions``) define those device functions once, with the
schedule's decisions (exp mode, software-exp2 split, rescale threshold)
already made in Python.
"""
from __future__ import annotations

from typing import Optional

from ..ir import Node, TxLoad




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
    """Online softmax of the ``s`` registers in place (S -> unnormalised P, FP32) for K/V tile
    ``tile`` (a C expression): ``softmax_tile`` on the tiles every row sees whole (``tile <
    w.n_full``), else ``softmax_tile_masked`` with this thread's two rows' column limits
    (``col_limit`` of the shared work decomposition: the partial last tile, the causal diagonal)."""

    tile: str
    masked: Optional[bool] = None  # known to be a masked (True) or whole (False) tile; None: decided at run time
    q: str = "q"  # the Q stage (C expression): its head and rows for the mods
    code: tuple = ()  # with mods: the call lines (b200c/codegen/sm90/softmax.py softmax_node)

    def describe(self) -> str:
        how = {None: f"masked per row unless {self.tile} < w.n_full", True: "masked per row", False: "whole"}
        return f"softmax(s) of K/V tile {self.tile} in place ({how[self.masked]})" + (
            "; score_mod / mask_mod first" if self.code else "")


class ApplyModsFn(Node):
    """Defines ``apply_mods``: every S register of a tile through ``mod_entry``
    (:mod:`b200c.codegen.mod_kernel`: score_mod, and mask_mod on the masked tiles), with the
    register's row and column from the wgmma D fragment layout (its lines ``code``)."""

    code: tuple = ()

    def describe(self) -> str:
        return "fn apply_mods: score_mod / mask_mod on the S registers"


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
    """Epilogue: quad-reduce the row sums, O / l, BF16, store this warpgroup's 64 rows (Q stage
    ``q`` of the work item; rows past the sequence skipped) and, when asked, their LSE. ``redecode``:
    the store decodes the work item again from its index instead of keeping the item's fields live
    through the K/V loop."""

    q: str
    redecode: bool = False

    def describe(self) -> str:
        again = " (work item decoded again)" if self.redecode else ""
        return f"store o / rowsum -> out rows of Q stage {self.q} (and the LSE if c.lse){again}"


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
    masked: bool = False  # softmax_tile_masked: per-row column limits; rows that saw no key stay P = 0
    row_bias: bool = False  # softmax_tile_biased: no column limits; the scores are s + a per-row offset
    relative_limits: bool = False  # masked: compare 8 i + e against the limit minus the thread's first column
    code: tuple = ()

    @property
    def name(self) -> str:
        return "softmax_tile" + ("_biased" if self.row_bias else "_masked" if self.masked else "")

    def describe(self) -> str:
        thr = "always rebase" if self.threshold is None else f"rebase only if the max grew >= {self.threshold} log2"
        sw = f", {self.sw_per16} of 16 via the FMA-pipe exp2" if self.sw_per16 else ""
        return f"fn {self.name}: {self.mode}{sw}; {thr}"


class RescaleFn(Node):
    """Defines ``rescale_o`` (its lines ``code``); with ``skip`` the warp skips it when none of its
    rows rebased (blog ch.11)."""

    skip: bool
    code: tuple = ()

    def describe(self) -> str:
        return "fn rescale_o" + (" (skipped when no row of the warp rebased)" if self.skip else "")


class StoreOFn(Node):
    """Defines ``store_o`` (its lines ``code``, written by :mod:`b200c.codegen.sm90.softmax`): the
    quad-reduced row sums, O / (l + the top-P roundings when ``top_p``), BF16 stores of this
    warpgroup's rows and, when the call asks (``c.lse``), the LSE in natural-log units from the
    exact l (``mode``: the units of the running max; a row that saw no key: O = 0, LSE = -inf)."""

    mode: str
    top_p: bool = False
    sinks: bool = False  # a per-head sink logit joins every row's denominator (and the LSE)
    split: bool = False  # split-KV: FP32 O and the LSE to the workspace (b200c/codegen/work.py), the sink at the merge
    split_sinks: bool = False  # split-KV with sinks: a call of one split stores O as the unsplit kernel, sink included
    code: tuple = ()

    def describe(self) -> str:
        if self.split:
            return ("fn store_o: O / rowsum (FP32) and LSE of this split to the split-KV workspace; with one split "
                    "BF16 O and the LSE to the output")
        return "fn store_o: O / rowsum, BF16 stores, LSE" + (
            " (top-P roundings in O's normaliser only)" if self.top_p else "") + (", attention sinks" if self.sinks
                                                                                 else "")


# ---- the backward kernel's nodes (b200c/codegen/sm90/backward.py) ----------------------------------


class BulkLoad(TxLoad):
    """``cp.async.bulk`` of ``tx_bytes`` bytes from global ``src`` to shared ``dst`` (C expressions),
    completing on barrier ``barrier`` (PTX ISA 9.7.9.25.4.1): the backward's per-visit LSE and D rows."""

    dst: str = ""
    src: str = ""

    def describe(self) -> str:
        return f"bulk load {self.src} -> smem {self.dst} ({self.tx_bytes} B) on {self.barrier}[{self.index}]"


class BwdSdp(Node):
    """S^T = K_w Q^T and dP^T = V_w dO^T of the consumer warpgroup's keys (two SS wgmma groups)."""

    def describe(self) -> str:
        return "wgmma S^T = K_w Q^T; wgmma dP^T = V_w dO^T  (two commit groups)"


class BwdPdV(Node):
    """Wait for S^T; P^T = exp2(S^T scale log2 e - LSE), masked where ``masked`` (a C condition) holds;
    packed to bf16x2 and dV += P^T dO (RS wgmma group), unless ``dv_late`` (then BwdDsDk does both)."""

    masked: str
    ahead: int = 1  # groups of four registers whose LSE pair is read ahead of its use (the first while S^T runs)
    dv_late: bool = False  # P^T packed and dV issued after dS^T (BwdDsDk.dv_late), not here

    def describe(self) -> str:
        dv = "" if self.dv_late else "; wgmma dV += P^T dO"
        return f"wait S^T; P^T = exp2(S^T c - lse) (masked if {self.masked}){dv}"


class BwdDsDk(Node):
    """Wait for dP^T; dS^T = P^T (dP^T - D) to registers and to the visit's dS^T tile in SMEM; dK += dS^T Q
    (RS wgmma group); ``fence.proxy.async`` so the tile is visible to the next wgmma. ``ahead``: each group
    of four registers' D pair is read from SMEM that many groups before its use (the first ``ahead`` while
    dP^T runs), so the subtraction does not wait for the load (2 registers per group ahead)."""

    ahead: int = 1
    issue_dk: bool = True  # False: dK's wgmmas are issued after dQ's (BwdDq.dk_after)
    dv_late: bool = False  # pack P^T as dS^T is made and issue dV after it (FA3's order: fewer live registers)

    def describe(self) -> str:
        dv = "P^T packed; wgmma dV += P^T dO; " if self.dv_late else ""
        dk = "wgmma dK += dS^T Q; " if self.issue_dk else ""
        return f"wait dP^T; dS^T = P^T (dP^T - D) -> regs and smem ds[v % 2]; {dv}{dk}fence.proxy.async"


class BwdDq(Node):
    """This warpgroup's share of dQ = dS K (its columns, its 64 rows, or every column over its own keys:
    ``dq_split``; SS wgmma, both operands MN-major), then
    ``wgmma.wait_group 0``: every wgmma of the visit done (the stage's Q and dO no longer read).
    ``dk_first``: wait for the dV and dK wgmmas before dQ's are issued, so that the P^T and dS^T registers
    they read are free before dQ's accumulators are live (:func:`b200c.codegen.backward_plan.dk_before_dq`)."""

    dk_first: bool = False
    dk_after: bool = False  # issue dK += dS^T Q after dQ's wgmmas and wait only for dQ (wait_group 1): BwdDkWait ends it

    def describe(self) -> str:
        first = "wait_group 0 (dV, dK); " if self.dk_first else ""
        if self.dk_after:
            return "wgmma dQ (wg's share) = dS K; wgmma dK += dS^T Q; wait_group 1 (dV, dQ)"
        return f"{first}wgmma dQ (wg's share) = dS K; wait_group 0"


class BwdDkWait(Node):
    """``wgmma.wait_group 0`` after dQ left the registers: the dK wgmmas queued behind dQ's are done (the
    stage's Q is no longer read)."""

    def describe(self) -> str:
        return "wait_group 0 (dK)"


class BwdDqAdd(Node):
    """dq_accum[Q tile of (b, h, i), this warpgroup's part] += dQ from every thread's registers
    (``red.global.add.v4.f32``, the fragment order: 16 contiguous bytes per thread)."""

    def describe(self) -> str:
        return "dq_accum += dQ (red.global.add.v4.f32, fragment order)"


class BwdDqBufferFree(Node):
    """Bulk dQ: the warpgroup's issuing thread waits until its previous bulk reduce-add has read the
    warpgroup's ``dq`` region (``cp.async.bulk.wait_group.read 0``); the named barrier after it tells the
    other threads that the region may be written."""

    def describe(self) -> str:
        return "issuing thread: cp.async.bulk.wait_group.read 0 (the dq region read by the last reduce-add)"


class BwdDqStage(Node):
    """Bulk dQ: every thread writes its dQ registers to the warpgroup's ``dq`` region in fragment order
    (``st.shared.v4``: 512 contiguous bytes per warp instruction), then ``fence.proxy.async`` so the bulk
    copy engine sees them."""

    def describe(self) -> str:
        return "st.shared.v4 dQ -> dq[wg] (fragment order); fence.proxy.async"


class BwdDqBulkAdd(Node):
    """Bulk dQ: the warpgroup's issuing thread adds its ``dq`` region into the Q tile's part of
    ``dq_accum`` (``cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32``, then ``commit_group``)."""

    def describe(self) -> str:
        return "issuing thread: cp.reduce.async.bulk .add.f32 dq_accum[tile part] += dq[wg]; commit_group"


class BwdDqDrain(Node):
    """Bulk dQ, after the last visit: the issuing thread waits for its reduce-adds to complete
    (``cp.async.bulk.wait_group 0``) before the CTA's shared memory goes away."""

    def describe(self) -> str:
        return "issuing thread: cp.async.bulk.wait_group 0 (every reduce-add done)"


class BwdDqTurnWait(Node):
    """Deterministic dQ: one thread of the warpgroup waits (``ld.acquire.gpu``) until the Q tile's turn
    counter reaches this work item's turn: every earlier K/V tile of the sequence (and, where the warpgroups
    add into the same dQ elements, every earlier warpgroup of this CTA) has added into these rows."""

    def describe(self) -> str:
        return "wait dq_semaphore[b, h, i] >= turn (ld.acquire.gpu)"


class BwdDqTurnDone(Node):
    """Deterministic dQ: after the warpgroup's additions (every thread of it past a named barrier), one
    thread adds 1 to the Q tile's turn counter (``fence.acq_rel.gpu`` then ``red.relaxed.gpu.add``)."""

    def describe(self) -> str:
        return "dq_semaphore[b, h, i] += 1 (fence.acq_rel.gpu; red.relaxed.gpu.add)"


class BwdStoreDkDv(Node):
    """Epilogue: dK * softmax_scale and dV of this warpgroup's keys to global memory in BF16 (keys past
    S_kv dropped)."""

    def describe(self) -> str:
        return "store dK * scale, dV (bf16) of this warpgroup's keys (or columns)"

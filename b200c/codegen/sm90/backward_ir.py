"""The sm_90a backward kernel's warp roles as IR, and the barrier protocol they must keep.

:func:`backward_ir` builds a :class:`b200c.codegen.ir.KernelIR` of two roles from a
:class:`~b200c.codegen.sm90.backward.BackwardLayout`:

* ``load`` (warp 0, one elected thread): K and V of the work item once (``kv_full``), then per visit
  ``v`` the Q and dO tiles and the visit's LSE and D rows into stage ``v % Q_STAGES`` (``q_full``),
  after the consumers freed it (``q_empty``);
* ``consumer`` (one instance per consumer warpgroup): waits for K/V and each stage, computes the visit
  (backend nodes of :mod:`b200c.codegen.sm90.ir`), meets the other warpgroups (or, where each
  warpgroup's dQ reads only its own keys, its own four warps) at the named barrier ``ds_ready`` once its
  dS^T rows are in shared memory, frees the stage (one arrival per warp) after its last wgmma reading it
  completed, and adds its dQ into ``dq_accum``: with ``dq_store == "bulk"`` through its ``dq`` region
  (its threads meet at ``dq_full``, then one thread issues the TMA bulk reduce-add; the same thread
  waits for the previous one to have read the region before ``ds_ready``, so the region is free when
  the threads pass it), else with ``red.global.add`` from every thread.

The role functions of the generated kernel are this IR rendered (``stmt/*.j2``), so the protocol the
verifier (:func:`b200c.codegen.verify.verify`) checks is the one the kernel runs. The verifier's "K/V
tiles per work item" is the item's visit count here (``visits``), its K/V ring the Q / dO ring.
"""
from __future__ import annotations

import msgspec

from ..barriers import BarrierTable, NamedBarrier, Party
from ..ir import Arrive, Decl, KernelIR, Loop, NamedBarSync, PhaseRef, RoleIR, Single, TmaLoadTile, Wait
from .ir import (BulkLoad, BwdDkWait, BwdDq, BwdDqAdd, BwdDqBufferFree, BwdDqBulkAdd, BwdDqDrain, BwdDqStage,
                 BwdDqTurnDone, BwdDqTurnWait, BwdDsDk, BwdPdV, BwdSdp, BwdStoreDkDv)


#: register groups (four accumulator registers: two query rows) whose LSE or D pair is read from shared memory
#: before the group is reached; the first while the wgmma producing S^T (dP^T) still runs
READ_AHEAD = 1


class BackwardTile(msgspec.Struct, frozen=True):
    """The tile sizes the verifier reads (``tile_bytes`` of each TMA-loaded tensor)."""

    block_m: int
    block_n: int
    head_dim: int
    q_tile_bytes: int
    k_tile_bytes: int

    def tile_bytes(self, tensor: str) -> int:
        """Bytes one TMA tile load of ``tensor`` (q, do: a Q tile; k, v: a K/V tile) completes."""
        return self.q_tile_bytes if tensor in ("q", "do") else self.k_tile_bytes


class BackwardProtocol(msgspec.Struct, frozen=True):
    """The backward kernel's barriers and what the protocol verifier needs to simulate them.

    Attributes:
        name: the schedule's name.
        barriers: the mbarrier families (:class:`b200c.codegen.barriers.Barrier`), index order.
        named_barriers: ``ds_ready`` (per visit: across the consumer warpgroups, or one per warpgroup
            where each reads only its own dS^T rows).
        tile: :class:`BackwardTile`.
        q_stages: depth of the Q / dO ring; ``kv_stages`` repeats it (the verifier sizes its runs from
            the ring it finds there: visits around ``q_stages``).
        kv_tokens: ``"paired"``: one ring use per visit.
        persistent: False (one CTA per work item).
        threads, smem_bytes, kernel_name: for the printed IR (``b200c compile --emit ir``).
    """

    name: str
    barriers: tuple
    named_barriers: tuple
    tile: BackwardTile
    q_stages: int
    kv_stages: int
    kv_slot_bytes: int = 0
    kv_tokens: str = "paired"
    persistent: bool = False
    smem: tuple = ()
    threads: int = 0
    smem_bytes: int = 0
    tmem_alloc_cols: int = 0
    blog_stage: int = 0
    kernel_name: str = ""


def backward_protocol(lay, kernel_name: str = "") -> BackwardProtocol:
    """The barrier families of a layout (:class:`~b200c.codegen.sm90.backward.BackwardLayout`);
    ``kernel_name``: the main kernel's entry point, for the printed IR."""
    t = BarrierTable()
    wgs = lay.mma_warpgroups
    t.add("kv_full", 1, [Party("load", "expect_tx", 1)], ["consumer"], ring=True,
          arrive_by="the producer's arrive.expect_tx + TMA of K and V", wait_by="every consumer warpgroup")
    t.add("q_full", lay.q_stages, [Party("load", "expect_tx", 1)], ["consumer"], ring=True,
          arrive_by="the producer's arrive.expect_tx + TMA of Q, dO and bulk copies of LSE, D",
          wait_by="every consumer warpgroup")
    t.add("q_empty", lay.q_stages, [Party("consumer", "warp", 4 * wgs, per_instance=True)], ["load"],
          starts_free=True, arrive_by="each consumer warp once its wgmmas reading the stage completed",
          wait_by="the producer")
    if lay.dq_split != "keys":  # each warpgroup's dQ reads every warpgroup's dS^T rows
        named = (NamedBarrier("ds_ready", 1, 1, 128 * wgs, ("consumer",),
                              note="every consumer warpgroup wrote its keys' dS^T rows before any reads them all"),)
    else:  # each warpgroup's dQ reads the rows its own four warps wrote: one barrier per warpgroup
        named = (NamedBarrier("ds_ready", 1, wgs, 128, ("consumer",),
                              note="the warpgroup's four warps wrote its keys' dS^T rows before its dQ reads them"),)
    first = 1 + named[0].count
    if lay.deterministic:  # the warpgroup's threads meet before and after its turn at dq_accum
        named += (NamedBarrier("dq_turn", first, wgs, 128, ("consumer",),
                               note="deterministic dQ: the warpgroup's turn has come / its additions are done"),)
    if lay.dq_store == "bulk":  # the warpgroup's threads wrote its dq region before one of them adds it
        named += (NamedBarrier("dq_full", first, wgs, 128, ("consumer",),
                               note="bulk dQ: the warpgroup's dQ is in its dq region before the reduce-add"),)
    tile = BackwardTile(lay.block_m, lay.block_n, lay.head_dim, lay.q_tile_bytes, lay.kv_tile_bytes)
    return BackwardProtocol(lay.name, t.freeze(), named, tile, lay.q_stages, lay.q_stages, threads=lay.threads,
                            smem_bytes=lay.smem_bytes, kernel_name=kernel_name)


def _visit_decls() -> tuple:
    """The visit's query head, Q tile and ring stage (``v``: the visit, query head major)."""
    return (Decl("const int", "h", "w.h0 + v / per_head", model="0"),
            Decl("const int", "i", "w.q_lo + v % per_head", model="0"),
            Decl("const uint32_t", "st", "(uint32_t)(v % Q_STAGES)"))


def _item_decls() -> tuple:
    return (Decl("const int", "per_head", "w.visits_per_head()", model="1"),
            Decl("const int", "visits", "per_head * c.group()", model="w_n_kv"))


def load_role(lay) -> RoleIR:
    """The producer: one elected thread of warp 0."""
    q_bytes = 2 * lay.q_tile_bytes
    row = "((size_t)w.b * c.heads + h) * c.seq_pad + (size_t)i * BLOCK_M"
    visit = Loop("v", "0", "visits", body=_visit_decls() + (
        Wait("q_empty", "st", PhaseRef("((v / Q_STAGES) & 1) ^ 1", storage="value"), 0, iter="v"),
        Arrive("q_full", "st", by="thread", tx_bytes=str(q_bytes + 2 * lay.row_vec_bytes)),
        TmaLoadTile("q", "SMEM_Q + st * Q_TILE_BYTES", "w.q_row0 + i * BLOCK_M", "q_full", "st", head="h",
                    rows="BLOCK_M", batch="w.tma_b", box_cols="64", slice_bytes="Q_SLICE_BYTES"),
        TmaLoadTile("do", "SMEM_DO + st * Q_TILE_BYTES", "w.q_row0 + i * BLOCK_M", "q_full", "st", head="h",
                    rows="BLOCK_M", batch="w.tma_b", box_cols="64", slice_bytes="Q_SLICE_BYTES"),
        BulkLoad("q_full", "st", str(lay.row_vec_bytes), dst="SMEM_LSE + st * ROW_VEC_BYTES",
                 src=f"c.lse_log2 + {row}"),
        BulkLoad("q_full", "st", str(lay.row_vec_bytes), dst="SMEM_DPSUM + st * ROW_VEC_BYTES",
                 src=f"c.dpsum + {row}"),
    ), note="visits: query head major, Q tile ascending")
    body = _item_decls() + (Single("elect", body=(
        Arrive("kv_full", None, by="thread", tx_bytes=str(2 * lay.kv_tile_bytes)),
        TmaLoadTile("k", "SMEM_K", "w.kv_row0 + w.kv_tile * BLOCK_N", "kv_full", None, head="w.h_kv", rows="BLOCK_N",
                    batch="w.tma_b", box_cols="64", slice_bytes="KV_SLICE_BYTES"),
        TmaLoadTile("v", "SMEM_V", "w.kv_row0 + w.kv_tile * BLOCK_N", "kv_full", None, head="w.h_kv", rows="BLOCK_N",
                    batch="w.tma_b", box_cols="64", slice_bytes="KV_SLICE_BYTES"),
        visit)),)
    return RoleIR("load", (0,), body, regs=lay.producer_regs, blog="FA3 §3.1: the producer warp")


def _dq_add(lay) -> tuple:
    """The visit's dQ addition: bulk (stage in SMEM, meet, one thread's reduce-add), or every thread's
    red.global.add; deterministic: inside the Q tile's turn (wait, meet, add, meet, take)."""
    if lay.dq_store == "bulk":
        return (BwdDqStage(), NamedBarSync("dq_full", index="q", printed="wg",
                                           note="the warpgroup's dQ is in its dq region"), BwdDqBulkAdd())
    if not lay.deterministic:
        return (BwdDqAdd(),)
    turn = dict(index="q", printed="wg")
    return (BwdDqTurnWait(), NamedBarSync("dq_turn", note="the turn has come for every thread", **turn), BwdDqAdd(),
            NamedBarSync("dq_turn", note="every thread's additions issued before the turn is taken", **turn),
            BwdDqTurnDone())


def _visit_head(lay) -> tuple:
    """The visit up to P^T: its stage's Q / dO, S^T and dP^T, P^T (LSE pairs read one register group ahead
    of their use: at head dim 128, nvcc 13.0.88 spills with two)."""
    return (Wait("q_full", "st", PhaseRef("(v / Q_STAGES) & 1", storage="value"), 2, iter="v"),
            BwdSdp(),
            BwdPdV("w.partial || i < w.q_full_lo", ahead=READ_AHEAD, dv_late=lay.dv_after_ds))


def _ds_ready(lay) -> NamedBarSync:
    """The meeting before dQ's wgmmas read dS^T: every warpgroup, or each warpgroup's own four warps where
    each reads only its own keys' rows."""
    if lay.dq_split != "keys":
        return NamedBarSync("ds_ready", note="every key's dS^T of this visit is in SMEM")
    return NamedBarSync("ds_ready", index="q", printed="wg", note="this warpgroup's dS^T rows are in SMEM")


def consumer_role(lay) -> RoleIR:
    """One instance per consumer warpgroup (``q`` in the IR: the warpgroup's index ``wg``).

    With the bulk dQ path the visit issues dK's wgmmas after dQ's (FA3's order) and waits only for dQ
    before staging it in the dq region, so the shared-memory writes and the reduce-add overlap dK on the
    tensor cores; with red.global.add dK goes before the barrier (it runs while the warpgroups meet) and
    the visit waits for everything before the additions."""
    if lay.dq_store == "bulk":
        return _consumer_bulk(lay)
    visit = Loop("v", "0", "visits", body=_visit_decls() + _visit_head(lay) + (
        # D read as each group starts where dQ is deterministic (read ahead, nvcc 13.0.88 spills 16 B at 128)
        BwdDsDk(ahead=0 if lay.deterministic else READ_AHEAD, dv_late=lay.dv_after_ds),
        _ds_ready(lay),
        BwdDq(dk_first=lay.dk_before_dq),
        Arrive("q_empty", "st", by="warp"),
        *_dq_add(lay),
    ), note="visits: query head major, Q tile ascending")
    return _consumer(lay, visit)


def _consumer_bulk(lay) -> RoleIR:
    """The visit with dQ through the dq region: dS^T, meet, dQ then dK, dQ staged and added while dK runs."""
    if lay.dk_before_dq:  # dQ's accumulators would wait for dK: not the order this visit has
        raise ValueError("the bulk dQ visit issues dQ before dK; dk_before_dq layouts use red.global.add")
    visit = Loop("v", "0", "visits", body=_visit_decls() + _visit_head(lay) + (
        BwdDsDk(ahead=READ_AHEAD, issue_dk=False, dv_late=lay.dv_after_ds),
        BwdDqBufferFree(),
        _ds_ready(lay),
        BwdDq(dk_after=True),
        *_dq_add(lay),
        BwdDkWait(),
        Arrive("q_empty", "st", by="warp"),
    ), note="visits: query head major, Q tile ascending")
    return _consumer(lay, visit, (BwdDqDrain(),))


def _consumer(lay, visit, tail=()) -> RoleIR:
    """The role around the visit loop: K/V once, the visits, dK and dV stored, then ``tail``."""
    body = _item_decls() + (Wait("kv_full", None, PhaseRef("0", storage="value"), 1), visit, BwdStoreDkDv(), *tail)
    instances = tuple((g, tuple(range(4 * g + 4, 4 * g + 8))) for g in range(lay.mma_warpgroups))
    return RoleIR("consumer", tuple(w for _, ws in instances for w in ws), body, instances=instances,
                  regs=lay.consumer_regs, blog="FA3 §3: the consumer warpgroups")


def backward_ir(lay, kernel_name: str = "") -> KernelIR:
    """The backward kernel's IR (plan: :func:`backward_protocol`; ``kernel_name``: its entry point)."""
    from ..launch import WaitSite

    return KernelIR(backward_protocol(lay, kernel_name), (load_role(lay), consumer_role(lay)),
                    wait_sites=(WaitSite(0, "load", "q_empty"), WaitSite(1, "consumer", "kv_full"),
                                WaitSite(2, "consumer", "q_full")))


__all__ = ["BackwardProtocol", "BackwardTile", "backward_ir", "backward_protocol", "load_role", "consumer_role"]

"""Role ``cta`` (the Hopper progression's baseline): one warpgroup does
everything. Thread 0 issues the TMA loads of Q and of K(j)+V(j) into the one
K/V slot; the warpgroup waits for each hand-off: S = Q K^T (wgmma, wait),
softmax, O += P V (wgmma, wait); a named barrier then tells thread 0 that
every warp's PV finished reading the slot before it is refilled.
"""
from __future__ import annotations

from ...ir import Arrive, Comment, Decl, Loop, NamedBarSync, PhaseDecl, RoleIR, Single, Wait, WorkLoop
from ...mod_kernel import kv_row
from ...roles.load import tile_load
from ..ir import ConsumerInit, PackP, RescaleO, StoreO, WgmmaPV, WgmmaQK, WgmmaWait
from ..softmax import row_bias_per_item, softmax_node
from .consumer import row_bias, row_in_seq


def build(lw) -> RoleIR:
    """The ``cta`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`)."""
    name = "cta"
    kv_loop = (
        Comment("load K(j) and V(j) into the one K/V slot"),
        Single("thread0", (
            Arrive("kv_full", by="thread", tx_bytes="KV_SLOT_BYTES"),
            tile_load(lw, "k", "SMEM_KV", kv_row(lw.plan), "kv_full", None, "w.h_kv"),
            tile_load(lw, "v", "SMEM_KV + KV_TILE_BYTES", kv_row(lw.plan), "kv_full", None, "w.h_kv"),
        )),
        *lw.span("wait K/V", (Wait("kv_full", None, lw.phase("kv_full_ph"), lw.site(name, "kv_full"), "j"),)),
        *lw.span("issue", (WgmmaQK("c.smem + SMEM_Q", "c.smem + SMEM_KV"),)),
        *lw.span("wait QK", (WgmmaWait(0, "s", "S(j) ready"),)),
        *lw.span("softmax", (softmax_node(lw.plan, "j", None, "0"),)),
        PackP(),
        RescaleO(),
        *lw.span("issue", (WgmmaPV("SMEM_KV + KV_TILE_BYTES"),)),
        *lw.span("wait PV", (WgmmaWait(0, "o", "PV(j) done"),)),
        *lw.span("wait slot free", (NamedBarSync("slot_free", None, "every warp is done with the K/V slot"),)),
    )
    body = (
        Comment("one warpgroup: thread 0 issues TMA, the warpgroup issues wgmma and waits on every hand-off"),
        PhaseDecl("q_full_ph", 1, 0, "scalar"),
        PhaseDecl("kv_full_ph", 1, 0, "scalar"),
        WorkLoop(False, (
            ConsumerInit(),
            row_in_seq("0"),
            *((row_bias("0"),) if row_bias_per_item(lw.plan) else ()),
            Single("thread0", (
                Arrive("q_full", by="thread", tx_bytes="TILE_BYTES"),
                tile_load(lw, "q", "SMEM_Q", "w.q_row0 + w.q_tile * BLOCK_M", "q_full", None, "w.h"),
            )),
            *lw.span("wait Q", (Wait("q_full", None, lw.phase("q_full_ph"), lw.site(name, "q_full"), "-1"),)),
            Loop("j", "0", "w.n_kv", kv_loop, "K/V tiles"),
            *lw.span("epilogue", (StoreO("0"),)),
        )),
    )
    return RoleIR(name, (0, 1, 2, 3), body, blog="baseline: one warpgroup, every hand-off waited")

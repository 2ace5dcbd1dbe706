"""Role ``cta`` (blog stages 1-3): four warps do everything.

Thread 0 issues every TMA load and MMA; all 128 threads wait on each hand-off
(load -> QK -> softmax -> PV -> next load), and a named barrier publishes P.
"""
from __future__ import annotations

from ...ir import Arrive, Comment, Decl, If, Loop, PhaseDecl, RoleIR, Single, TmaLoadTile, Wait, WorkLoop
from ...mod_kernel import kv_row
from .. import softmax as sm
from ..ir import Commit, CtaSync, IssueEnd, MmaPV, MmaQK


V_DESC = "mnmajor_desc(c.smem + SMEM_KV + TILE_BYTES)"  # V sits behind K in the one K/V slot


def build(lw) -> RoleIR:
    """The ``cta`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`)."""
    s = lw.s
    name = "cta"
    ph = {b: lw.phase(f"{b}_ph") for b in ("q_full", "kv_full", "s_full", "pv_done")}
    k_steps = lw.plan.tile.pv_k_steps
    pv = (MmaPV(0, "TMEM_O(0)", V_DESC, 0, k_steps, "j > 0", p_col="TMEM_P(0)")
          if s.p_storage == "tmem" else
          MmaPV(0, "TMEM_O(0)", V_DESC, 0, k_steps, "j > 0", p_buf="SMEM_KV"))
    kv_loop = (
        Comment("load K(j) and V(j) into the one K/V slot (blog ch.1: wait on every hand-off)"),
        Single("thread0", (
            Arrive("kv_full", by="thread", tx_bytes="2 * TILE_BYTES"),
            TmaLoadTile("k", "SMEM_KV", kv_row(lw.plan), "kv_full", None, "w.h_kv", str(lw.plan.tile.block_n)),
            TmaLoadTile("v", "SMEM_KV + TILE_BYTES", kv_row(lw.plan), "kv_full", None, "w.h_kv",
                        str(lw.plan.tile.block_n)),
        )),
        Wait("kv_full", None, ph["kv_full"], lw.site(name, "kv_full"), "j", fence_after=True),
        Comment("S = Q K(j)^T"),
        Single("thread0", (MmaQK(0, "TMEM_S(0)", "kmajor_desc(c.smem + SMEM_Q)", "kmajor_desc(c.smem + SMEM_KV)"), Commit("s_full"))),
        Wait("s_full", None, ph["s_full"], lw.site(name, "s_full"), "j", fence_after=True),
        Decl("const int", "col_lim", "col_limit(c, w, row_in_seq, j)", model="0"),
        sm.rowmax_pass(lw, "TMEM_S(0)", mask=True, q="0"),
        sm.rebase(lw, mask=True),
        If("j > 0", (sm.rescale_o(lw, "0", "reg", skip_unit=s.rescale_threshold is not None),)),
        *sm.p_passes(lw, "0", [(0, lw.plan.tile.block_n, "all", [])], mask=True),
        *sm.top_p_round(lw, mask=True),
        CtaSync(lw.plan.threads, proxy_fence=s.p_storage == "smem"),
        Comment("O += P V(j)"),
        Single("thread0", (pv, Commit("pv_done"))),
        Wait("pv_done", None, ph["pv_done"], lw.site(name, "pv_done"), "j", fence_after=True),
    )
    body = (
        Comment("blog ch.1: 4 warps, thread 0 issues TMA and MMA, everyone waits on every hand-off"),
        *(PhaseDecl(f"{b}_ph", 1, 0, "scalar") for b in ("q_full", "kv_full", "s_full", "pv_done")),
        WorkLoop(False, (
            *sm.carried_decls(lw),
            Decl("float", "row_sum", "0.f"),
            *((Decl("float", "row_adj", "0.f"),) if sm.top_p_rounding(lw) else ()),  # top-P BF16 roundings (ch.11)
            *((Decl("float", "s_cache", "{}", array=s.s_cache_cols),) if s.s_cache_cols else ()),
            Single("thread0", (
                Arrive("q_full", by="thread", tx_bytes="TILE_BYTES"),
                TmaLoadTile("q", "SMEM_Q", "w.q_row0 + w.q_tile * BLOCK_M", "q_full", None, "w.h", str(lw.plan.tile.block_m)),
            )),
            Wait("q_full", None, ph["q_full"], lw.site(name, "q_full"), "-1"),
            Comment("every tile may be masked (the partial last tile, the causal diagonal): stages 1-3 keep one copy"),
            Decl("const int", "row_in_seq", "w.q_tile * BLOCK_M + (int)row", model="0"),
            Loop("j", "0", "w.n_kv", kv_loop, "K/V tiles"),
            *sm.running_max(lw),
            sm.epilogue(lw, "0", "reg"),
        )),
        Single("thread0", (IssueEnd(),)),
    )
    return RoleIR(name, (0, 1, 2, 3), body, blog="ch.1-3 (P storage ch.2, swizzle ch.3)")

"""Role ``softmax`` (blog ch.1-2, 4-5, 8-13, minor 15-17): four warps per Q
stage, one TMEM lane (row) per thread.

Per K/V tile: wait S, rowmax pass (register cache of the high S columns,
ch.10), rebase rowmax/rowsum (threshold, ch.11), then either rescale O here
(after the previous PV completed) or publish the factor to the correction
warps (ch.12), produce P (exp2 ch.8, software exp2 ch.9, high-to-low ch.10,
early-published high columns ch.13) and signal the MMA warp.
"""
from __future__ import annotations

from ...ir import Arrive, Comment, Decl, If, Loop, PhaseDecl, RoleIR, Wait, WorkLoop
from .. import softmax as sm
from ..ir import StoreStats
from ...mod_kernel import has_score_mod
from ...roles.load import setmaxnreg


def build(lw) -> RoleIR:
    """The ``softmax`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`).

    One copy for every Q stage: ``q`` (this warpgroup's Q stage) is a run-time
    argument, so the hot loop exists once in the instruction cache."""
    s = lw.s
    name = "softmax"
    roles = lw.plan.role_specs("softmax")
    n = lw.plan.tile.block_n

    carried = sm.carried_rowsum(lw)

    def tile(mask: bool) -> tuple:
        """One K/V tile of this Q stage; ``mask``: the copy for masked tiles."""
        out = [
            Wait("s_full", "q", lw.phase("s_full_ph"), lw.site(name, "s_full"), "j", fence_after=True),
            sm.rowmax_pass(lw, "TMEM_S(q)", mask),
            sm.rebase(lw, sm.guard(lw, mask), carried),
        ]
        if s.correction_warps:
            out += [Comment("blog ch.12: the correction warps rescale O with the published factor"),
                    StoreStats("q", "scale"), Arrive("stats_ready", "q", by="thread")]
        else:
            # PV(j-1) completed before S(j) was ready (see the MMA role): O is stable here
            out.append(If("j > 0", (sm.rescale_o(lw, "q", "reg", skip_unit=s.rescale_threshold is not None),)))
        if s.early_pv_cols:
            split = n - s.early_pv_cols
            out += sm.p_passes(lw, "q", [
                (split, n, "published first, blog ch.13", [Arrive("p_hi_ready", "q", by="thread", fence_before=True)]),
                (0, split, "the rest", [Arrive("p_lo_ready", "q", by="thread", fence_before=True)])], mask, carried,
                sm.guard(lw, mask))
        else:
            out += sm.p_passes(lw, "q", [(0, n, "all", [Arrive("p_ready", "q", by="thread", fence_before=True)])], mask,
                               carried, sm.guard(lw, mask))
        out += sm.top_p_round(lw, sm.guard(lw, mask))
        return tuple(out)

    item = [
        *sm.carried_decls(lw),
        Decl("float", "row_sum", "0.f"),
    ]
    if sm.top_p_rounding(lw):
        item.append(Decl("float", "row_adj", "0.f"))  # top-P BF16 roundings: O's normaliser is row_sum + row_adj, the LSE uses row_sum
    item += [Decl("float2", a, "make_float2(0.f, 0.f)") for a in carried]  # f32x2 partial rowsums across tiles
    if s.s_cache_cols:
        item.append(Decl("float", "s_cache", "{}", array=s.s_cache_cols))
    row_decl = Decl("const int", "row_in_seq", "q_tile_of(c, w, q) * BLOCK_M + (int)row", model="0")
    every_tile = has_score_mod(lw.plan.mods)  # a score_mod reads the row on every tile
    item += [
        *((row_decl,) if every_tile else ()),
        Loop("j", "0", "w.n_full", tile(False), "K/V tiles every row sees whole (the steady state)"),
        *(() if every_tile else (row_decl,)),
        Loop("j", "w.n_full", "w.n_kv", (Decl("const int", "col_lim", "col_limit(c, w, row_in_seq, j)", model="0"),
                                       *tile(True)),
             "masked tiles: the partial last K/V tile, the causal diagonal"),
    ]
    if carried:
        item += sm.rowsum_total(carried)
    item += sm.running_max(lw)
    if s.correction_warps:
        if lw.plan.persistent:
            item += [Comment("blog ch.14: the correction warps have read the previous work item's rowsum"),
                     Wait("rowsum_free", "q", lw.phase("rowsum_free_ph"), lw.site(name, "rowsum_free"), "w.n_kv")]
        item += [StoreStats("q", "rowsum", sm.top_p_rounding(lw)), StoreStats("q", "rowmax", sm.top_p_rounding(lw)), Arrive("rowsum_ready", "q", by="thread")]
    else:
        item += [Wait("pv_done", "q", lw.phase("pv_done_ph"), lw.site(name, "pv_done"), "w.n_kv", fence_after=True),
                 sm.epilogue(lw, "q", "reg")]
    body = [*setmaxnreg(lw, roles[0].regs),
            Comment("one thread per row of S/P/O; q is this warpgroup's Q stage (one copy of the code for all)"),
            PhaseDecl("s_full_ph", 1, 0, "scalar")]
    if not s.correction_warps:
        body.append(PhaseDecl("pv_done_ph", 1, 0, "scalar"))
    if s.correction_warps and lw.plan.persistent:
        body.append(PhaseDecl("rowsum_free_ph", 1, 1, "scalar"))
    body.append(WorkLoop(lw.plan.persistent, tuple(item)))
    return RoleIR(name, roles[0].warps, tuple(body), instances=tuple((r.q_stage, r.warps) for r in roles),
                  regs=roles[0].regs, blog="ch.1-2, 5, 8-13, minor 15-17")

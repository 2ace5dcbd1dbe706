"""Plan of the tcgen05 backend (sm_100a): warp roles, SMEM layout, TMEM map,
barrier protocol, register budgets, descriptors; and the budget checks.

Blog chapters: warp layouts ch.4/5/12; SMEM ch.1/6/12/14; TMEM ch.2/5/10;
barriers ch.4-7, 12-14. Budgets: docs/sm100-facts.md §1 (TMEM), §8
(setmaxnreg), §11 (SMEM, threads).
"""
from __future__ import annotations

from ... import errors
from .. import hardware
from ..barriers import BarrierTable, Party
from ..plan import Plan, RoleSpec, SmemRegion, TmemArray
from ..tile import TileShape
from .descriptors import descriptors, tma_boxes


def tile_of(s) -> TileShape:
    """The schedule's tile shape."""
    return TileShape(s.block_m, s.block_n, s.head_dim)


def warp_roles(s) -> tuple:
    """Warp-role map (blog ch.4/5/12 warp layouts).

    Not specialized: one ``cta`` role of 4 warps. Specialized: 4 softmax warps
    per Q stage, 4 correction warps if asked, one load warp, one MMA warp, and
    idle ``spare`` warps to fill the last warpgroup when register budgets are
    set (``setmaxnreg`` is per warpgroup).
    """
    if not s.warp_specialized:
        return (RoleSpec("cta", (0, 1, 2, 3)),)
    roles = []
    w = 0
    for q in range(s.q_stages):
        roles.append(RoleSpec("softmax", tuple(range(w, w + 4)), q, s.softmax_regs))
        w += 4
    if s.correction_warps:
        roles.append(RoleSpec("correction", tuple(range(w, w + s.correction_warps)), None, s.correction_regs))
        w += s.correction_warps
    roles.append(RoleSpec("load", (w,), None, s.other_regs))
    roles.append(RoleSpec("mma", (w + 1,), None, s.other_regs))
    w += 2
    if _uses_setmaxnreg(s) and w % 4:
        roles.append(RoleSpec("spare", tuple(range(w, w + (4 - w % 4))), None, s.other_regs))
    return tuple(roles)


def _uses_setmaxnreg(s) -> bool:
    return any(r is not None for r in (s.softmax_regs, s.correction_regs, s.other_regs))


def kv_slot_bytes(s, tile: TileShape) -> int:
    """Bytes of one K/V ring slot: K + V for paired tokens, one tile otherwise."""
    return tile.k_tile_bytes + tile.v_tile_bytes if s.kv_tokens == "paired" else max(tile.k_tile_bytes,
                                                                                        tile.v_tile_bytes)


def _stats_bytes(s, tile: TileShape) -> int:
    return s.q_stages * 3 * tile.block_m * 4 if s.correction_warps else 0


def smem_layout(s, num_barriers: int, limits=None) -> tuple:
    """(regions, dynamic SMEM bytes) of a schedule.

    Tiles are 1024-B aligned (the 128B swizzle pattern repeats every 1024 B,
    docs/sm100-facts.md §6); the total adds the realignment slack because the
    kernel aligns the dynamic SMEM base itself.
    """
    limits = limits or hardware.SM100
    tile = tile_of(s)
    regions = []
    off = 0

    def put(name, size, align, note=""):
        nonlocal off
        off = (off + align - 1) // align * align
        regions.append(SmemRegion(name, off, size, align, note))
        off += size

    for q in range(s.q_stages):
        put(f"q{q}", tile.q_tile_bytes, 1024, f"Q tile of Q stage {q} (K-major)")
    for k in range(s.kv_stages):
        if s.kv_tokens == "paired":
            note = "K tile then V tile" + (" (P overwrites K, ch.1)" if s.p_storage == "smem" else "")
        else:
            note = "one K or V tile (ring slot, ch.6)"
        put(f"kv{k}", kv_slot_bytes(s, tile), 1024, note)
    if s.correction_warps:
        put("stats", _stats_bytes(s, tile), 16,
            "per Q stage and row: rescale factor, final rowsum, final row max (FP32, ch.12)")
    put("tmem_slot", 16, 16, "TMEM base address written by tcgen05.alloc")
    put("barriers", 8 * num_barriers, 8, "mbarriers")
    return tuple(regions), off + limits.smem_align_slack


def _smem_bytes(s, limits) -> int:
    return smem_layout(s, sum(b.count for b in barrier_table(s)), limits)[1]


def tmem_map(s) -> tuple:
    """TMEM arrays: per Q stage S (FP32, block_n columns; packed BF16 P over
    half of it) and O (FP32, head_dim columns) (blog ch.2, 5, 10)."""
    tile = tile_of(s)
    arrays = [TmemArray("S", 0, tile.block_n, tile.block_n, "FP32 scores")]
    if s.p_storage == "tmem":
        half = "upper" if s.s_cache_cols else "lower"
        p_base = tile.block_n // 2 if s.s_cache_cols else 0
        arrays.append(TmemArray("P", p_base, tile.block_n, tile.block_n // 2,
                                f"packed BF16 P over the {half} half of S{{q}}"))
    arrays.append(TmemArray("O", s.q_stages * tile.block_n, tile.head_dim, tile.head_dim, "FP32 output accumulator"))
    return tuple(arrays)


def barrier_table(s) -> tuple:
    """The barrier protocol of a schedule (blog ch.4-7, 12-14)."""
    t = BarrierTable()
    if not s.warp_specialized:
        cta_tx = [Party("cta", "expect_tx", 1)]
        t.add("q_full", 1, cta_tx, ["cta"], arrive_by="thread 0 (arrive.expect_tx) + TMA", wait_by="all threads")
        t.add("kv_full", 1, cta_tx, ["cta"], arrive_by="thread 0 (arrive.expect_tx) + TMA", wait_by="all threads")
        t.add("s_full", 1, [Party("cta", "commit", 1)], ["cta"], arrive_by="tcgen05.commit after QK",
              wait_by="all threads")
        t.add("pv_done", 1, [Party("cta", "commit", 1)], ["cta"], arrive_by="tcgen05.commit after PV",
              wait_by="all threads")
        return t.freeze()
    qn = s.q_stages
    load_tx = [Party("load", "expect_tx", 1)]
    mma_commit = [Party("mma", "commit", 1)]
    t.add("q_full", 1, load_tx, ["mma"], arrive_by="load warp (arrive.expect_tx) + TMA", wait_by="mma warp")
    if s.persistent:
        t.add("q_free", 1, mma_commit, ["load"], starts_free=True,
              arrive_by="tcgen05.commit after the last QK of a work item", wait_by="load warp", note="ch.14")
    t.add("kv_full", s.kv_stages, load_tx, ["mma"], arrive_by="load warp (arrive.expect_tx) + TMA",
          wait_by="mma warp")
    t.add("kv_empty", s.kv_stages, mma_commit, ["load"], starts_free=True,
          arrive_by="tcgen05.commit after the token's last consumer", wait_by="load warp")
    t.add("s_full", qn, mma_commit, ["softmax"], arrive_by="tcgen05.commit after QqK", wait_by="softmax warps of q")
    # the softmax and correction warpgroups arrive from every thread (128 arrivals): each thread's own
    # tcgen05.wait::st + fence::before_thread_sync orders its writes before its arrival, with no __syncwarp
    # for a lane-0 arrival (one NOP per arrival in the hot loops, measured)
    softmax = Party("softmax", "thread", 128, same_q_stage=True)
    o_safe = [Party("correction", "thread", 128)] if s.correction_warps else []
    with_o = " + correction warps (O safe)" if o_safe else ""
    if s.early_pv_cols:
        t.add("p_hi_ready", qn, [softmax, *o_safe], ["mma"], arrive_by="softmax warps (high P columns)" + with_o,
              wait_by="mma warp", note="ch.13")
        t.add("p_lo_ready", qn, [softmax], ["mma"], arrive_by="softmax warps (low P columns)", wait_by="mma warp",
              note="ch.13")
    else:
        t.add("p_ready", qn, [softmax, *o_safe], ["mma"], arrive_by="softmax warps (P ready)" + with_o,
              wait_by="mma warp")
    t.add("pv_done", qn, mma_commit, ["correction" if s.correction_warps else "softmax"],
          arrive_by="tcgen05.commit after PqV",
          wait_by="correction warps" if s.correction_warps else "softmax warps of q")
    if s.correction_warps:
        t.add("stats_ready", qn, [softmax], ["correction"], arrive_by="softmax warps of q (rescale factors)",
              wait_by="correction warps", note="ch.12")
        # its own barrier: a fast softmax warp could otherwise arrive for the rowsum before a
        # slow one arrived for the last factor, completing that phase early
        t.add("rowsum_ready", qn, [softmax], ["correction"], arrive_by="softmax warps of q (final rowsums)",
              wait_by="correction warps (epilogue)", note="ch.12")
        if s.persistent:
            # the next work item's rowsum overwrites the published one only after the correction warps'
            # epilogue read it: with one K/V tile per work item nothing else orders the two (found by the
            # protocol verifier)
            t.add("rowsum_free", qn, [Party("correction", "thread", 128)], ["softmax"], starts_free=True,
                  arrive_by="correction warps after the epilogue read the rowsum",
                  wait_by="softmax warps of q (before publishing the next rowsum)", note="ch.14")
    return t.freeze()


def make_plan(s, issue=None) -> Plan:
    """Plan a (knob-validated) schedule and check its hardware budgets.

    Args:
        s: a Schedule whose knobs passed ``validate_schedule``.
        issue: its checked IssueOrder (warp-specialized schedules), else None.

    Raises:
        ResourceError: TMEM columns, dynamic SMEM, threads or the register pool
            exceeded (checked in that order; the message names both numbers).
        ScheduleError: a warpgroup mixes roles with different register budgets.
    """
    limits = hardware.SM100
    tile = tile_of(s)
    barriers = barrier_table(s)
    num_barriers = sum(b.count for b in barriers)
    smem, smem_bytes = smem_layout(s, num_barriers, limits)
    roles = warp_roles(s)
    threads = 32 * sum(len(r.warps) for r in roles)
    tmem = tmem_map(s)
    plan = Plan(
        name=s.name,
        blog_stage=s.blog_stage,
        summary=tuple(s.summary().splitlines()),
        backend="tcgen05",
        limits=limits,
        tile=tile,
        q_stages=s.q_stages,
        kv_tokens=s.kv_tokens,
        kv_stages=s.kv_stages,
        kv_slot_bytes=kv_slot_bytes(s, tile),
        persistent=s.persistent,
        # serpentine causal rounds (b200c/codegen/work.py) left off: the remap in decode_work moved ptxas's
        # layout of the MMA warp's K/V loop (stage 14: 265 -> 278 static instructions) and no B200 is here
        # to measure what it gains; the sm_90a plan takes them
        serpentine=False,
        smem=smem,
        smem_bytes=smem_bytes,
        tmem=tmem,
        tmem_alloc_cols=hardware.tmem_alloc_columns(max(t.col(s.q_stages - 1) + t.ncols for t in tmem)),
        barriers=barriers,
        roles=roles,
        threads=threads,
        tma=tma_boxes(tile, s.swizzle, s.tma_l2_promotion),
        descriptors=descriptors(tile, s.swizzle, s.p_storage == "smem"),
        issue=issue,
    )
    check_budgets(s, plan)
    return plan


def check_budgets(s, plan: Plan) -> None:
    """TMEM, SMEM, threads, register pool of a plan (in that order).

    Raises:
        ResourceError, ScheduleError: see :func:`make_plan`.
    """
    lim = plan.limits
    tile = plan.tile
    need = plan.tmem_columns_used
    if need > lim.tmem_columns:
        per_stage = tile.block_n + tile.head_dim
        raise errors.ResourceError(
            f"{s.q_stages} Q stages at head dim {tile.head_dim} need {need} of {lim.tmem_columns} TMEM columns "
            f"({tile.block_n} for S/P + {tile.head_dim} for O per Q stage); use q_stages <= "
            f"{lim.tmem_columns // per_stage}"
        )
    if plan.smem_bytes > lim.smem_bytes:
        parts = ", ".join(f"{b.name} {b.size}" for b in plan.smem if b.size)
        fit = max((k for k in range(1, s.kv_stages) if _smem_bytes(s.replace(kv_stages=k), lim) <= lim.smem_bytes),
                  default=None)
        hint = f"kv_stages <= {fit} fits" if fit else "lower q_stages"
        raise errors.ResourceError(
            f"dynamic SMEM needs {plan.smem_bytes} of {lim.smem_bytes} bytes (227 KiB) including barriers and "
            f"1024-B alignment of swizzled tiles ({parts}); {hint}"
        )
    if plan.threads > lim.max_threads:
        raise errors.ResourceError(f"the warp roles need {plan.threads} of {lim.max_threads} threads per CTA")
    if not _uses_setmaxnreg(s):
        return
    groups = {}
    for r in plan.roles:
        for w in r.warps:
            groups.setdefault(w // 4, []).append(r)
    total = 0
    for g in sorted(groups):
        budgets = {r.regs for r in groups[g]}
        if len(budgets) != 1:
            names = tuple(sorted({r.name for r in groups[g]}))
            raise errors.ScheduleError(f"warpgroup {g} mixes roles {names} with different register budgets")
        total += 128 * budgets.pop()
    pool = lim.setmaxnreg_pool(plan.threads)
    if total > pool:
        raise errors.ResourceError(
            f"register budgets need {total} of {pool} registers per CTA "
            f"(sum over warpgroups of 128 x setmaxnreg); lower softmax_regs/correction_regs/other_regs"
        )

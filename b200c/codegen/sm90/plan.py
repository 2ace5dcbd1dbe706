"""Plan of the Hopper backend (sm_90a): warp roles, SMEM layout, the mbarrier
protocol, the ping-pong named barriers, register budgets, wgmma descriptors,
TMA boxes; and the budget checks.

FlashAttention-3 (Shah et al. 2024) layout: warpgroup 0 is the producer (warp
0 issues every TMA load, warps 1-3 only lower their register budget);
warpgroups 1..q_stages are consumers, each owning 64 Q rows (one wgmma M):
S = Q K^T and O += P V by wgmma, the online softmax in registers (§3). Without
warp specialization one warpgroup does everything (the progression's baseline).
"""
from __future__ import annotations

from ... import errors
from .. import hardware
from ..barriers import BarrierTable, NamedBarrier, Party
from ..plan import Plan, RoleSpec, SmemRegion
from ..tile import TileShape
from .descriptors import descriptors, tma_boxes

PINGPONG_FIRST_ID = 1  # named barrier ids of the ping-pong turns (0 is __syncthreads)


def tile_of(s) -> TileShape:
    """The schedule's tile shape (block_m = 64 rows per consumer warpgroup)."""
    return TileShape(s.block_m, s.block_n, s.head_dim)


def warp_roles(s) -> tuple:
    """Warp-role map: ``cta`` (one warpgroup) without warp specialization; else
    ``load`` (warp 0) + ``spare`` (warps 1-3) in the producer warpgroup and one
    ``consumer`` warpgroup per Q stage."""
    if not s.warp_specialized:
        return (RoleSpec("cta", (0, 1, 2, 3)),)
    roles = [RoleSpec("load", (0,), None, s.other_regs), RoleSpec("spare", (1, 2, 3), None, s.other_regs)]
    for q in range(s.q_stages):
        roles.append(RoleSpec("consumer", tuple(range(4 + 4 * q, 8 + 4 * q)), q, s.softmax_regs))
    return tuple(roles)


def kv_slot_bytes(s, tile: TileShape) -> int:
    """Bytes of one K/V ring slot: K + V for paired tokens, one tile otherwise."""
    return tile.k_tile_bytes + tile.v_tile_bytes if s.kv_tokens == "paired" else tile.k_tile_bytes


def barrier_table(s) -> tuple:
    """The mbarrier protocol (FA3 §3: producer/consumer pipeline)."""
    t = BarrierTable()
    if not s.warp_specialized:
        tx = [Party("cta", "expect_tx", 1)]
        t.add("q_full", 1, tx, ["cta"], arrive_by="thread 0 (arrive.expect_tx) + TMA", wait_by="all threads")
        t.add("kv_full", 1, tx, ["cta"], arrive_by="thread 0 (arrive.expect_tx) + TMA", wait_by="all threads")
        return t.freeze()
    qn = s.q_stages
    load_tx = [Party("load", "expect_tx", 1)]
    t.add("q_full", qn, load_tx, ["consumer"], arrive_by="load warp (arrive.expect_tx) + TMA of Q stage q",
          wait_by="consumer warpgroup q")
    if s.persistent:
        t.add("q_free", qn, [Party("consumer", "warp", 4, same_q_stage=True)], ["load"], starts_free=True,
              arrive_by="each warp of consumer q after its last QK of a work item", wait_by="load warp",
              note="persistent: Q SMEM reused by the next work item")
    t.add("kv_full", s.kv_stages, load_tx, ["consumer"], ring=True,
          arrive_by="load warp (arrive.expect_tx) + TMA", wait_by="every consumer warpgroup")
    t.add("kv_empty", s.kv_stages, [Party("consumer", "warp", 4 * qn, per_instance=True)], ["load"],
          starts_free=True, ring=True,
          arrive_by="each warp of every consumer once its wgmma reading the slot completed", wait_by="load warp")
    return t.freeze()


def named_barriers(s) -> tuple:
    """Named barriers: the ping-pong turns (FA3 §3.1) or the baseline's slot release."""
    if not s.warp_specialized:
        return (NamedBarrier("slot_free", 1, 1, 128, ("cta",),
                             note="every warp's PV completed before thread 0 reloads the K/V slot"),)
    if s.pingpong:
        return (NamedBarrier("turn", PINGPONG_FIRST_ID, 2, 256, ("consumer",), ("consumer",),
                             note="FA3 §3.1: consumer q waits on turn[q], then passes the turn with bar.arrive "
                                  "on turn[1-q]"),)
    return ()


def smem_layout(s, num_barriers: int, limits=None) -> tuple:
    """(regions, dynamic SMEM bytes): Q tiles, the K/V ring, mbarriers; tiles
    1024-B aligned (128B swizzle atoms), plus the realignment slack."""
    limits = limits or hardware.SM90
    tile = tile_of(s)
    regions = []
    off = 0

    def put(name, size, align, note=""):
        nonlocal off
        off = (off + align - 1) // align * align
        regions.append(SmemRegion(name, off, size, align, note))
        off += size

    for q in range(s.q_stages):
        put(f"q{q}", tile.q_tile_bytes, 1024, f"Q rows of consumer {q} ({tile.block_m} x {tile.head_dim}, K-major)")
    for k in range(s.kv_stages):
        note = "K tile then V tile" if s.kv_tokens == "paired" else "one K or V tile (ring slot)"
        put(f"kv{k}", kv_slot_bytes(s, tile), 1024, note)
    put("barriers", 8 * num_barriers, 8, "mbarriers")
    return tuple(regions), off + limits.smem_align_slack


def make_plan(s, issue=None) -> Plan:
    """Plan a (knob-validated) schedule for sm_90a and check its budgets.

    Raises:
        ResourceError: dynamic SMEM, threads or the register pool exceeded.
        ScheduleError: a warpgroup mixes roles with different register budgets.
    """
    limits = hardware.SM90
    tile = tile_of(s)
    barriers = barrier_table(s)
    smem, smem_bytes = smem_layout(s, sum(b.count for b in barriers), limits)
    roles = warp_roles(s)
    plan = Plan(
        name=s.name,
        blog_stage=s.blog_stage,
        summary=tuple(s.summary().splitlines()),
        backend="sm90",
        limits=limits,
        tile=tile,
        q_stages=s.q_stages,
        kv_tokens=s.kv_tokens,
        kv_stages=s.kv_stages,
        kv_slot_bytes=kv_slot_bytes(s, tile),
        persistent=s.persistent,
        # causal work items differ in length; the persistent grid's static rounds alternate direction
        # (b200c/codegen/work.py: the most loaded CTA 1.117x -> 1.034x the mean at 8x16x4096)
        serpentine=s.persistent,
        smem=smem,
        smem_bytes=smem_bytes,
        tmem=(),
        tmem_alloc_cols=0,
        barriers=barriers,
        roles=roles,
        threads=32 * sum(len(r.warps) for r in roles),
        tma=tma_boxes(tile, tile.block_m, s.tma_l2_promotion),
        descriptors=descriptors(tile),
        issue=issue,
        named_barriers=named_barriers(s),
        tma_kv=tma_boxes(tile, tile.block_n, s.tma_l2_promotion),
    )
    check_budgets(s, plan)
    return plan


def check_budgets(s, plan: Plan) -> None:
    """SMEM, threads, register pool of a plan (in that order).

    Raises:
        ResourceError, ScheduleError: see :func:`make_plan`.
    """
    lim = plan.limits
    if plan.smem_bytes > lim.smem_bytes:
        parts = ", ".join(f"{b.name} {b.size}" for b in plan.smem if b.size)
        fit = max((k for k in range(1, s.kv_stages)
                   if smem_layout(s.replace(kv_stages=k), sum(b.count for b in barrier_table(s.replace(kv_stages=k))),
                                  lim)[1] <= lim.smem_bytes), default=None)
        hint = f"kv_stages <= {fit} fits" if fit else "lower block_n or q_stages"
        raise errors.ResourceError(
            f"dynamic SMEM needs {plan.smem_bytes} of {lim.smem_bytes} bytes (227 KiB) including barriers and "
            f"1024-B alignment of swizzled tiles ({parts}); {hint}"
        )
    if plan.threads > lim.max_threads:
        raise errors.ResourceError(f"the warp roles need {plan.threads} of {lim.max_threads} threads per CTA")
    if s.softmax_regs is None and s.other_regs is None:
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
            f"(sum over warpgroups of 128 x setmaxnreg); lower softmax_regs/other_regs"
        )

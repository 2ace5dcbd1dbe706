"""Hardware budgets a schedule consumes: warps, registers, SMEM (layout and
barrier table), TMEM.

Pure arithmetic on a :class:`Schedule`; the planner (b200c.codegen.plan) uses
these same functions, so what validation checks is what the kernel allocates.

Sources: sm100-facts.md §1 (TMEM 512 columns, power-of-2 allocation),
§8 (setmaxnreg 24..256, multiple of 8, 65536-register pool), §11 (232448 B
dynamic SMEM, 1024 threads), §6 (1024-B alignment of SW128 tiles).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .schedule import Schedule

TMEM_COLUMNS = 512
SMEM_LIMIT_BYTES = 232448  # 227 KiB opt-in dynamic SMEM per CTA on sm_100a
MAX_THREADS = 1024
REGISTER_POOL = 65536
TILE_BYTES = 128 * 128 * 2  # one 128x128 BF16 tile
SMEM_ALIGN_SLACK = 1024  # the kernel realigns the dynamic SMEM base to 1024 B


@dataclass(frozen=True)
class RoleWarps:
    """Warps of one warp role.

    Attributes:
        name: role name (``cta``, ``softmax``, ``correction``, ``load``,
            ``mma``, ``spare``).
        warps: warp indices inside the CTA.
        q_stage: Q stage served (softmax warpgroups), else ``None``.
        regs: ``setmaxnreg`` budget, or ``None``.
    """

    name: str
    warps: tuple
    q_stage: Optional[int] = None
    regs: Optional[int] = None


def warp_roles(s: Schedule) -> tuple:
    """Warp-role map of a schedule (blog ch.4/5/12 warp layouts).

    Not specialized: one ``cta`` role of 4 warps. Specialized: 4 softmax warps
    per Q stage, 4 correction warps if asked, one load warp, one MMA warp, and
    idle ``spare`` warps to fill the last warpgroup when register budgets are
    set (``setmaxnreg`` is per warpgroup).
    """
    if not s.warp_specialized:
        return (RoleWarps("cta", (0, 1, 2, 3)),)
    roles = []
    w = 0
    for q in range(s.q_stages):
        roles.append(RoleWarps("softmax", tuple(range(w, w + 4)), q, s.softmax_regs))
        w += 4
    if s.correction_warps:
        roles.append(RoleWarps("correction", tuple(range(w, w + s.correction_warps)), None, s.correction_regs))
        w += s.correction_warps
    roles.append(RoleWarps("load", (w,), None, s.other_regs))
    roles.append(RoleWarps("mma", (w + 1,), None, s.other_regs))
    w += 2
    if uses_setmaxnreg(s) and w % 4:
        roles.append(RoleWarps("spare", tuple(range(w, w + (4 - w % 4))), None, s.other_regs))
    return tuple(roles)


def uses_setmaxnreg(s: Schedule) -> bool:
    """True when any register budget is set."""
    return any(r is not None for r in (s.softmax_regs, s.correction_regs, s.other_regs))


def num_warps(s: Schedule) -> int:
    """Warps per CTA (without the emulator warp of the emulation target)."""
    return sum(len(r.warps) for r in warp_roles(s))


def threads_per_cta(s: Schedule) -> int:
    """Threads per CTA, 32 per warp."""
    return 32 * num_warps(s)


def entry_registers(s: Schedule) -> int:
    """Registers per thread at kernel entry under ``__launch_bounds__(T, 1)``:
    the pool divided by the thread count, rounded down to a multiple of 8,
    at most 255 (ptxas, sm100-facts.md §11)."""
    return min(255, (REGISTER_POOL // threads_per_cta(s)) // 8 * 8)


def warpgroup_budgets(s: Schedule) -> list:
    """(warpgroup index, role names, register budget) for every warpgroup."""
    groups = {}
    for r in warp_roles(s):
        for w in r.warps:
            groups.setdefault(w // 4, []).append(r)
    out = []
    for g in sorted(groups):
        roles = groups[g]
        budgets = {r.regs for r in roles}
        out.append((g, tuple(sorted({r.name for r in roles})), budgets))
    return out


def tmem_columns_used(s: Schedule) -> int:
    """TMEM columns: per Q stage 128 for S (P overlays it) + head_dim for O."""
    return s.q_stages * (s.block_n + s.head_dim)


def tmem_columns_alloc(s: Schedule) -> int:
    """Columns passed to ``tcgen05.alloc``: power of 2 in [32, 512]."""
    need = tmem_columns_used(s)
    n = 32
    while n < need:
        n *= 2
    return n


def kv_slot_bytes(s: Schedule) -> int:
    """Bytes of one K/V ring slot: K+V for paired tokens, one tile otherwise."""
    return 2 * TILE_BYTES if s.kv_tokens == "paired" else TILE_BYTES


def stats_bytes(s: Schedule) -> int:
    """SMEM for the softmax -> correction hand-off: per Q stage, 128 rescale
    factors and 128 final rowsums (FP32)."""
    return s.q_stages * 2 * s.block_m * 4 if s.correction_warps else 0


@dataclass(frozen=True)
class SmemBuffer:
    """One SMEM buffer: byte offset from the 1024-aligned base, size, alignment."""

    name: str
    offset: int
    size: int
    align: int
    note: str = ""


@dataclass(frozen=True)
class BarrierSpec:
    """One mbarrier family: ``count`` instances starting at index ``first``,
    each completing a phase after ``arrivals`` arrivals."""

    name: str
    first: int
    count: int
    arrivals: int
    arrive_by: str
    wait_by: str
    note: str = ""


def smem_layout(s: Schedule) -> tuple:
    """(buffers, total dynamic SMEM bytes) for a schedule.

    Tiles are 1024-B aligned (SW128 pattern repeats every 1024 B, facts §6);
    the total adds 1024 B of slack because the kernel realigns the dynamic SMEM
    base itself.
    """
    bufs = []
    off = 0

    def put(name, size, align, note=""):
        nonlocal off
        off = (off + align - 1) // align * align
        bufs.append(SmemBuffer(name, off, size, align, note))
        off += size

    for q in range(s.q_stages):
        put(f"q{q}", TILE_BYTES, 1024, f"Q tile of Q stage {q} (K-major)")
    for k in range(s.kv_stages):
        if s.kv_tokens == "paired":
            note = "K tile then V tile" + (" (P overwrites K, ch.1)" if s.p_storage == "smem" else "")
        else:
            note = "one K or V tile (ring slot, ch.6)"
        put(f"kv{k}", kv_slot_bytes(s), 1024, note)
    if s.correction_warps:
        put("stats", stats_bytes(s), 16, "per Q stage: 128 rescale factors + 128 rowsums (FP32, ch.12)")
    put("tmem_slot", 16, 16, "TMEM base address written by tcgen05.alloc")
    put("barriers", 8 * sum(b.count for b in barrier_table(s)), 8, "mbarriers")
    return tuple(bufs), off + SMEM_ALIGN_SLACK


def barrier_table(s: Schedule) -> tuple:
    """The mbarrier families of a schedule (BarrierSpec, in index order)."""
    out = []
    idx = 0

    def add(name, count, arrivals, by, wait, note=""):
        nonlocal idx
        out.append(BarrierSpec(name, idx, count, arrivals, by, wait, note))
        idx += count

    if not s.warp_specialized:
        add("q_full", 1, 1, "thread 0 (arrive.expect_tx) + TMA", "all threads")
        add("kv_full", 1, 1, "thread 0 (arrive.expect_tx) + TMA", "all threads")
        add("s_full", 1, 1, "tcgen05.commit after QK", "all threads")
        add("pv_done", 1, 1, "tcgen05.commit after PV", "all threads")
        return tuple(out)
    qn = s.q_stages
    add("q_full", 1, 1, "load warp (arrive.expect_tx) + TMA", "mma warp")
    if s.persistent:
        add("q_free", 1, 1, "tcgen05.commit after the last QK of a work item", "load warp", "ch.14")
    add("kv_full", s.kv_stages, 1, "load warp (arrive.expect_tx) + TMA", "mma warp")
    add("kv_empty", s.kv_stages, 1, "tcgen05.commit after the token's last consumer", "load warp")
    add("s_full", qn, 1, "tcgen05.commit after QqK", "softmax warps of q")
    sm_arrivals = 4
    o_safe = 4 if s.correction_warps else 0
    if s.early_pv_cols:
        add("p_hi_ready", qn, sm_arrivals + o_safe,
            "softmax warps (high P columns)" + (" + correction warps (O safe)" if o_safe else ""),
            "mma warp", "ch.13")
        add("p_lo_ready", qn, sm_arrivals, "softmax warps (low P columns)", "mma warp", "ch.13")
    else:
        add("p_ready", qn, sm_arrivals + o_safe,
            "softmax warps (P ready)" + (" + correction warps (O safe)" if o_safe else ""), "mma warp")
    add("pv_done", qn, 1, "tcgen05.commit after PqV",
        "correction warps" if s.correction_warps else "softmax warps of q")
    if s.correction_warps:
        add("stats_ready", qn, 4, "softmax warps of q (rescale factors)", "correction warps", "ch.12")
        # its own barrier: a fast softmax warp could otherwise arrive for the rowsum before a
        # slow one arrived for the last factor, completing that phase early
        add("rowsum_ready", qn, 4, "softmax warps of q (final rowsums)", "correction warps (epilogue)", "ch.12")
    return tuple(out)

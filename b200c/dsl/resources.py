"""Hardware budgets a schedule consumes: warps, registers, SMEM, TMEM.

Pure arithmetic on a :class:`Schedule`; the planner lays buffers out with the
same numbers, so what validation checks is what the kernel allocates.

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

"""Knob rules of the tcgen05 backend (sm_100a and its emulation): what this
backend cannot generate, refused before planning. One function per rule, each
raising a ScheduleError that names the knob, the limit and what to change."""
from __future__ import annotations

from ...dsl.validate import HEAD_DIMS
from ...errors import ScheduleError

_WHERE = "target sm100a (tcgen05)"


def tile_shape(s) -> None:
    """128 x 128 tiles: one tcgen05.mma M of 128 TMEM lanes, the blog's tiles."""
    for field in ("block_m", "block_n"):
        v = getattr(s, field)
        if v != 128:
            raise ScheduleError(
                f"{field}={v}: {_WHERE} generates only 128 (the blog's 128x128 tiles); set {field}=128, or "
                f"target='sm90a' for block_m=64 / other block_n"
            )


def p_storage(s) -> None:
    """P goes to SMEM or TMEM: tcgen05.mma reads A from SMEM or TMEM only; P in
    SMEM reuses the K tile's buffer, which must hold it."""
    if s.p_storage == "registers":
        raise ScheduleError(
            f"p_storage='registers' is a Hopper (sm_90a) knob: tcgen05.mma reads its A operand from SMEM or "
            f"TMEM only (PTX ISA 9.7.16.10); on {_WHERE} use p_storage='tmem' (blog ch.2)"
        )
    if s.p_storage == "smem" and s.head_dim in HEAD_DIMS and s.head_dim < s.block_n:
        # found by the emulated real-inputs sweep: at head_dim=64 P ran over into the V tile
        raise ScheduleError(
            f"p_storage='smem' with head_dim={s.head_dim}: P ({s.block_m} x {s.block_n} BF16) is written over the "
            f"K tile ({s.block_n} x {s.head_dim}), which holds it only for head_dim >= block_n ({s.block_n}); "
            f"use p_storage='tmem' (blog ch.2)"
        )


def pingpong(s) -> None:
    """One MMA warp issues every MMA, so warpgroups have no GEMM turns to take."""
    if s.pingpong:
        raise ScheduleError(
            f"pingpong=True is a Hopper (sm_90a) knob: on {_WHERE} one MMA warp issues every MMA and the issue "
            f"order (issue_order) interleaves the Q stages; set pingpong=False"
        )


RULES = (tile_shape, p_storage, pingpong)

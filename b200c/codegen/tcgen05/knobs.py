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


def correction_pv_order(s) -> None:
    """With correction warps, every PV waits for the correction warps' rescale of its O ("O safe"),
    which they do one PV at a time, K/V tile after K/V tile (within a tile in the order the MMA warp
    issues the PVs), each after the softmax of that tile, i.e. after its QK: a PV may not wait for a
    rescale queued behind one whose QK the MMA warp issues later."""
    if not (s.warp_specialized and s.correction_warps and s.issue_order is not None) or not _valid_otherwise(s):
        return
    from ...dsl.issue_order import CHECKED_TILE_COUNTS, parse_issue_order
    from .roles.correction import pv_stage_order

    try:
        order = parse_issue_order(s.issue_order, s.q_stages, s.kv_tokens, 8)
    except Exception:  # noqa: BLE001 - the real parse (with the ring size) reports it
        return
    stages = pv_stage_order(order, s.q_stages)
    for n in CHECKED_TILE_COUNTS:
        seq = order.unrolled(n)
        qk_at = {(st.q, j): p for p, (st, j) in enumerate(seq) if st.kind == "QK"}
        tasks = [(q, j) for j in range(n) for q in stages]  # the correction warps' rescales, in order
        for p, (st, j) in enumerate(seq):
            if st.kind != "PV":
                continue
            for q, jj in tasks[:tasks.index((st.q, j)) + 1]:
                if qk_at[(q, jj)] > p:
                    # found by the schedule-space sweep: the protocol verifier saw the MMA and correction
                    # warps deadlock
                    raise ScheduleError(
                        f"issue_order={s.issue_order!r} with correction_warps={s.correction_warps}: the "
                        f"correction warps rescale O for one PV at a time, K/V tile after K/V tile, and "
                        f"{st.at(j)} waits for their rescale of O{q} after the softmax of S{q}({jj}), but "
                        f"this order issues Q{q}K({jj}) only after {st.at(j)} (deadlock); issue every Q "
                        f"stage's PV of tile i after the QKs of tile i and before any PV of tile i+1 (e.g. "
                        f"'P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)'), or set correction_warps=0"
                    )


# Register budgets. ptxas allocates registers for the whole kernel; a role whose code needs more than
# its warpgroup's budget spills to local memory. The limits below are the smallest budgets measured to
# hold the blog's roles without spills with nvcc 13.0 (b200c check; scripts/schedule_sweep.py
# --compile): at each one, the next step down or the knob named spilled. Found by the schedule-space
# sweep (issue 19), which compiled schedules these rules now refuse.
MIN_SOFTMAX_REGS = 192  # stage 18 spilled 56 B at 176, stage 15 56 B at 184
MIN_CORRECTION_REGS = 80  # stage 18 (o_load_cols=32) spilled 20 B at 72
MIN_OTHER_REGS = 48  # stage 18's MMA warp spilled 52 B at 40


def _entry_registers(s) -> int:
    from .. import hardware
    from .plan import warp_roles

    return hardware.SM100.entry_registers(32 * sum(len(r.warps) for r in warp_roles(s)))


def _valid_otherwise(s) -> bool:
    """Whether the target-neutral rules (b200c/dsl/validate.py) pass: rules relating several knobs
    run only then, so an out-of-range knob is reported by its own rule first."""
    from ...dsl import validate

    try:
        for rule in validate.RULES[2:]:
            rule(s)
    except ScheduleError:
        return False
    return True


def _budgets(s) -> bool:
    return any(r is not None for r in (s.softmax_regs, s.correction_regs, s.other_regs))


def default_registers(s) -> None:
    """Without setmaxnreg budgets every warp gets ptxas's share of the register file
    (:meth:`b200c.codegen.hardware.Limits.entry_registers`): 255 for one Q stage, 168 for two
    (384 threads), 128 with correction warps (448 threads): only the softmax of blog stages 5-11
    fits in 168, and nothing beyond stage 11 in 128."""
    if not s.warp_specialized or _budgets(s) or not _valid_otherwise(s):
        return
    regs = _entry_registers(s)
    fix = "set softmax_regs, other_regs (and correction_regs with correction warps), e.g. "
    fix += "softmax_regs=192, correction_regs=80, other_regs=48 (stage 12)" if s.correction_warps else \
        "softmax_regs=216, other_regs=72"
    where = f"without register budgets ptxas gives every thread {regs} registers (q_stages={s.q_stages}" + (
        f", correction_warps={s.correction_warps}" if s.correction_warps else "") + ")"
    if regs >= 255:
        return
    if s.correction_warps:
        raise ScheduleError(
            f"correction_warps={s.correction_warps} on {_WHERE}: {where}, and the softmax warps spill "
            f"(measured 44-160 B from stages 5-11); {fix}"
        )
    for bad, what in (
        (s.s_load_cols > 8, f"s_load_cols={s.s_load_cols} (measured 12-228 B of spills at stages 5-11)"),
        (s.deferred_s_wait, "deferred_s_wait=True, which keeps every S column of the tile in flight "
                            "(measured 12-228 B)"),
        (s.persistent,
         "persistent=True, whose work loop keeps the work item live across the softmax's K/V loop (measured "
         "20 B at stages 5-7 with exp2='expf', 20-200 B at stages 8-11)"),
    ):
        if bad:
            raise ScheduleError(f"{what}: on {_WHERE} {where}, too few for the softmax warps; {fix}")


def softmax_o_registers(s) -> None:
    """Without correction warps the softmax warps also rescale O: the cached S columns and the O
    rescale's TMEM loads (o_load_cols, two in flight) share their budget, about
    ``s_cache_cols + 4 * o_load_cols + 40`` registers, 8 more each with early PV, more than 4
    software-exp2 columns of 16, or the split rowsum's second partial sum (measured: 172-564 B of
    spills above it at 168 registers, stages 10-11 and the persistent variant; 440 B at 216 with 96
    cached columns and o_load_cols=32; 48-160 B at 168 for stages 10-11 with early PV or
    sw_exp2_per16=8, 36 B for stage 11 at head dim 64 with the split rowsum)."""
    if not s.warp_specialized or s.correction_warps or not _valid_otherwise(s):
        return
    regs = s.softmax_regs if s.softmax_regs is not None else _entry_registers(s)
    extra = 8 * bool(s.early_pv_cols) + 8 * (s.sw_exp2_per16 > 4) + 8 * s.split_rowsum
    need = s.s_cache_cols + 4 * s.o_load_cols + 40 + extra
    if need > regs:
        room = regs - 40 - extra - 4 * s.o_load_cols
        fix = [f"s_cache_cols <= {room // 16 * 16}" if room >= 16 else "s_cache_cols=0"]
        if s.o_load_cols > 8:
            fix.append("o_load_cols=8")
        if s.early_pv_cols:
            fix.append("early_pv_cols=0")
        if s.sw_exp2_per16 > 4:
            fix.append("sw_exp2_per16 <= 4")
        if s.split_rowsum:
            fix.append("split_rowsum=False")
        budget = f"softmax_regs={s.softmax_regs}" if s.softmax_regs is not None else \
            f"ptxas's {regs} registers per thread without register budgets"
        raise ScheduleError(
            f"s_cache_cols={s.s_cache_cols} with o_load_cols={s.o_load_cols}"
            + (f", early_pv_cols={s.early_pv_cols}" if s.early_pv_cols else "")
            + (f", sw_exp2_per16={s.sw_exp2_per16}" if s.sw_exp2_per16 > 4 else "")
            + (", split_rowsum=True" if s.split_rowsum else "")
            + f" and correction_warps=0 on {_WHERE}: "
            f"the softmax warps hold the cached S columns and rescale O themselves, about {need} registers per "
            f"thread, more than {budget}; set {' or '.join(fix)}, or correction_warps=4 (blog ch.12)"
        )


def softmax_s_registers(s) -> None:
    """At the blog's 192-register softmax budget, S loads with 32 or more registers in flight
    (``s_load_cols=32``, or ``deferred_s_wait`` waiting once for the whole tile) leave the
    non-persistent softmax (stages 12-13, and 15 without its persistent loop) one register short
    unless the rowsum is split (measured: 8 B of spills in each of those 5 cases, none in the 8
    with ``split_rowsum=True`` or a persistent loop), and since issue 47's softmax (P's scale carried
    across tiles) the split rowsum is enough only beside ``phase_tracking='bitmask'`` (stage 16 without
    its persistent loop: 8 B at every ``sw_exp2_per16`` with 'array', none with 'bitmask')."""
    if not (s.warp_specialized and s.correction_warps and s.softmax_regs is not None) or not _valid_otherwise(s):
        return
    wide = s.s_load_cols >= 32 or s.deferred_s_wait
    if s.softmax_regs <= 192 and wide and not s.persistent and (not s.split_rowsum or s.phase_tracking == "array"):
        what = "deferred_s_wait=True" if s.deferred_s_wait else f"s_load_cols={s.s_load_cols}"
        raise ScheduleError(
            f"{what} with softmax_regs={s.softmax_regs}, split_rowsum={s.split_rowsum}, "
            f"phase_tracking={s.phase_tracking!r} and persistent=False: on {_WHERE} the softmax warps spill with 32 "
            f"or more S registers in flight at this budget; set split_rowsum=True (minor 16) with "
            f"phase_tracking='bitmask' (minor 17), persistent=True (ch.14), or s_load_cols <= 16 with "
            f"deferred_s_wait=False"
        )


def softmax_cache_registers(s) -> None:
    """More than 4 of every 16 P columns through the software exp2 (its polynomial constants) leave the
    192-register softmax no room for the K/V ring's phase-bit array in the warps' shared code (measured with
    nvcc 13.0: every S column cached, 8 B with phase_tracking='array', none with 'bitmask' or
    sw_exp2_per16=4; found again by the schedule-space sweep, seed 22: stage 16 (96 cached columns) spilled
    8 / 44 B at sw_exp2_per16 6 / 8 without its persistent loop, 48 B at 8 with it, stage 15 48 B at 8;
    stages 17 and 18, 'bitmask', none)."""
    if not (s.warp_specialized and s.correction_warps and s.softmax_regs is not None) or not _valid_otherwise(s):
        return
    if s.softmax_regs <= 192 and s.sw_exp2_per16 > 4 and s.phase_tracking == "array":
        cached = f"s_cache_cols={s.s_cache_cols} with " if s.s_cache_cols >= s.block_n else ""
        raise ScheduleError(
            f"{cached}sw_exp2_per16={s.sw_exp2_per16}, phase_tracking='array' and softmax_regs={s.softmax_regs}: "
            f"on {_WHERE} the softmax warps spill; set phase_tracking='bitmask' (minor 17) or sw_exp2_per16 <= 4"
        )


# sw_exp2_per16 above which one Q stage with setmaxnreg budgets spills (its polynomial constants beside the
# one softmax warpgroup's S and O registers), per head dim; measured with nvcc 13.0 by the schedule-space
# sweep (seed 21) and around it: q_stages=1 at sw_exp2_per16 6 / 8 spilled 16 / 16 B at stage 18, 76 / 64 B at
# stage 12, 128 / 112 B at stage 14, and at head dim 256 (hdim256) 0 / 76 B; 4 (and 6 at 256) spilled nowhere,
# nor did stages 9 and 11 (no budgets)
ONE_Q_STAGE_SW_EXP2 = {64: 4, 128: 4, 256: 6}


def one_q_stage_software_exp2(s) -> None:
    """One Q stage with register budgets takes at most 4 of every 16 P columns through the software exp2
    (6 at head dim 256); more spills (:data:`ONE_Q_STAGE_SW_EXP2`)."""
    if s.q_stages != 1 or s.softmax_regs is None or not _valid_otherwise(s):
        return
    limit = ONE_Q_STAGE_SW_EXP2.get(s.head_dim)
    if limit is not None and s.sw_exp2_per16 > limit:
        raise ScheduleError(
            f"sw_exp2_per16={s.sw_exp2_per16} with q_stages=1 and softmax_regs={s.softmax_regs} at head dim "
            f"{s.head_dim}: on {_WHERE} the one softmax warpgroup spills (measured 16-128 B); set sw_exp2_per16 <= "
            f"{limit}" + (", or q_stages=2" if s.head_dim != 256 else "")
        )


def split_kv_registers(s) -> None:
    """A split-KV build (``kv_splits`` 0 or 2..128) at a softmax budget of 192 registers or less: its
    epilogue's values leave the softmax no room for more than :data:`b200c.dsl.split_build.SPLIT_S_CACHE_COLS`
    register-cached S columns (measured with nvcc 13.0: 20-32 B of spills at 96 for the blog's stages 15-18,
    the head-dim 64 variant, fa4_knobs and sw_exp2_4of16; none at 64 or 80). The runtime's split build of
    a ``kv_splits=None`` schedule caps them itself (:func:`b200c.dsl.split_build.split_build`)."""
    from ...dsl.split_build import SPLIT_S_CACHE_COLS

    if s.kv_splits in (None, 1) or s.softmax_regs is None or s.softmax_regs > 192 or not _valid_otherwise(s):
        return
    if s.s_cache_cols > SPLIT_S_CACHE_COLS:
        raise ScheduleError(
            f"kv_splits={s.kv_splits} (a split-KV build) with s_cache_cols={s.s_cache_cols} at "
            f"softmax_regs={s.softmax_regs}: on {_WHERE} the split epilogue's values leave the softmax warps room "
            f"for at most {SPLIT_S_CACHE_COLS} register-cached S columns (measured 20-32 B of spills at 96); set "
            f"s_cache_cols <= {SPLIT_S_CACHE_COLS}, or kv_splits=None (the runtime's split build, "
            f"b200c.dsl.split_build.split_build, caps them itself)")


def register_minimums(s) -> None:
    """setmaxnreg budgets below what the roles need spill; so does a two-slot K/V ring beside two
    Q stages and correction warps at head dim 128 (the MMA warp at 48 registers)."""
    if not s.warp_specialized or not _budgets(s) or not _valid_otherwise(s):
        return
    # one Q stage at head dim 64 with x32 O loads: the correction warps spilled 16 B at 80 (none at 88, or
    # with o_load_cols=16, or at head dim 128)
    odd = s.q_stages == 1 and s.head_dim == 64 and s.o_load_cols == 32
    correction_least = MIN_CORRECTION_REGS + 8 * odd
    for field, least in (("softmax_regs", MIN_SOFTMAX_REGS), ("correction_regs", correction_least),
                         ("other_regs", MIN_OTHER_REGS)):
        v = getattr(s, field)
        if v is not None and v < least:
            why = ("with q_stages=1, head_dim=64 and o_load_cols=32 (measured: 16 B of spills at 80)"
                   if field == "correction_regs" and odd else "(the blog's budgets; below them the roles spill)")
            raise ScheduleError(
                f"{field}={v}: on {_WHERE} the {field.split('_')[0]} warps need at least {least} registers per "
                f"thread {why}; set {field} >= {least}"
            )
    if s.kv_stages == 2 and s.q_stages == 2 and s.correction_warps and s.head_dim >= 128:
        raise ScheduleError(
            f"kv_stages=2 with q_stages=2 and correction_warps={s.correction_warps} at head_dim={s.head_dim}: on "
            f"{_WHERE} the load/MMA warps at other_regs={s.other_regs} spill with a two-slot ring (measured "
            f"16-256 B at stages 12-18), and a larger other_regs leaves the softmax warps less than "
            f"{MIN_SOFTMAX_REGS}; use kv_stages >= 3 (the blog's 3)"
        )


RULES = (tile_shape, p_storage, pingpong, correction_pv_order, default_registers, softmax_o_registers,
         softmax_s_registers, softmax_cache_registers, one_q_stage_software_exp2, split_kv_registers, register_minimums)

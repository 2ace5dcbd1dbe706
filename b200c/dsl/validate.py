"""Schedule validation: one function per knob rule, each raising a typed error
whose message names the knob, the limit and the value (Halide-style).

Hardware budgets (TMEM columns, SMEM bytes, threads, the register pool) depend
on the layout, which the code generator's plan owns: ``b200c.plan(schedule)``
and ``b200c.generate(schedule)`` check them after these rules. Knobs a target
cannot honour are refused by that target's rules
(``b200c/codegen/<backend>/knobs.py``), which ``validate_schedule`` runs after
these and before the issue order is parsed with the target's semantics.
"""
from __future__ import annotations

import math
import re

from ..errors import ScheduleError
from .issue_order import MAX_KV_STAGES, default_order, parse_issue_order
from .knobs import ENUMS

MAX_KV_SPLITS = 128  # splits of one work item's K/V tiles (a split's partial O and LSE go to a workspace)



_INT_FIELDS = ("blog_stage", "block_m", "block_n", "head_dim", "q_stages", "kv_stages", "sw_exp2_per16",
               "s_cache_cols", "correction_warps", "early_pv_cols", "s_load_cols", "rowmax_chains", "o_load_cols")
_OPT_INT_FIELDS = ("softmax_regs", "correction_regs", "other_regs", "kv_splits")
_BOOL_FIELDS = ("warp_specialized", "persistent", "deferred_s_wait", "split_rowsum", "f32x2", "rowmax_max3",
                "pingpong")
_STR_FIELDS = ("name", "p_storage", "swizzle", "kv_tokens", "exp2", "phase_tracking", "tma_l2_promotion", "rowsum")


def _types(s) -> None:
    def bad(field, want):
        v = getattr(s, field)
        kind = type(v).__name__
        raise ScheduleError(f"{field}={v!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}; expected {want}")

    for f in _INT_FIELDS:
        v = getattr(s, f)
        if isinstance(v, bool) or not isinstance(v, int):
            bad(f, "an int")
    for f in _OPT_INT_FIELDS:
        v = getattr(s, f)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            bad(f, "an int or None")
    for f in _BOOL_FIELDS:
        if not isinstance(getattr(s, f), bool):
            bad(f, "True or False")
    for f in _STR_FIELDS:
        if not isinstance(getattr(s, f), str):
            bad(f, "a str")
    if s.issue_order is not None and not isinstance(s.issue_order, str):
        bad("issue_order", "a str such as 'P0V(i) Q0K(i+1)' or None")
    t = s.rescale_threshold
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))):
        bad("rescale_threshold", "a number of log2 units or None")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,64}", s.name):
        raise ScheduleError(
            f"name={s.name!r}: use 1-64 letters, digits or '_.+-' (it is printed into the generated file)"
        )


def _enums(s) -> None:
    for field, allowed in ENUMS.items():  # b200c/dsl/knobs.py: the knob space, written once
        v = getattr(s, field)
        if v not in allowed:
            raise ScheduleError(f"{field}={v!r} is not one of {', '.join(map(repr, allowed))}")


HEAD_DIMS = (64, 128, 256)


def _tile_shape(s) -> None:
    if s.head_dim not in HEAD_DIMS:
        raise ScheduleError(
            f"head_dim={s.head_dim} is not one of {', '.join(map(str, HEAD_DIMS))} (multiples of the 64-column "
            f"TMA box, N <= 256 for the PV MMA)"
        )
    if s.block_m not in (64, 128):
        raise ScheduleError(
            f"block_m={s.block_m} must be 128 (sm_100a: one tcgen05.mma M) or 64 (sm_90a: one wgmma M, the rows "
            f"of one consumer warpgroup)"
        )
    if s.block_n % 16 or not (16 <= s.block_n <= 256):
        raise ScheduleError(
            f"block_n={s.block_n} must be a multiple of 16 (one MMA K step of PV) in 16..256 (the largest MMA N)"
        )


def _needs_specialization(s) -> None:
    if s.warp_specialized:
        return
    for field, bad, why in (
        ("q_stages", s.q_stages != 1, "two Q tiles per CTA need their own softmax warpgroups (blog ch.5)"),
        ("kv_tokens", s.kv_tokens != "paired", "separate K/V tokens need a load warp running ahead (ch.6)"),
        ("kv_stages", s.kv_stages != 1, "a K/V ring needs a load warp running ahead (ch.6)"),
        ("issue_order", s.issue_order is not None, "an MMA issue order needs an MMA warp (ch.7)"),
        ("pingpong", s.pingpong, "ping-pong alternates two consumer warpgroups (FA3 §3.1)"),
        ("correction_warps", s.correction_warps != 0, "correction warps are a warp role (ch.12)"),
        ("early_pv_cols", s.early_pv_cols != 0, "early PV is an MMA-warp schedule (ch.13)"),
        ("persistent", s.persistent, "the persistent loop pipelines warp roles across work items (ch.14)"),
    ):
        if bad:
            raise ScheduleError(
                f"{field}={getattr(s, field)!r} needs warp_specialized=True: {why}"
            )


def _counts(s) -> None:
    if not (1 <= s.q_stages <= 4):
        raise ScheduleError(f"q_stages={s.q_stages} must be in 1..4")
    if not (1 <= s.kv_stages <= MAX_KV_STAGES):
        raise ScheduleError(f"kv_stages={s.kv_stages} must be in 1..{MAX_KV_STAGES}")
    if s.correction_warps not in (0, 4):
        raise ScheduleError(
            f"correction_warps={s.correction_warps} must be 0 or 4: one warp per 32 TMEM lanes of O (blog ch.12)"
        )
    if s.s_load_cols not in (8, 16, 32):
        raise ScheduleError(f"s_load_cols={s.s_load_cols} must be 8, 16 or 32 (tcgen05.ld .x8/.x16/.x32)")
    if s.rowmax_chains not in (1, 2, 4, 8):
        raise ScheduleError(f"rowmax_chains={s.rowmax_chains} must be 1, 2, 4 or 8")
    if s.o_load_cols not in (8, 16, 32):
        raise ScheduleError(f"o_load_cols={s.o_load_cols} must be 8, 16 or 32 (tcgen05.ld/st .x8/.x16/.x32 of O)")
    if s.kv_splits is not None and not (0 <= s.kv_splits <= MAX_KV_SPLITS):
        raise ScheduleError(
            f"kv_splits={s.kv_splits} must be None (decided per call), 0 (split-KV build, count per call), 1 (never "
            f"split) or 2..{MAX_KV_SPLITS} splits of each work item's K/V tiles"
        )


def _exp2(s) -> None:
    if s.sw_exp2_per16 and s.exp2 != "ex2.approx.ftz":
        raise ScheduleError(
            f"sw_exp2_per16={s.sw_exp2_per16} needs exp2='ex2.approx.ftz': the software split works on "
            f"exponents already in log2 units (blog ch.9 builds on ch.8)"
        )
    if s.f32x2 and s.exp2 != "ex2.approx.ftz":
        raise ScheduleError(
            f"f32x2=True needs exp2='ex2.approx.ftz': the packed scale-and-subtract is the fma of the folded "
            f"log2 scale (blog ch.8)"
        )
    if s.sw_exp2_per16 not in (0, 2, 4, 6, 8):
        raise ScheduleError(
            f"sw_exp2_per16={s.sw_exp2_per16} must be an even count in 0..8 of every 16 P columns "
            f"(pairs run as packed f32x2)"
        )
    if s.rescale_threshold is not None:
        if s.exp2 != "ex2.approx.ftz":
            raise ScheduleError(
                f"rescale_threshold={s.rescale_threshold} is in log2 units and needs exp2='ex2.approx.ftz' (blog ch.11)"
            )
        if not math.isfinite(s.rescale_threshold) or s.rescale_threshold < 0:
            raise ScheduleError(
                f"rescale_threshold={s.rescale_threshold} must be a finite number of log2 units >= 0 "
                f"(0 rebases on every larger max; the blog uses 8.0)"
            )
        if s.rescale_threshold > 64.0:
            raise ScheduleError(
                f"rescale_threshold={s.rescale_threshold} must be in [0, 64] log2 units; larger values "
                f"overflow FP32 P/rowsum (exp2(64) = 1.8e19)"
            )


def _p_and_cache(s) -> None:
    if s.p_storage == "smem" and s.warp_specialized:
        raise ScheduleError(
            "p_storage='smem' needs warp_specialized=False: P in SMEM overwrites the K tile, which warp roles "
            "and Q stages sharing K would race on; move P to TMEM first (p_storage='tmem', blog ch.2)"
        )
    if s.s_cache_cols:
        if s.p_storage != "tmem":
            raise ScheduleError(
                f"s_cache_cols={s.s_cache_cols} needs p_storage='tmem': P is written high-to-low into the "
                f"upper half of the S columns (blog ch.10)"
            )
        if s.s_cache_cols % 16 or not (16 <= s.s_cache_cols <= s.block_n):
            raise ScheduleError(
                f"s_cache_cols={s.s_cache_cols} must be a multiple of 16 in 16..{s.block_n} (block_n): P is "
                f"produced 16 columns at a time; {s.block_n} keeps every score in registers (no re-read)"
            )
        if s.s_cache_cols % s.s_load_cols:
            raise ScheduleError(
                f"s_cache_cols={s.s_cache_cols} must be a multiple of s_load_cols={s.s_load_cols}: each S load "
                f"is kept whole or not at all"
            )
    if s.early_pv_cols:
        if not s.s_cache_cols:
            raise ScheduleError(
                f"early_pv_cols={s.early_pv_cols} needs s_cache_cols: early PV consumes the P columns "
                f"published first, which are the high ones only when P is written high-to-low (blog ch.13)"
            )
        if s.early_pv_cols % 16 or not (16 <= s.early_pv_cols <= 112):
            raise ScheduleError(
                f"early_pv_cols={s.early_pv_cols} must be a multiple of 16 (one MMA K step) in 16..112"
            )
    if s.split_rowsum and not s.s_cache_cols:
        raise ScheduleError("split_rowsum=True needs s_cache_cols: it splits the cached and re-read sums (minor 16)")
    if s.deferred_s_wait and s.p_storage != "tmem":
        raise ScheduleError("deferred_s_wait=True needs p_storage='tmem': the wait moves before the first P store")


def _pingpong(s) -> None:
    if s.pingpong and s.q_stages != 2:
        raise ScheduleError(
            f"pingpong=True needs q_stages=2 (got {s.q_stages}): two consumer warpgroups take turns issuing their "
            f"GEMMs (FA3 §3.1)"
        )


def _uses_setmaxnreg(s) -> bool:
    return any(r is not None for r in (s.softmax_regs, s.correction_regs, s.other_regs))


def _registers(s) -> None:
    for field in ("softmax_regs", "correction_regs", "other_regs"):
        v = getattr(s, field)
        if v is None:
            continue
        if not (24 <= v <= 256) or v % 8:
            raise ScheduleError(
                f"{field}={v}: setmaxnreg takes a multiple of 8 in 24..256 registers per thread"
            )
    if not _uses_setmaxnreg(s):
        return
    if not s.warp_specialized:
        raise ScheduleError("register budgets need warp_specialized=True: setmaxnreg is set per warpgroup role")
    missing = [f for f in ("softmax_regs", "other_regs") if getattr(s, f) is None]
    if s.correction_warps and s.correction_regs is None:
        missing.append("correction_regs")
    if missing:
        raise ScheduleError(f"register budgets are all-or-nothing: also set {', '.join(missing)}")
    if not s.correction_warps and s.correction_regs is not None:
        raise ScheduleError("correction_regs is set but correction_warps=0: set correction_regs=None or correction_warps=4")


def _issue_order(s, p_aliases_s: bool = True):
    if not s.warp_specialized:
        return None
    text = s.issue_order if s.issue_order is not None else default_order(s.q_stages)
    return parse_issue_order(text, s.q_stages, s.kv_tokens, s.kv_stages, p_aliases_s=p_aliases_s)


RULES = (
    _types,
    _enums,
    _tile_shape,
    _counts,
    _needs_specialization,
    _exp2,
    _p_and_cache,
    _pingpong,
    _registers,
)  # the target's rules run after _types and _enums; then _issue_order, whose parse is returned


def validate_schedule(s, target_rules: tuple = (), p_aliases_s: bool = True):
    """Run the knob rules (types, enums, then ``target_rules``, then the rest); the first violation raises.

    Args:
        s: the schedule (a :class:`b200c.Schedule`; the callers check the type: this module is
            below schedule.py, which calls it from :meth:`Schedule.validate`).
        target_rules: a target's own rules (functions of the schedule raising
            ScheduleError), e.g. ``b200c.codegen.sm90.knobs.RULES``.
        p_aliases_s: the target keeps P in the storage of S (tcgen05: P over
            the S columns in TMEM), so a QK may not overwrite S before the
            previous PV was issued; False on sm_90a (S and P in separate
            registers). Passed to :func:`parse_issue_order`.

    Returns:
        The checked :class:`IssueOrder` of a warp-specialized schedule, else None.

    Raises:
        ScheduleError, IssueOrderError.
    """
    # the target's refusals right after the type and enum checks: a knob that means nothing on the
    # target is reported as such, before rules that relate it to other knobs
    for rule in RULES[:2] + tuple(target_rules) + RULES[2:]:
        rule(s)
    return _issue_order(s, p_aliases_s)

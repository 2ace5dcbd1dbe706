"""Knob rules of the Hopper backend (sm_90a): knobs that mean nothing on
Hopper or that this backend does not generate, refused before planning. One
function per rule; each raises a ScheduleError naming the knob, why it does
not apply to sm_90a, and what to set instead.

What carries over with the same meaning: ``q_stages`` (consumer warpgroups of
64 rows each), ``kv_tokens``/``kv_stages`` (the K/V ring), ``issue_order``
(per consumer warpgroup, see :func:`issue_order_per_stage`), ``exp2``,
``sw_exp2_per16``, ``rescale_threshold``, ``persistent``, ``softmax_regs``
(consumers) / ``other_regs`` (producer), ``phase_tracking`` (producer),
``tma_l2_promotion``; ``pingpong`` and ``block_n`` are Hopper knobs.
"""
from __future__ import annotations

from ...dsl.issue_order import parse_issue_order
from ...errors import ScheduleError

_WHERE = "on target sm90a (Hopper wgmma)"
# the largest block_n per head dim whose accumulators (block_n/2 S, block_n/4 P as bf16x2 and head_dim/2 O
# registers per consumer thread) and softmax state compile without spills at the consumers' 240-register
# budget (h11's schedule, nvcc 13.0, measured: 224 at head dim 64, 192 at 128; at 256, 96 spilled 4 bytes and 80
# does not); FA3 uses 176 at head dim 128 and 80 at 256
MAX_BLOCK_N = {64: 224, 128: 192, 256: 80}


def max_block_n(head_dim: int) -> int:
    """The largest block_n (a multiple of 16) at ``head_dim`` (:data:`MAX_BLOCK_N`)."""
    return MAX_BLOCK_N[head_dim]


def tile_shape(s) -> None:
    """64-row Q stages (one wgmma M per consumer warpgroup) and a block_n whose accumulators fit."""
    if s.block_m != 64:
        raise ScheduleError(
            f"block_m={s.block_m}: {_WHERE} a Q stage is one consumer warpgroup of 64 rows (wgmma M = 64; 128 rows "
            f"would need 128 S + 128 O accumulator registers per thread, FA3 §3); set block_m=64 "
            f"(q_stages=2 gives a 128-row CTA tile)"
        )
    top = max_block_n(s.head_dim) if s.head_dim in (64, 128, 256) else 256
    if s.block_n > top:
        raise ScheduleError(
            f"block_n={s.block_n}: {_WHERE} block_n <= {top} at head_dim={s.head_dim}: a consumer thread holds "
            f"block_n/2 S, block_n/4 P and head_dim/2 = {s.head_dim // 2} O registers within its 240-register "
            f"budget (larger tiles spill, measured); FA3 uses 176 at head dim 128 and 80 at 256"
        )


def consumers(s) -> None:
    """At most two consumer warpgroups, and register budgets when there are two."""
    if s.q_stages > 2:
        raise ScheduleError(
            f"q_stages={s.q_stages}: {_WHERE} each Q stage is a consumer warpgroup holding S, P and O in registers "
            f"(about 190-230 per thread); {s.q_stages} of them and the producer exceed the 65536-register file; "
            f"use q_stages <= 2"
        )
    if s.q_stages == 2 and s.warp_specialized and (s.softmax_regs is None or s.other_regs is None):
        raise ScheduleError(
            f"q_stages=2 {_WHERE} needs softmax_regs (consumer warpgroups) and other_regs (producer warpgroup): at "
            f"384 threads ptxas allots 168 registers per thread and the consumers would spill; FA3 uses "
            f"softmax_regs=240, other_regs=24"
        )


PERSISTENT_PRODUCER_REGS = 32


def producer_registers(s) -> None:
    """A persistent producer keeps a work item's decomposition (rows, heads, K/V tile range) live across
    its loop: below 32 registers ptxas spills it (measured: 16 bytes at 24)."""
    if s.persistent and s.other_regs is not None and s.other_regs < PERSISTENT_PRODUCER_REGS:
        raise ScheduleError(
            f"other_regs={s.other_regs} with persistent=True {_WHERE}: the persistent producer warpgroup needs "
            f">= {PERSISTENT_PRODUCER_REGS} registers (its work items' rows, heads and K/V ranges; 24 spilled 16 "
            f"bytes, measured); e.g. other_regs=40 with softmax_regs=232 (128 x 40 + 256 x 232 = 64512, what a "
            f"384-thread CTA is launched with), or persistent=False"
        )


def kv_tokens(s) -> None:
    """Warp-specialized kernels use separate K and V tokens (each released after its own wgmma)."""
    if s.warp_specialized and s.kv_tokens != "separate":
        raise ScheduleError(
            f"kv_tokens={s.kv_tokens!r} {_WHERE} with warp_specialized=True is not generated: the consumers take K "
            f"and V as separate ring tokens, each released once the wgmma that reads it completed; set "
            f"kv_tokens='separate' (kv_stages=1 still loads one tile at a time)"
        )


def swizzle(s) -> None:
    """The wgmma descriptors are built for 128B-swizzled tiles."""
    if s.swizzle != "128B":
        raise ScheduleError(
            f"swizzle={s.swizzle!r}: {_WHERE} the Q/K/V tiles are loaded 128B-swizzled for the wgmma descriptors "
            f"(PTX ISA 9.7.15.5.1.2); set swizzle='128B'"
        )


def p_storage(s) -> None:
    """P stays in registers: the A operand of an RS wgmma."""
    if s.p_storage != "registers":
        why = ("Hopper has no Tensor Memory" if s.p_storage == "tmem" else
               "P never leaves the registers: PV is an RS wgmma whose A operand is the packed S accumulator "
               "fragment (PTX ISA 9.7.15.5.1.1)")
        raise ScheduleError(f"p_storage={s.p_storage!r} means nothing {_WHERE}: {why}; set p_storage='registers'")


def tcgen05_only(s) -> None:
    """Knobs of TMEM loads, correction warps and sm_100 instructions."""
    for field, bad, why, fix in (
        ("correction_warps", s.correction_warps != 0,
         "O lives in the consumer warpgroup's registers; no other warps can rescale it (blog ch.12 needs TMEM)",
         "correction_warps=0 (rescale_threshold skips most rescales instead)"),
        ("early_pv_cols", s.early_pv_cols != 0, "P is produced in registers by the warpgroup that issues PV",
         "early_pv_cols=0"),
        ("s_cache_cols", s.s_cache_cols != 0, "S is already in registers (the wgmma accumulator)", "s_cache_cols=0"),
        ("split_rowsum", s.split_rowsum, "it splits cached and TMEM-re-read sums (minor 16)", "split_rowsum=False"),
        ("deferred_s_wait", s.deferred_s_wait, "there are no tcgen05.ld waits", "deferred_s_wait=False"),
        ("s_load_cols", s.s_load_cols != 8, "it sets the width of tcgen05.ld of S", "s_load_cols=8 (the default)"),
        ("o_load_cols", s.o_load_cols != 8, "it sets the width of the TMEM loads of O", "o_load_cols=8"),
        ("rowmax_chains", s.rowmax_chains != 1,
         "the row max always runs 4 independent chains over the thread's columns", "rowmax_chains=1"),
        ("rowmax_max3", s.rowmax_max3, "3-input max.f32 (FMNMX3) is sm_100+", "rowmax_max3=False"),
        ("f32x2", s.f32x2, "packed fma/add/mul.f32x2 are sm_100+ instructions", "f32x2=False"),
        ("rowsum", s.rowsum != "fp32", "the BF16-rounded rowsum is generated for tcgen05 only", "rowsum='fp32'"),
        ("correction_regs", s.correction_regs is not None, "there are no correction warps", "correction_regs=None"),
    ):
        if bad:
            raise ScheduleError(f"{field}={getattr(s, field)!r} means nothing {_WHERE}: {why}; set {fix}")


def issue_order_per_stage(s) -> None:
    """Every consumer warpgroup runs the same code, so every Q stage's two
    steps must come in the same order (e.g. ``Q0K(i+1) P0V(i) Q1K(i+1) P1V(i)``);
    the order of steps of different Q stages does not matter on sm_90a (each
    warpgroup issues its own wgmmas; ``pingpong`` decides their turns)."""
    if not s.warp_specialized or s.issue_order is None:
        return
    text = s.issue_order
    try:
        order = parse_issue_order(text, s.q_stages, s.kv_tokens, 8, p_aliases_s=False)
    except Exception:  # noqa: BLE001 - the real parse (with the ring size) reports it
        return
    shapes = {q: tuple((st.kind, st.offset) for st in order.stage_steps(q)) for q in range(s.q_stages)}
    if len(set(shapes.values())) > 1:
        a, b = (" ".join(st.symbolic for st in order.stage_steps(q)) for q in (0, 1))
        raise ScheduleError(
            f"issue_order={text!r}: {_WHERE} every consumer warpgroup runs one copy of the code, so each Q stage "
            f"must order its two steps alike; stage 0 issues {a!r} but stage 1 {b!r}"
        )


def _leads(s) -> bool:
    """Whether the issue order runs QK one K/V tile ahead of PV (softmax of tile i+1 beside PV(i))."""
    if s.issue_order is None:
        return False
    try:
        return bool(parse_issue_order(s.issue_order, s.q_stages, s.kv_tokens, 8, p_aliases_s=False).lead)
    except Exception:  # noqa: BLE001 - the real parse reports it
        return False


def kv_ring(s) -> None:
    """A leading order (QK one K/V tile ahead of PV) holds two ring tokens at once."""
    if not s.warp_specialized or s.issue_order is None or s.kv_stages >= 2:
        return
    try:
        order = parse_issue_order(s.issue_order, s.q_stages, s.kv_tokens, 8, p_aliases_s=False)
    except Exception:  # noqa: BLE001 - the real parse reports it
        return
    if order.lead:
        # found by the schedule-space sweep: the protocol verifier saw the producer and consumers deadlock
        raise ScheduleError(
            f"issue_order={s.issue_order!r} with kv_stages={s.kv_stages}: {_WHERE} a consumer warpgroup issues "
            f"QK(i+1) and PV(i) in one turn, so K(i+1) and V(i) occupy two ring slots until their wgmmas "
            f"complete; set kv_stages >= 2, or issue_order=None (one tile at a time)"
        )


def consumer_registers(s) -> None:
    """A consumer warpgroup holds S (block_n/2), P (block_n/4) and O (head_dim/2) accumulator registers
    per thread plus about 32 for the softmax state and addresses: ``0.75 x block_n + head_dim/2 + 32``,
    rounded up to 8 (measured with nvcc 13.0 at head dim 128: block_n=128 spilled 32 B at 184 and none at
    192; block_n=176 192 B at 216, none at 224; block_n=192 96 B at 232, none at 240; found by the
    schedule-space sweep); 8 more per 64 columns of S when a leading issue order (softmax beside the
    previous PV) rescales O after every tile (``rescale_threshold=None``)."""
    if (not s.warp_specialized or s.block_n % 16 or s.head_dim not in MAX_BLOCK_N
            or not (16 <= s.block_n <= MAX_BLOCK_N[s.head_dim])):
        return
    need = -(-(3 * s.block_n // 4 + s.head_dim // 2 + 32) // 8) * 8
    if s.rescale_threshold is None and _leads(s):
        # softmax(i+1) beside PV(i) (FA3's intra-warpgroup overlap) with O rescaled after every tile (no lazy
        # rescale: h06-h08): 8 more per 64 columns of S (measured with nvcc 13.0 by the schedule-space sweep,
        # seed 22, and a grid around it: h06 / h07 / h08 spilled 8-24 B at the base rule for block_n 128 and
        # 176, h08 12 B at block_n 64 and head dim 128; none 8 per 64 columns higher, where a budget is left: at
        # block_n 176 and head dim 128 h06 and h07 spilled 16 / 48 B even at 240; h03-h05, one tile at a time,
        # and h09-h11, lazy rescale, at the base rule: none)
        need += 8 * -(-s.block_n // 64)
    if s.softmax_regs is not None:
        have, what = s.softmax_regs, f"softmax_regs={s.softmax_regs}"
    else:
        from .. import hardware
        from .plan import warp_roles

        have = hardware.SM90.entry_registers(32 * sum(len(r.warps) for r in warp_roles(s)))
        what = f"ptxas's {have} registers per thread without register budgets"
    if have < need:
        raise ScheduleError(
            f"block_n={s.block_n} with {what}: {_WHERE} a consumer warpgroup holds S, P and O of its 64 rows in "
            f"registers, about {need} per thread at block_n={s.block_n}, and would spill; set softmax_regs >= "
            f"{need} (FA3: 240, other_regs=24) or a smaller block_n"
        )


RULES = (tile_shape, consumers, producer_registers, kv_tokens, swizzle, p_storage, tcgen05_only,
         issue_order_per_stage, kv_ring, consumer_registers)

"""The budgets of a backward schedule on a target (issue 31): shared memory regions, accumulator registers
and the register pool, checked before any kernel exists so that a schedule that cannot fit is refused by
name. No backward kernel is generated yet; this is the plan its code generator will print.

sm_90a layout (the kernel :mod:`b200c.codegen.sm90.backward` prints, after FlashAttention-3's sm90
backward): one producer warpgroup (one thread of warp 0 issues the TMA loads: K, V once per work item;
Q, dO, LSE, D per visit) and ``mma_warpgroups`` consumer warpgroups. Shared memory per CTA:

* ``k``, ``v``: the work item's K/V tile, ``block_n x D`` BF16 each, loaded once per item;
* ``q``, ``do``: ``q_stages`` tiles of ``block_m x D`` BF16 each (the ring the producer fills ahead);
* ``ds``: two ``block_n x block_m`` BF16 tiles of dS^T (one per visit parity): every consumer warpgroup
  writes its keys' rows, then reads them back as the A operand of dQ = dS K (P^T and dS^T stay in
  registers for dV += P^T dO and dK += dS^T Q). How the consumer warpgroups share dQ is
  :func:`dq_split`'s: each a slice of D columns over every key of the tile, or each every column over
  its own keys;
* ``lse``, ``dpsum``: ``q_stages x block_m`` FP32 each (the forward's LSE in log2 units and
  D = rowsum(dO * O), from the preprocess kernel);
* ``dq``: where it fits (:func:`dq_store`), the visit's FP32 dQ of every consumer warpgroup (``block_m x D``
  split by columns or by rows, or ``block_m x D`` each where split by keys), in the accumulators' fragment
  order;
* ``barriers``: 8 B each: K/V full, Q full and Q empty per stage.

The visit's dQ goes into the FP32 dQ buffer (``dq_accum``, each Q tile in the consumers' fragment order) in
one of two ways (:func:`dq_store`): ``"bulk"``, each warpgroup writes its dQ to its ``dq`` region and one of
its threads adds the region into ``dq_accum`` with one TMA bulk reduce-add (``cp.reduce.async.bulk .add.f32``,
as FA3's dQ writer does from a dedicated warp); ``"red"``, every thread adds its registers with
``red.global.add.v4.f32`` (16 contiguous bytes per thread, 512 per warp instruction).

Registers per consumer thread (FP32 accumulators): dK and dV (``2 x block_n x D``, split evenly over the
consumer warpgroups' threads) live for the whole work item; S and dP (``2 x block_m x block_n``) live until
dS is written, split over the warpgroups where each owns its keys and whole in every warpgroup where each
owns a slice of dK's and dV's columns (:func:`kv_split`); dQ (``block_m x D`` split over the warpgroups,
or ``block_m x D`` in each warpgroup: :func:`dq_split`) after that, next to P^T and dS^T (BF16 pairs, the A
operands of dV and dK, live until those wgmmas complete) unless the visit waits for them first
(:func:`dk_before_dq`), so the peak is dK + dV + max(S + dP + P^T, dQ [+ P^T + dS^T]) (P^T, the A of the
dV wgmma still running, lives through the dS loop, whose S and dP die as dS^T is made). The rest (addresses, indices, the softmax's per-row values) must fit in what is
left of ``consumer_regs`` (counts rounded up where the split is uneven): :data:`RESERVED_REGS`, a budget,
not ptxas's count (the generated kernel's spill check is the judge).
"""
from __future__ import annotations

import msgspec

from . import hardware

RESERVED_REGS = 16  # per consumer thread beyond the accumulators: pointers, loop state, per-row LSE and D
BARRIER_BYTES = 8


class BackwardPlan(msgspec.Struct, frozen=True):
    """The checked budgets of one backward schedule on one target.

    Attributes:
        name, target: the schedule's name and the target (``"sm90a"``).
        threads: threads per CTA (128 per warpgroup, producer included).
        smem: ``(region, bytes)`` per shared-memory region, in layout order (1024-byte aligned tiles).
        offsets: ``(region, byte offset)`` of each region (and ``barriers``) from the 1024-aligned base.
        smem_bytes: their sum with the alignment padding, bytes.
        acc_regs: peak FP32 accumulator registers per consumer thread.
        acc_parts: ``(name, registers per consumer thread)``: dK + dV, S + dP, P^T + dS^T (BF16 pairs, the A
            operands of dV and dK: live until those wgmmas complete), dQ.
        reg_pool: ``(producer + consumer warpgroups' setmaxnreg budgets) x 128`` against the launch allocation.
    """

    name: str
    target: str
    threads: int
    smem: tuple
    smem_bytes: int
    acc_regs: int
    acc_parts: tuple
    reg_pool: tuple
    offsets: tuple = ()
    dq_shape: tuple = ()  # (head_dim, mma_warpgroups, block_m, block_n): what dq_split decides from
    kv_shape: tuple = ()  # (block_n, head_dim, mma_warpgroups): what kv_split decides from
    dk_first: bool = False  # dk_before_dq: dV and dK complete before dQ's wgmmas are issued
    dq_store: str = "red"  # dq_store: "bulk" (SMEM + TMA bulk reduce-add) or "red" (red.global.add)
    dv_late: bool = False  # dv_after_ds: P^T packed and dV issued after dS^T

    def describe(self) -> str:
        """A few lines for ``--emit plan``-style printing."""
        lines = [f"backward plan {self.name!r} on {self.target}: {self.threads} threads",
                 "  SMEM " + ", ".join(f"{n} {b} B" for n, b in self.smem) + f": {self.smem_bytes} B",
                 "  accumulators per consumer thread: " + ", ".join(f"{n} {r}" for n, r in self.acc_parts)
                 + f" (peak {self.acc_regs})",
                 "  dV and dK complete before dQ's wgmmas are issued (their P^T and dS^T registers freed first)"
                 if self.dk_first else "",
                 "  P^T packed and dV issued after dS^T is made (P^T's pairs not live beside S and dP)"
                 if self.dv_late else "",
                 f"  register pool: {self.reg_pool[0]} of {self.reg_pool[1]} registers (the setmaxnreg budgets x 128 "
                 "threads per warpgroup, of the CTA's launch allocation)",
                 f"  dK, dV split by {_KV_SPLIT_TEXT[kv_split(*self.kv_shape)]}" if self.kv_shape else "",
                 f"  dQ split by {_SPLIT_TEXT[dq_split(*self.dq_shape)]}" if self.dq_shape else "",
                 f"  dQ added into dq_accum by {_STORE_TEXT[self.dq_store]}"]
        lines = [ln for ln in lines if ln]
        return "\n".join(lines)


_SPLIT_TEXT = {"columns": "columns (each consumer warpgroup: its columns over every key)",
               "rows": "rows (each consumer warpgroup: its 64 query rows, every column over every key)",
               "keys": "keys (each consumer warpgroup: every column over its own keys)"}


_STORE_TEXT = {"bulk": "a TMA bulk reduce-add of each warpgroup's dq region (one thread issues it)",
               "red": "red.global.add.v4.f32 from every consumer thread"}


_KV_SPLIT_TEXT = {"keys": "keys (each consumer warpgroup: every column of its own keys)",
                  "columns": "columns (each consumer warpgroup: its columns of every key; S^T and dP^T computed "
                             "whole in each)"}


def kv_split(block_n: int, head_dim: int, mma_warpgroups: int) -> str:
    """How the consumer warpgroups share the work item's dK and dV (block_n keys x head_dim columns each).

    ``"keys"`` when ``block_n`` splits into the warpgroups' 64-row wgmma M blocks (``block_n`` a multiple of
    ``64 x mma_warpgroups``): warpgroup w owns keys ``[w block_n / W, (w + 1) block_n / W)``, computes S^T and
    dP^T of those keys only and keeps every column of their dK and dV. ``"columns"`` otherwise (head dim 256
    at ``block_n`` 64: dK and dV of 64 keys x 256 columns would be 256 registers per thread in one warpgroup):
    warpgroup w owns columns ``[w D / W, (w + 1) D / W)`` of every key's dK and dV, so every warpgroup computes
    S^T and dP^T of all ``block_n`` keys (the same values: two of the five products done twice, the price of
    keeping P^T and dS^T in registers) and writes its share of the dS^T rows.
    """
    return "keys" if block_n % (64 * mma_warpgroups) == 0 else "columns"


#: registers per consumer thread that ptxas needs beside the accumulators while dQ's wgmmas are issued with the
#: dV and dK wgmmas still in flight (addresses, indices, loop state): with less, nvcc 13.0 serializes every wgmma
#: of the kernel (ptxas C7512; measured at head dim 256: dK + dV 128, P^T + dS^T 32, dQ 64 of 240)
OVERLAP_RESERVE = 32


def dk_before_dq(kv_regs: int, packed_regs: int, dq_regs: int, consumer_regs: int) -> bool:
    """Whether a visit waits for its dV and dK wgmmas before it issues dQ's: when dK + dV, the P^T and dS^T
    pairs those wgmmas read and dQ's accumulators, with :data:`OVERLAP_RESERVE` beside them, exceed
    ``consumer_regs`` (head dim 256; at 64 and 128 dQ's wgmmas queue behind dK's with both live)."""
    return kv_regs + packed_regs + dq_regs + OVERLAP_RESERVE > consumer_regs


#: registers per consumer thread that ptxas needs beside the accumulators when P^T (BF16 pairs, the A of the dV
#: wgmma) is packed while S and dP are still live, beyond RESERVED_REGS (measured: the 128 x 128 tiles at head
#: dim 64 spill 120 B with 224 accumulator registers of 240; 208 of 240 at head dims 128 and 256 do not)
EARLY_DV_RESERVE = 16


def dv_after_ds(kv_regs: int, sdp_regs: int, packed_regs: int, consumer_regs: int) -> bool:
    """Whether the visit packs P^T and issues dV += P^T dO after it made dS^T (FA3's order) instead of right
    after P^T (the dV wgmma then runs while dS^T is made, but P^T's BF16 pairs live beside S and dP): when
    dK + dV, S + dP and P^T, with :data:`RESERVED_REGS` and :data:`EARLY_DV_RESERVE` beside them, exceed
    ``consumer_regs`` (the 128 x 128 tiles at head dim 64)."""
    return kv_regs + sdp_regs + packed_regs // 2 + RESERVED_REGS + EARLY_DV_RESERVE > consumer_regs


def dq_split(head_dim: int, mma_warpgroups: int, block_m: int = 64, block_n: int = 0) -> str:
    """How the consumer warpgroups share a visit's ``dQ = dS K`` (block_m rows x head_dim columns).

    ``"rows"`` when the visit has a 64-row wgmma M block per warpgroup (``block_m == 64 x mma_warpgroups``,
    FA3's 128 x 128 tiles at head dim 64, its AtomLayoutMdQ = 2) and dK and dV split by keys (:func:`kv_split`
    of ``block_n``; 0: not checked): warpgroup w computes rows
    ``[64 w, 64 w + 64)``, every column over every key, after all warpgroups wrote their dS^T rows (one named
    barrier across the warpgroups; no element added twice). Else ``"columns"`` when every warpgroup's share
    of the columns is a whole number of 64-column (128-byte) swizzle atoms (head dim 128 over two
    warpgroups): warpgroup w computes columns
    ``[w D / W, (w + 1) D / W)`` over every key of the tile, after all warpgroups wrote their dS^T rows
    (one named barrier across the warpgroups). ``"keys"`` otherwise (head dim 64 with 64-row visits):
    warpgroup w computes
    every column over its own keys only, so it reads only the dS^T rows it wrote (a barrier within the
    warpgroup) and the warpgroups add their partial dQ into the same FP32 rows (twice the reductions).
    """
    if mma_warpgroups > 1 and block_m == 64 * mma_warpgroups and (
            not block_n or kv_split(block_n, head_dim, mma_warpgroups) == "keys"):
        return "rows"
    return "columns" if (head_dim // mma_warpgroups) % 64 == 0 else "keys"


def dq_store(deterministic: bool, smem_with_dq: int, smem_limit: int, dk_first: bool = False) -> str:
    """How a visit's dQ is added into ``dq_accum``: ``"bulk"`` (each consumer warpgroup's FP32 dQ to its own
    SMEM region, then one TMA bulk reduce-add of the region, issued by one thread of the warpgroup: the
    warpgroup's threads issue no global memory request for dQ) when the ``dq`` region fits beside the others
    (``smem_with_dq <= smem_limit``: head dims 64 and 128 at FA3's tiles), the reduction is atomic and dQ's
    wgmmas may be issued before dK's (the bulk visit's order; ``dk_first`` is :func:`dk_before_dq`);
    ``"red"`` otherwise (head dim 256, whose tiles leave no room and whose visit completes dK first;
    ``deterministic``, whose ordered additions each thread issues inside the Q tile's turn)."""
    return "bulk" if not deterministic and not dk_first and smem_with_dq <= smem_limit else "red"


def plan_backward(schedule, target: str = "sm90a") -> BackwardPlan:
    """Validate ``schedule`` (a :class:`b200c.dsl.backward_schedule.BackwardSchedule`) and check its budgets on
    ``target``. The resource model only: the tile shapes the target's kernel generator covers, and
    ``persistent``, are checked when the kernel is generated (``b200c compile`` / ``check``; a
    BackwardNotSupportedError naming the shapes to use), so a schedule that plans may still be refused there.

    Raises:
        ScheduleError: an invalid knob, or a target with no backward design yet (only ``"sm90a"``).
        ResourceError: shared memory, the consumers' registers or the register pool exceeded, naming the
            regions or accumulators and what to change.
    """
    from ..errors import ResourceError, ScheduleError

    from ..dsl.backward_schedule import BackwardSchedule

    if not isinstance(schedule, BackwardSchedule):
        raise ScheduleError(f"plan_backward takes a BackwardSchedule (b200c.default_backward_schedule(head_dim)), got "
                            f"{type(schedule).__name__}")
    from .targets import REGISTRY, resolve

    s = schedule.validate()
    t = resolve(target)
    if not t.backward:
        have = ", ".join(repr(x.name) for x in REGISTRY if x.backward)
        raise ScheduleError(f"backward schedule {s.name!r}: target {t.name!r} has no backward design yet; use {have}")
    limits = hardware.SM90
    d, m, n, st = s.head_dim, s.block_m, s.block_n, s.q_stages
    regions = (("k", n * d * 2), ("v", n * d * 2), ("q", st * m * d * 2), ("do", st * m * d * 2),
               ("ds", 2 * m * n * 2), ("lse", st * m * 4), ("dpsum", st * m * 4))
    split = dq_split(d, s.mma_warpgroups, m, n)
    consumer_threads = 128 * s.mma_warpgroups
    sdp_threads = consumer_threads if kv_split(n, d, s.mma_warpgroups) == "keys" else 128
    sdp = -(-2 * m * n // sdp_threads)
    parts = (("dK + dV", -(-2 * n * d // consumer_threads)), ("S + dP", sdp), ("P^T + dS^T", -(-sdp // 2)),
             ("dQ", -(-m * d // (128 if split == "keys" else consumer_threads))))
    # rounded up: an uneven split leaves some threads one more
    kv, _, packed, dq = (r for _, r in parts)
    first = dk_before_dq(kv, packed, dq, s.consumer_regs)
    late = dv_after_ds(kv, sdp, packed, s.consumer_regs)
    dq_bytes = m * d * 4 * (s.mma_warpgroups if split == "keys" else 1)
    with_dq = regions[:5] + (("dq", dq_bytes),) + regions[5:]
    store = dq_store(s.dq_reduction == "deterministic", _layout(with_dq, st)[1] + limits.smem_align_slack,
                     limits.smem_bytes, first)
    if store == "bulk":
        regions = with_dq
    offsets, off = _layout(regions, st)
    barriers = BARRIER_BYTES * (1 + 2 * st)  # K/V full; Q full and Q empty per stage
    smem_bytes = off + limits.smem_align_slack
    smem = regions + (("barriers", barriers),)
    if smem_bytes > limits.smem_bytes:
        biggest = sorted(regions, key=lambda r: -r[1])[:3]
        raise ResourceError(
            f"backward schedule {s.name!r} needs {smem_bytes} B of shared memory on sm90a (limit "
            f"{limits.smem_bytes}): largest regions {', '.join(f'{a} {b} B' for a, b in biggest)}; lower block_m, "
            "block_n or q_stages")
    # P^T (the dV wgmma's A) lives through the dS loop, whose S and dP die as dS^T is made; dQ's accumulators
    # come after, next to P^T and dS^T unless the dV and dK wgmmas completed first
    acc = kv + max(sdp + packed // 2, dq + (0 if first else packed))
    if acc + RESERVED_REGS > s.consumer_regs:
        later = f"dQ {dq}" if first else f"dQ {dq} + P^T + dS^T {packed}"
        raise ResourceError(
            f"backward schedule {s.name!r}: the consumers' accumulators need {acc} registers per thread "
            f"({', '.join(f'{a} {b}' for a, b in parts)}; the peak is dK + dV {kv} with the larger of S + dP + P^T "
            f"{sdp + packed // 2} in the dS loop and {later} after it) plus {RESERVED_REGS} for the rest: "
            f"{acc + RESERVED_REGS}, over consumer_regs = {s.consumer_regs}; "
            + _more_warpgroups(s, target) + "lower block_n (dK, dV) or block_m (S, dP, dQ)")
    threads = 128 * (s.mma_warpgroups + 1)
    pool = limits.setmaxnreg_pool(threads)
    used = 128 * (s.producer_regs + s.mma_warpgroups * s.consumer_regs)
    if used > pool:
        raise ResourceError(
            f"backward schedule {s.name!r}: setmaxnreg budgets take {used} registers (128 x ({s.producer_regs} + "
            f"{s.mma_warpgroups} x {s.consumer_regs})) but the CTA of {threads} threads is launched with {pool}; "
            "lower consumer_regs or producer_regs")
    return BackwardPlan(s.name, target, threads, smem, smem_bytes, acc, parts, (used, pool), tuple(offsets),
                        (d, s.mma_warpgroups, m, n), (n, d, s.mma_warpgroups), first, store, late)


def _more_warpgroups(s, target: str) -> str:
    """The register refusal's first advice where one more consumer warpgroup (the accumulators spread over
    128 more threads) gives a schedule whose budgets all fit, else ""."""
    from ..errors import ResourceError, ScheduleError

    w = s.mma_warpgroups + 1
    try:
        plan_backward(s.replace(mma_warpgroups=w), target)
    except (ScheduleError, ResourceError):
        return ""
    return f"use mma_warpgroups = {w} (its budgets fit: {w} x 128 threads share the accumulators), or "


def _layout(regions, stages: int) -> tuple:
    """``(offsets, end)``: each region's byte offset (tiles on 1024 B, the 128B swizzle atom), the barriers'
    after them (8-B aligned), and the end of the barriers."""
    off = 0
    offsets = []
    for name, size in regions:
        off = -(-off // 1024) * 1024
        offsets.append((name, off))
        off += size
    off = -(-off // 8) * 8
    offsets.append(("barriers", off))
    return tuple(offsets), off + BARRIER_BYTES * (1 + 2 * stages)


__all__ = ["BackwardPlan", "dk_before_dq", "dq_split", "dq_store", "dv_after_ds", "EARLY_DV_RESERVE", "kv_split",
           "plan_backward", "OVERLAP_RESERVE", "RESERVED_REGS"]

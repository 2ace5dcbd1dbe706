"""Hopper stage 1 — baseline (target sm90a): one warpgroup does everything.
Thread 0 loads Q and then K(j)+V(j) into the one K/V slot with TMA; the
warpgroup computes S = Q K^T with wgmma (64 Q rows: one wgmma M), waits, runs
the online softmax in registers (__expf), computes O += P V with P straight
from registers (an RS wgmma: the S accumulator fragment packed to BF16 is the
A fragment), waits, and only then may the slot be refilled.

Hopper constants of every stage: block_m=64 (one consumer warpgroup's rows),
128B-swizzled tiles for the wgmma descriptors, P in registers, 256-byte L2
promotion of the tensor maps (as in the prototype runs), phase bits of the
producer's ring as a bitmask (no local memory, minor 17)."""
import b200c

schedule = b200c.Schedule(
    name="hopper_baseline", blog_stage=1, block_m=64, swizzle="128B", p_storage="registers",
    tma_l2_promotion="256B", phase_tracking="bitmask",
)

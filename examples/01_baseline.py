"""Blog stage 1 — baseline: 4 warps do everything, thread 0 issues TMA and
MMA, K and V share one slot, P goes to SMEM over the dead K tile, no swizzle,
__expf, O rescaled every K/V tile."""
import b200c

schedule = b200c.Schedule(name="baseline", blog_stage=1)

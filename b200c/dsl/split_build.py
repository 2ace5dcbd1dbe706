"""The split-KV build of a schedule: what a call that splits runs (``kv_splits=None``), or what a schedule
with ``kv_splits`` 0 or 2..128 is (b200c/codegen/work.py: each split writes FP32 O and LSE, a second kernel
merges them)."""
from __future__ import annotations

from .presets import preset_split_build
from .schedule import Schedule

# register-cached S columns of a split-KV build at a softmax budget of 192 registers or less (split_build)
SPLIT_S_CACHE_COLS = 64


def split_build(s: Schedule) -> Schedule:
    """``s``'s split-KV build: ``kv_splits=0`` (the count per call), with at most :data:`SPLIT_S_CACHE_COLS`
    register-cached S columns where the softmax budget is 192 registers or less: the split epilogue's
    values then leave the softmax no room for 96 (the blog's stages 15-18, the head-dim 64 variant and two
    more spilled 20-32 B, measured with nvcc 13.0; tcgen05's validation refuses them). The built-in presets
    whose own split build spilled take theirs (:data:`b200c.dsl.presets.HOPPER_MOD_SPLIT_BUILDS`: the sm90a
    mods presets). Other knobs as they are; ``blog_stage`` becomes 0 where a knob changes.

    Args:
        s: a :class:`b200c.Schedule`.

    Returns:
        The split build (``s`` itself when it already is one).
    """
    hit = preset_split_build(s)
    if hit is not None:
        return hit
    cols = s.s_cache_cols
    if s.softmax_regs is not None and s.softmax_regs <= 192:
        cols = min(cols, SPLIT_S_CACHE_COLS)
    if s.kv_splits == 0 and cols == s.s_cache_cols:
        return s
    return s.replace(kv_splits=0, s_cache_cols=cols)


__all__ = ["split_build", "SPLIT_S_CACHE_COLS"]

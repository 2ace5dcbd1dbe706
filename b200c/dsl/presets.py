"""Built-in schedules: what ``b200c.scaled_dot_product_attention`` runs when no schedule is given.

``D128`` is the blog's final stage (``examples/18_tma_l2_promotion.py``) with
every knob written out; ``D64`` and ``D256`` are its head-dim variants
(``examples/variants/hdim64.py``, ``hdim256.py``): at D = 256 one Q stage (two
would need 768 of 512 TMEM columns) and a two-slot K/V ring. Tests check that
they equal those files apart from the name.
"""
from __future__ import annotations

from .schedule import Schedule

D128 = Schedule(
    name="default_d128",
    blog_stage=18,
    head_dim=128,
    p_storage="tmem",                       # ch.2: P in TMEM
    swizzle="128B",                         # ch.3
    warp_specialized=True,                  # ch.4
    q_stages=2,                             # ch.5: two Q tiles (or two packed heads) per CTA
    kv_tokens="separate",                   # ch.6: K and V as separate tokens
    kv_stages=3,                            #       in a 3-slot ring
    issue_order="P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)",  # ch.7
    exp2="ex2.approx.ftz",                  # ch.8
    f32x2=True,
    sw_exp2_per16=2,                        # ch.9
    s_cache_cols=96,                        # ch.10
    rescale_threshold=8.0,                  # ch.11
    correction_warps=4,                     # ch.12
    early_pv_cols=96,                       # ch.13
    persistent=True,                        # ch.14
    s_load_cols=16,                         # minor 15
    deferred_s_wait=True,
    rowmax_chains=4,
    rowmax_max3=True,
    o_load_cols=32,
    split_rowsum=True,                      # minor 16
    phase_tracking="bitmask",               # minor 17
    tma_l2_promotion="256B",                # minor 18
    softmax_regs=192,
    correction_regs=80,
    other_regs=48,
)

D64 = D128.replace(name="default_d64", head_dim=64, kv_stages=4)

D256 = D128.replace(name="default_d256", head_dim=256, q_stages=1, kv_stages=2, issue_order="P0V(i) Q0K(i+1)",
                    softmax_regs=232, correction_regs=232, other_regs=48)

PRESETS = {64: D64, 128: D128, 256: D256}


def default_schedule(head_dim: int) -> Schedule:
    """The built-in schedule for head dim 64, 128 or 256.

    Raises:
        ScheduleError: another head dim (b200c kernels support 64, 128 and 256).
    """
    try:
        return PRESETS[head_dim]
    except (KeyError, TypeError):
        from ..errors import ScheduleError

        raise ScheduleError(f"no built-in schedule for head dim {head_dim!r}; b200c supports 64, 128 and 256") from None

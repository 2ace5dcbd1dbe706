"""FlashAttention-4's own knobs (its 1-CTA sm_100a forward kernel, BF16, D=128,
flash-attn-4 4.0.0b36), as far as this schedule language expresses them:
tiles 128 x 128, two Q stages, three K/V stages of one 32 KB tile each, the
software exp2 on 16 of every 128 columns (2 of every 16), the rescale
threshold 8.0 (log2 units), register budgets 192 / 80 / 48, a static persistent
scheduler, 16 warps, TMEM S0 0, S1 128, P aliased in S, O0 256, O1 384, and S
read 32 columns per TMEM load.

Not expressed: FA4's epilogue warp, which stores O by TMA. Here the correction
warps store O themselves and the 16th and 15th warps are idle (FA4: epilogue,
load, one idle). scripts/fa4_loops.py prints this schedule's steady-state SASS
loops next to FA4's (rebuilt from its public package without a GPU).
"""
from pathlib import Path

import b200c

stage18 = b200c.load_schedule_file(Path(__file__).parents[1] / "18_tma_l2_promotion.py")

schedule = stage18.replace(
    name="fa4_knobs",
    kv_stages=3, sw_exp2_per16=2, rescale_threshold=8.0,
    softmax_regs=192, correction_regs=80, other_regs=48,
    persistent=True, s_load_cols=32,
)

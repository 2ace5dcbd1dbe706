"""Variant of stage 18 with the blog's software-exp2 split: 4 of every 16 P
columns on the FMA pipes (stage 9 uses FlashAttention-4's 2 of 16)."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "18_tma_l2_promotion.py").replace(
    name="sw_exp2_4of16", sw_exp2_per16=4)

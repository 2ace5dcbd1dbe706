"""Variant of stage 18: half of every 16 P columns through the software exp2."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "18_tma_l2_promotion.py").replace(
    name="sw_exp2_half", sw_exp2_per16=8)

"""Variant of stage 18 for head dim 64: two Q stages (S 128 + O 64 TMEM columns
each) and a four-slot K/V ring of 16 KiB tiles."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "18_tma_l2_promotion.py").replace(
    name="hdim64", head_dim=64, kv_stages=4)

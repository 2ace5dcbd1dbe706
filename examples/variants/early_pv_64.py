"""Variant of stage 18: S cache of 64 columns and PV on the first 64 P columns
(the blog notes the 96/32 split is not fundamental)."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "18_tma_l2_promotion.py").replace(
    name="early_pv_64", s_cache_cols=64, early_pv_cols=64)

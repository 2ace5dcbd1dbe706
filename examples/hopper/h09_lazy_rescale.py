"""Hopper stage 9 — lazy rescale (blog ch.11): the running row max is rebased,
and O and the row sums rescaled, only when a tile's max exceeds it by >= 8
log2 units; a warp skips the O rescale when none of its rows rebased (P may
reach 2^8, still exact enough in FP32 and BF16). The software exp2 split of
stage 8 is dropped again (every exponential on MUFU.EX2), see stage 8."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h08_exp2_split.py"))

schedule = prev.replace(name="hopper_lazy_rescale", blog_stage=9, rescale_threshold=8.0, sw_exp2_per16=0)

"""Hopper stage 3 — two consumer warpgroups: a 128-row CTA tile (two Q stages
of 64 rows) shares every K/V tile, halving the K/V traffic per FLOP. At 384
threads ptxas allots 168 registers per thread, too few for S + P + O, so the
warpgroups trade registers with setmaxnreg: consumers 240, producer 24
(24*128 + 240*256 = 168*384, FA3)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h02_warp_specialization.py"))

schedule = prev.replace(name="hopper_two_consumers", blog_stage=3, q_stages=2, softmax_regs=240, other_regs=24)

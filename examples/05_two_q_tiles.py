"""Blog stage 5 — two Q tiles: one CTA holds Q0 and Q1 and reuses every K/V tile
for both; per-stage S/P and O use all 512 TMEM columns; warps 0-3 and 4-7 do
the softmax of Q0 and Q1, warp 8 loads, warp 9 issues MMAs in the order
Q0K(i) Q1K(i) P0V(i) P1V(i)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("04_warp_specialization.py"))

schedule = prev.replace(name="two_q_tiles", blog_stage=5, q_stages=2)

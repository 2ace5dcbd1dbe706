"""Blog stage 4 — warp specialization: 4 softmax (row) warps, 1 load warp, 1 MMA
warp; only the partners of each hand-off synchronize."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("03_swizzle.py"))

schedule = prev.replace(name="warp_specialization", blog_stage=4, warp_specialized=True)

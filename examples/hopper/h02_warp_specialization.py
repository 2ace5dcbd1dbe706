"""Hopper stage 2 — warp specialization (FA3 §3): a producer warpgroup whose
warp 0 issues every TMA load, and one consumer warpgroup that only computes.
K and V become separate tokens of a one-slot ring, so the producer can load
V(j) while the consumer computes S(j) and softmax(j)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h01_baseline.py"))

schedule = prev.replace(name="hopper_warp_specialization", blog_stage=2, warp_specialized=True,
                        kv_tokens="separate")

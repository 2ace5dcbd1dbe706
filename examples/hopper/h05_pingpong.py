"""Hopper stage 5 — ping-pong (FA3 §3.1): the two consumer warpgroups take
turns issuing their GEMMs (named barriers turn[0], turn[1]), so the tensor
core runs one warpgroup's GEMMs while the other does its softmax."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h04_kv_pipeline.py"))

schedule = prev.replace(name="hopper_pingpong", blog_stage=5, pingpong=True)

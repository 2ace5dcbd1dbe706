"""Hopper stage 4 — K/V pipeline: a 4-slot ring, so the producer runs up to
two K/V tiles ahead of the consumers (each slot is released by every
consumer warp once the wgmma that read it completed)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h03_two_consumers.py"))

schedule = prev.replace(name="hopper_kv_pipeline", blog_stage=4, kv_stages=4)

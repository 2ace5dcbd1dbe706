"""Hopper stage 11 — persistent kernel (blog ch.14): grid = #SMs, each CTA
strides over work items; barriers and the ping-pong turns carry across work
items, and the producer loads the next item's Q rows of consumer q once
that consumer's last QK of the previous item completed (q_free)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h10_block_n_176.py"))

schedule = prev.replace(name="hopper_persistent", blog_stage=11, persistent=True)

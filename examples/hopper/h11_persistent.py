"""Hopper stage 11 — persistent kernel (blog ch.14): grid = #SMs, each CTA
strides over work items; barriers and the ping-pong turns carry across work
items, and the producer loads the next item's Q rows of consumer q once
that consumer's last QK of the previous item completed (q_free)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h10_block_n_176.py"))

# the persistent producer keeps a work item's decomposition (rows, heads, K/V range) across its loop: at 24
# registers it spilled 16 bytes, so it takes 40 and the consumers 232 (128 x 40 + 256 x 232 = 64512 registers,
# what the CTA is launched with: setmaxnreg only moves registers between warpgroups)
schedule = prev.replace(name="hopper_persistent", blog_stage=11, persistent=True, softmax_regs=232, other_regs=40)

"""Blog stage 11 — skip O rescale: rowmax and O are rebased only when the tile
max exceeds the kept rowmax by at least 8 (log2 units); the warp-collective O
pass runs only if a row of the warp rebased."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("10_register_caching.py"))

schedule = prev.replace(name="skip_o_rescale", blog_stage=11, rescale_threshold=8.0)

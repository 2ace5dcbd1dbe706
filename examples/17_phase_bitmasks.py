"""Minor optimization 17 — phase bitmasks: mbarrier phase bits of the load and
MMA warps live in integer bitmasks instead of runtime-indexed arrays."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("16_split_rowsum.py"))

schedule = prev.replace(name="phase_bitmasks", blog_stage=17, phase_tracking="bitmask")

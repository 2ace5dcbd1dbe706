"""Minor optimization 18 — TMA L2 promotion: the tensor maps ask for 256-byte L2
promotion; the kernel body does not change."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("17_phase_bitmasks.py"))

schedule = prev.replace(name="tma_l2_promotion", blog_stage=18, tma_l2_promotion="256B")

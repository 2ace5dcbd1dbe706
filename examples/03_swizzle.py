"""Blog stage 3 — swizzling: Q/K (K-major) and V (MN-major) tiles in SMEM use the
128-byte swizzle; TMA maps and MMA descriptors agree."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("02_p_in_tmem.py"))

schedule = prev.replace(name="swizzle", blog_stage=3, swizzle="128B")

"""Blog stage 9 — software exp2: the last 4 of every 16 P columns use a cubic
polynomial exp2 on the FMA pipes (packed f32x2 on sm_100), the other 12 MUFU."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("08_hardware_exp2.py"))

schedule = prev.replace(name="software_exp2", blog_stage=9, sw_exp2_per16=4)

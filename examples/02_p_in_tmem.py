"""Blog stage 2 — P in TMEM: packed BF16 P overwrites consumed S columns and
PV reads its A operand from TMEM."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("01_baseline.py"))

schedule = prev.replace(name="p_in_tmem", blog_stage=2, p_storage="tmem")

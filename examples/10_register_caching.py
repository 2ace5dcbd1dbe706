"""Blog stage 10 — register caching: the rowmax pass keeps the high 96 S columns
in registers; P is produced high to low into the upper half of the S columns
and only the low 32 S columns are read again."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("09_software_exp2.py"))

schedule = prev.replace(name="register_caching", blog_stage=10, s_cache_cols=96)

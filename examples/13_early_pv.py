"""Blog stage 13 — early PV: PV starts on the high 96 P columns as soon as they
and O are ready; the low 32 columns follow when the softmax finishes them."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("12_split_correction.py"))

schedule = prev.replace(name="early_pv", blog_stage=13, early_pv_cols=96)

"""Blog stage 8 — hardware exp2: the softmax scale is folded with log2(e), rowmax
is kept in log2 units and P uses ex2.approx.ftz directly (no __expf wrapper)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("07_compute_pipeline.py"))

schedule = prev.replace(name="hardware_exp2", blog_stage=8, exp2="ex2.approx.ftz", f32x2=True)

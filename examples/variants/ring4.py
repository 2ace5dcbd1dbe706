"""Variant of stage 7: a 4-slot K/V ring (one more token in flight)."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "07_compute_pipeline.py").replace(
    name="ring4", kv_stages=4)

"""Minor optimization 16 — split rowsum: the 96 cached P columns accumulate into
two partial sums, the 32 re-read ones into a scalar sum, combined once."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("15_wide_deferred_score_loads.py"))

schedule = prev.replace(name="split_rowsum", blog_stage=16, split_rowsum=True)

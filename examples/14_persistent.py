"""Blog stage 14 — persistent: grid = #SMs, each CTA strides over work items;
barriers keep cycling phases across work items and the load warp refills Q
after q_free (the last QK of the previous work item)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("13_early_pv.py"))

schedule = prev.replace(name="persistent", blog_stage=14, persistent=True)

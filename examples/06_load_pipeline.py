"""Blog stage 6 — load pipeline: K and V are separate tokens in one ring of 3
SMEM slots; a K token is released after the last QK that reads it, a V token
after the last PV."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("05_two_q_tiles.py"))

schedule = prev.replace(name="load_pipeline", blog_stage=6, kv_tokens="separate", kv_stages=3)

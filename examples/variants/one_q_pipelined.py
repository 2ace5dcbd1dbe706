"""Variant of stage 6 with one Q stage and the ch.7 pipelined order: QK(i+1)
issued right after PV(i)."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "06_load_pipeline.py").replace(
    name="one_q_pipelined", q_stages=1, issue_order="P0V(i) Q0K(i+1)")

"""Blog stage 7 — compute pipeline: QqK(i+1) is issued right after PqV(i), so the
softmax of Q0 for the next tile overlaps P1V(i); the compiler peels Q0K(0)
Q1K(0) into a prologue and drains P0V(n-1) P1V(n-1) in an epilogue."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("06_load_pipeline.py"))

schedule = prev.replace(name="compute_pipeline", blog_stage=7, issue_order="P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)")

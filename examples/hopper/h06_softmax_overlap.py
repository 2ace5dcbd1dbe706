"""Hopper stage 6 — softmax/QK overlap inside a warpgroup (FA3 §3.2): the
issue order runs QK one tile ahead, "Q0K(i+1) P0V(i)": each iteration issues
QK(i+1) and PV(i), waits for QK(i+1) only, and runs softmax(i+1) while PV(i)
is still on the tensor core. The producer loads K(i+1) before V(i), the
order of first use."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h05_pingpong.py"))

schedule = prev.replace(name="hopper_softmax_overlap", blog_stage=6,
                        issue_order="Q0K(i+1) P0V(i) Q1K(i+1) P1V(i)")

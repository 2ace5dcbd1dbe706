"""Hopper stage 7 — hardware exp2 (blog ch.8): the softmax scale is folded
into log2 units, so each P is one FFMA and one ex2.approx.ftz (MUFU.EX2)
instead of __expf's extra multiply."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h06_softmax_overlap.py"))

schedule = prev.replace(name="hopper_exp2", blog_stage=7, exp2="ex2.approx.ftz")

"""Hopper stage 8 — exp2 split (blog ch.9): 4 of every 16 exponentials run as a
cubic polynomial on the FMA pipe instead of MUFU.EX2. On the B200 this
relieves the MUFU; on Hopper the prototype measured it slower (fa3_n128_sw4:
556-566 TFLOPS vs 633-641 without, H200): a 64-row warpgroup's softmax is
bound by instruction issue, not by MUFU throughput, and the polynomial costs
about 8 issue slots per value. Stage 9 goes back to MUFU for every value."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("h07_exp2.py"))

schedule = prev.replace(name="hopper_exp2_split", blog_stage=8, sw_exp2_per16=4)

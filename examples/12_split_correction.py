"""Blog stage 12 — split correction from softmax: 4 correction warps rescale O
from factors the softmax warps publish in SMEM (and store the output); PV waits
for P ready (4 softmax arrivals) and O safe (4 correction arrivals). With 16
warps, setmaxnreg gives softmax 192, correction 80, load/MMA 48 registers."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("11_skip_o_rescale.py"))

schedule = prev.replace(name="split_correction", blog_stage=12, correction_warps=4, softmax_regs=192, correction_regs=80, other_regs=48)

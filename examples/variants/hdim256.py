"""Variant of stage 18 for head dim 256: one Q stage (S 128 + O 256 TMEM columns
per stage; two would need 768 of 512), a two-slot K/V ring (64 KiB tiles), and
register budgets for three warpgroups (softmax, correction, load/MMA)."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "18_tma_l2_promotion.py").replace(
    name="hdim256", head_dim=256, q_stages=1, kv_stages=2, issue_order="P0V(i) Q0K(i+1)",
    softmax_regs=224, correction_regs=232, other_regs=48)
# 128 x (224 + 232 + 48) = 64512 registers: what 384 threads are launched with (setmaxnreg only moves registers
# between warpgroups; with softmax_regs=232 the sum, 65536, exceeded it and an .inc would wait forever on hardware)

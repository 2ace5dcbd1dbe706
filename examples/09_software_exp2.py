"""Blog stage 9 — software exp2: the last 2 of every 16 P columns use a cubic
polynomial exp2 on the FMA pipes (packed f32x2 on sm_100), the other 14 MUFU.

The blog splits 4 of 16 (25%, "determined experimentally, not a hard
requirement"); b200c uses FlashAttention-4's 1-CTA split (16 of 128 columns):
with the packed polynomial at 10 instructions per column pair, the blog's split
puts stage 18's softmax loop at 576 static instructions per K/V tile, over
FA4's 519 (examples/variants/sw_exp2_4of16.py keeps the blog's split)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("08_hardware_exp2.py"))

schedule = prev.replace(name="software_exp2", blog_stage=9, sw_exp2_per16=2)

"""Minor optimization 15 — deferred score acquisition: the rowmax pass uses 8
tcgen05.ld.x16 with no wait after each, 4 independent rowmax chains of 3-input
max (FMNMX3) and one deferred tcgen05.wait::ld before P overwrites S; the
correction warps rescale O in x32 TMEM loads/stores (one wait per 32 columns)."""
from pathlib import Path

import b200c

prev = b200c.load_schedule_file(Path(__file__).with_name("14_persistent.py"))

schedule = prev.replace(name="wide_deferred_score_loads", blog_stage=15, s_load_cols=16, deferred_s_wait=True,
                       rowmax_chains=4, rowmax_max3=True, o_load_cols=32)

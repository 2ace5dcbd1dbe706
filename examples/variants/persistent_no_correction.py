"""Variant of stage 11 made persistent without correction warps: the softmax
warps rescale O and store the output themselves."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "11_skip_o_rescale.py").replace(
    name="persistent_no_correction", persistent=True)

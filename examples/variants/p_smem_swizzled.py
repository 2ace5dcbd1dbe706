"""Variant of stage 3 with P back in SMEM: the P tile is written K-major with
the 128-byte swizzle, like K."""
from pathlib import Path

import b200c

schedule = b200c.load_schedule_file(Path(__file__).parents[1] / "03_swizzle.py").replace(
    name="p_smem_swizzled", p_storage="smem")

"""Small IR pieces shared by roles."""
from __future__ import annotations

from ..ir import SetMaxNReg


def setmaxnreg(lw, regs):
    """setmaxnreg for a role's warpgroup, inc or dec against the entry count."""
    from ...dsl.resources import entry_registers

    if regs is None:
        return ()
    entry = entry_registers(lw.s)
    if regs == entry:
        return ()
    return (SetMaxNReg(regs, inc=regs > entry),)


def q_buf(q: int) -> str:
    """SMEM offset expression of Q stage q's tile."""
    return "SMEM_Q" if q == 0 else f"SMEM_Q + {q} * TILE_BYTES"


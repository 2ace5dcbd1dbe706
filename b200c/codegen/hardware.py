"""Hardware limits of the GPUs b200c generates for (facts, not layout).

Sources (docs/sm100-facts.md): §1 TMEM is 512 columns x 128 lanes per SM,
allocated in powers of 2 from 32 columns; §8 setmaxnreg takes a multiple of 8 in
24..256 and draws on a 65536-register pool per CTA; §11 232448 B of opt-in
dynamic SMEM per CTA (CUTLASS ``sm100_smem_capacity_bytes``; the H200 allows the
same), 1024 threads per CTA, at most 255 registers per thread.
"""
from __future__ import annotations

import msgspec


class Limits(msgspec.Struct, frozen=True):
    """Per-CTA budgets of one GPU architecture.

    Attributes:
        arch: ``"sm_100a"`` (B200) or ``"sm_90a"`` (H100/H200).
        smem_bytes: opt-in dynamic shared memory per CTA, bytes.
        max_threads: threads per CTA.
        register_pool: 32-bit registers per CTA (setmaxnreg budgets draw on it).
        max_regs_per_thread: registers per thread.
        tmem_columns: Tensor Memory columns per SM (0: no TMEM).
        smem_align_slack: bytes added to the dynamic SMEM request because the
            kernel realigns its base to 1024 B (128B-swizzled tiles).
    """

    arch: str
    smem_bytes: int = 232448
    max_threads: int = 1024
    register_pool: int = 65536
    max_regs_per_thread: int = 255
    tmem_columns: int = 0
    smem_align_slack: int = 1024

    def setmaxnreg_pool(self, threads: int) -> int:
        """Registers the warpgroups' setmaxnreg budgets share: what the CTA was launched with
        (``threads`` x :meth:`entry_registers`), at most the register file. ``setmaxnreg.inc`` takes
        registers only from those other warpgroups released with ``.dec`` (PTX 9.7.19.5): a sum above
        the launch allocation makes an ``.inc`` wait forever (measured on the H200: 128 x 32 + 256 x 240
        = 65536 > 384 x 168 = 64512 hung every launch; FA3's 24 / 240 is exactly 64512)."""
        return min(self.register_pool, threads * self.entry_registers(threads))

    def entry_registers(self, threads: int) -> int:
        """Registers per thread at kernel entry under ``__launch_bounds__(threads, 1)``.

        Each of the SM's 4 sub-partitions holds a quarter of the register pool
        and ceil(warps / 4) of the CTA's warps, so the cap is that quarter over
        the busiest sub-partition's threads, rounded down to a multiple of 8, at
        most ``max_regs_per_thread``: ptxas gives 255 up to 256 threads, 168 at
        320 and 384, 128 at 512, 64 at 1024 (docs/sm100-facts.md §11)."""
        warps_per_subpartition = -(-threads // 32 // 4)
        per_thread = self.register_pool // 4 // (32 * warps_per_subpartition)
        return min(self.max_regs_per_thread, per_thread // 8 * 8)


SM100 = Limits("sm_100a", tmem_columns=512)
SM90 = Limits("sm_90a")


def tmem_alloc_columns(need: int) -> int:
    """Columns passed to ``tcgen05.alloc`` for ``need`` used columns: the next
    power of 2 in [32, 512] (PTX ISA 9.7.16.7.1)."""
    n = 32
    while n < need:
        n *= 2
    return n

"""The tile shape of one attention kernel: one object instead of literals."""
from __future__ import annotations

import msgspec


class TileShape(msgspec.Struct, frozen=True):
    """Tile of one Q stage and one K/V iteration (blog ch.1: 128 x 128 tiles).

    Attributes:
        block_m: Q rows per Q stage (MMA M; TMEM lanes on sm_100a).
        block_n: K/V rows per K/V tile (S/P columns).
        head_dim: D (QK reduction, PV output width).
        elem_bytes: bytes per Q/K/V/O element (2: BF16).
        mma_k: reduction depth of one MMA instruction (16 for BF16, PTX ISA
            9.7.16.2.1 Table 39 / 9.7.15.5.1).
    """

    block_m: int = 128
    block_n: int = 128
    head_dim: int = 128
    elem_bytes: int = 2
    mma_k: int = 16

    @property
    def q_tile_bytes(self) -> int:
        """Bytes of one Q tile (block_m x head_dim)."""
        return self.block_m * self.head_dim * self.elem_bytes

    @property
    def k_tile_bytes(self) -> int:
        """Bytes of one K tile (block_n x head_dim)."""
        return self.block_n * self.head_dim * self.elem_bytes

    @property
    def v_tile_bytes(self) -> int:
        """Bytes of one V tile (block_n x head_dim)."""
        return self.block_n * self.head_dim * self.elem_bytes

    def tile_bytes(self, tensor: str) -> int:
        """Bytes of one tile of ``tensor`` (``"q"``, ``"k"`` or ``"v"``)."""
        return {"q": self.q_tile_bytes, "k": self.k_tile_bytes, "v": self.v_tile_bytes}[tensor]

    @property
    def qk_k_steps(self) -> int:
        """MMAs per QK^T (reduction over head_dim)."""
        return self.head_dim // self.mma_k

    @property
    def pv_k_steps(self) -> int:
        """MMAs per PV (reduction over block_n)."""
        return self.block_n // self.mma_k

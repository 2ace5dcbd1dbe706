"""wgmma operand descriptors and TMA boxes of the sm_90a backend.

PTX ISA 9.0, 9.7.15.5.1.2 (shared-memory matrix layouts and the matrix
descriptor). Every tile is loaded by TMA as D/64 boxes of ``rows x 64``
BF16 columns (128 B per row) with 128B swizzle, boxes stacked in SMEM, so a
tile is ``head_dim / 64`` column chunks of ``rows x 128`` bytes, each made of
8-row, 1024-byte swizzle atoms (1024-B aligned: base offset 0).

* S = Q K^T (SS wgmma, both K-major): SBO = 1024 B (the next 8 rows), LBO
  unused for swizzled K-major layouts ("assumed 1"; 16 is written). K-step kk
  (16 columns of D) starts ``(kk // 4) * rows * 128 + (kk % 4) * 32`` bytes
  into the tile: chunk kk // 4, 32-byte column offset inside the 128-byte row
  (the hardware applies the swizzle to the full address).
* O += P V (RS wgmma, B = V N-major, ``imm-trans-b = 1``): LBO = block_n * 128 B
  (the next 64 columns of D: the next chunk), SBO = 1024 B (the next 8 K/V
  rows); K-step kk (16 K/V rows) starts ``kk * 2048`` bytes in.
* P needs no data movement: the FP32 accumulator fragment of S columns
  [16 kk, 16 kk + 16), packed pairwise to bf16x2, is the m64k16 A fragment
  (9.7.15.5.1.1.1), registers 4 kk .. 4 kk + 3 of the packed P.
"""
from __future__ import annotations

import msgspec

from ..plan import TmaBoxes
from ..tile import TileShape

SW128_ATOM = 1024  # bytes of one 8-row x 128-B swizzle atom


class WgmmaDescriptors(msgspec.Struct, frozen=True):
    """Constants of the wgmma descriptors (bytes) and k-step offsets (C expressions of ``kk``).

    Attributes:
        k_lbo, k_sbo: LBO/SBO of the K-major Q and K tiles.
        v_lbo, v_sbo: LBO/SBO of the N-major V tile.
        q_step, k_step, v_step: byte offset of k-step ``kk`` in the Q, K and V tiles.
        qk_k_steps, pv_k_steps: wgmmas per QK (head_dim / 16) and per PV (block_n / 16).
    """

    k_lbo: int
    k_sbo: int
    v_lbo: int
    v_sbo: int
    q_step: str
    k_step: str
    v_step: str
    qk_k_steps: int
    pv_k_steps: int


def descriptors(tile: TileShape) -> WgmmaDescriptors:
    """Descriptor constants of a tile shape (module docstring)."""
    return WgmmaDescriptors(
        k_lbo=16,
        k_sbo=SW128_ATOM,
        v_lbo=tile.block_n * 128,
        v_sbo=SW128_ATOM,
        q_step=f"(kk / 4) * {tile.block_m * 128} + (kk % 4) * 32",
        k_step=f"(kk / 4) * {tile.block_n * 128} + (kk % 4) * 32",
        v_step="kk * 2048",
        qk_k_steps=tile.qk_k_steps,
        pv_k_steps=tile.pv_k_steps,
    )


def tma_boxes(tile: TileShape, rows: int, l2_promotion: str) -> TmaBoxes:
    """128B-swizzled boxes of 64 columns x ``rows`` rows (Q: block_m, K/V: block_n)."""
    return TmaBoxes(inner=64, rows=rows, slices=tile.head_dim // 64, slice_bytes=rows * 128, swizzle="128B",
                    l2_promotion=l2_promotion)

"""Operand constants of tcgen05.mma kind::f16 for the plan's tiles: SMEM matrix
descriptors (LBO/SBO/swizzle, K-step offsets), instruction descriptors, and
the TMA boxes that write those layouts (docs/sm100-facts.md §3, §4, §6)."""
from __future__ import annotations

import msgspec

from ..plan import TmaBoxes
from ..tile import TileShape


def idesc_f16(m: int, n: int, a_mn_major: bool, b_mn_major: bool) -> int:
    """Instruction descriptor of tcgen05.mma kind::f16, BF16 x BF16 -> FP32
    (PTX ISA 9.7.16.4.2 Table 42; docs/sm100-facts.md §4): D format bits 4-5 = 1
    (F32), A/B format bits 7-9 / 10-12 = 1 (BF16), transpose bits 15/16,
    N >> 3 at bit 17, M >> 4 at bit 24."""
    return (1 << 4) | (1 << 7) | (1 << 10) | (int(a_mn_major) << 15) | (int(b_mn_major) << 16) | \
        ((n >> 3) << 17) | ((m >> 4) << 24)


class Descriptors(msgspec.Struct, frozen=True):
    """SMEM-descriptor and instruction-descriptor constants of one plan.

    Attributes:
        swizzle: ``"none"`` or ``"128B"``; ``swizzle_code`` its descriptor bits 61-63.
        k_lbo, k_sbo: LBO/SBO (bytes) of the K-major Q, K (and SMEM P) tiles.
        mn_lbo, mn_sbo: LBO/SBO of the MN-major V tile.
        k_step, mn_step: C expressions of the byte offset of MMA k-step ``kk``
            inside a K-major tile / the MN-major V tile.
        k_offset: C expression of the byte offset of the 16-B chunk
            (``row``, 8 columns from ``col``) of a K-major tile (P in SMEM).
        idesc_qk, idesc_pv: instruction descriptors of QK^T and PV.
        p_in_smem: P is written to SMEM as a K-major tile (blog ch.1).
    """

    swizzle: str
    swizzle_code: int
    k_lbo: int
    k_sbo: int
    mn_lbo: int
    mn_sbo: int
    k_step: str
    mn_step: str
    k_offset: str
    idesc_qk: int
    idesc_pv: int
    p_in_smem: bool


def descriptors(tile: TileShape, swizzle: str, p_in_smem: bool) -> Descriptors:
    """Canonical-layout constants matching the TMA slices (docs/sm100-facts.md §3).

    No swizzle: TMA writes slices of [rows][8 columns] (rows x 16 B each); a
    K-major core matrix is 8 rows x 16 B, so SBO (8-row step) = 128 and LBO
    (next 8 columns) = rows * 16; one K=16 step spans two slices. V is MN-major:
    LBO (next 8 K rows) = 128, SBO (next 8 N columns) = rows * 16, and a K step
    is 16 rows (+256 B).
    128B swizzle: slices of [rows][64 columns] (rows * 128 B each); K-major
    SBO = 1024 (8 rows of 128 B), LBO unused (16), K step +32 B inside a row and
    +1 slice every 4 steps; V MN-major LBO = one slice (next 64 N columns),
    SBO = 1024 (next 8 K rows), K step +2048 B.
    """
    rows = tile.block_m
    if swizzle == "128B":
        slice_bytes = rows * 128
        return Descriptors(
            swizzle, 2, 16, 1024, slice_bytes, 1024,
            k_step=f"(uint32_t)(kk / 4) * {slice_bytes}u + (uint32_t)(kk % 4) * 32u",
            mn_step="(uint32_t)kk * 2048u",
            k_offset=f"(uint32_t)(col / 64) * {slice_bytes}u + row * 128u + ((((uint32_t)(col % 64) / 8u) ^ (row % 8u)) * 16u)",
            idesc_qk=idesc_f16(tile.block_m, tile.block_n, False, False),
            idesc_pv=idesc_f16(tile.block_m, tile.head_dim, False, True),
            p_in_smem=p_in_smem,
        )
    slice_bytes = rows * 16
    return Descriptors(
        swizzle, 0, slice_bytes, 128, 128, slice_bytes,
        k_step=f"(uint32_t)kk * {2 * slice_bytes}u",
        mn_step="(uint32_t)kk * 256u",
        k_offset=f"(uint32_t)(col / 8) * {slice_bytes}u + row * 16u",
        idesc_qk=idesc_f16(tile.block_m, tile.block_n, False, False),
        idesc_pv=idesc_f16(tile.block_m, tile.head_dim, False, True),
        p_in_smem=p_in_smem,
    )


def tma_boxes(tile: TileShape, swizzle: str, l2_promotion: str) -> TmaBoxes:
    """TMA boxes of one tile: 64-column boxes (one 128-B swizzle row) with 128B
    swizzle, 8-column boxes (one 16-B core-matrix column) without."""
    inner = 64 if swizzle == "128B" else 8
    return TmaBoxes(inner=inner, rows=tile.block_m, slices=tile.head_dim // inner,
                    slice_bytes=tile.block_m * inner * tile.elem_bytes, swizzle=swizzle, l2_promotion=l2_promotion)

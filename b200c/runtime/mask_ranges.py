"""The block mask of a boolean mask tensor in one kernel launch (``b200c_block_mask_ranges``).

torch SDPA's boolean ``attn_mask`` is a new tensor per forward (transformers makes a (B, 1, 1, S_kv)
mask for every decoding step), so its block mask is computed per call. With torch ops
(:func:`b200c.runtime.block_mask.tensor_ranges`) that is about 30 small kernels, each a launch from the
host: measured on the H200 in transformers' decoding step (batch 1, 32K keys), 634 us per step with the
mask against 432 without it. Every module whose kernel takes a block mask also holds
``b200c_block_mask_ranges`` (``b200c/codegen/templates/work.cuh.j2``), which reads the mask once and
writes the same ``(kv_lo, full_lo, full_hi, kv_hi)`` rows: :func:`launch` computes its arguments and
enqueues it on the current stream. ``tensor_ranges`` stays the model the GPU tests compare it with, and
the path for what this kernel does not take (another device current, more K/V tiles than its shared
memory holds, no such kernel in the module).
"""
from __future__ import annotations

import torch

from ..codegen.mod_kernel import BLOCK_MASK_MAX_THREADS, BLOCK_MASK_MAX_TILES, block_mask_params
from .params import ParamBlock

_SPEC = tuple((p.name, p.kind) for p in block_mask_params())


def values(mask: torch.Tensor, work, *, batch: int, heads: int, seq_q: int, seq_kv: int,
           pack_heads: bool = False) -> tuple[dict, int, int, int]:
    """The kernel's parameter values for ``mask`` (pointers of ``mask`` and ``ranges`` left 0), its grid,
    threads per CTA and dynamic shared memory bytes.

    Args:
        mask: bool, 4-D, each dimension 1 or (B, H, S_q, S_kv)'s (checked by the caller,
            :func:`b200c.runtime.block_mask.tensor_ranges`'s rule); a dimension expanded with stride 0 is
            read at index 0.
        work: the kernel's :class:`~b200c.codegen.work.WorkDecomposition`.
        batch, heads, seq_q, seq_kv, pack_heads: the call's (``seq_kv`` > 0).
    """
    bm, bn, qs = work.block_m, work.block_n, work.q_stages
    hu = qs if pack_heads else 1
    ru = bm if pack_heads else qs * bm
    q_groups = work.q_groups(seq_q, pack_heads)
    head_groups = heads // hu
    n_kv = -(-seq_kv // bn)
    ext = [1 if (n == 1 or st == 0) else n for n, st in zip(mask.shape, mask.stride())]
    strides = [0 if e == 1 else st for e, st in zip(ext, mask.stride())]
    lead_b = batch if ext[0] > 1 else 1
    lead_h = head_groups if ext[1] > 1 else 1
    lead_g = q_groups if ext[2] > 1 else 1
    # a lane reads 16 keys at once where the keys are contiguous and each row the kernel reads starts on a
    # 16-byte boundary (tiles start at multiples of block_n, a multiple of 16)
    vec16 = int(strides[3] == 1 and mask.data_ptr() % 16 == 0 and bn % 16 == 0
                and all(s % 16 == 0 for s in strides[:3]))
    vals = {"mask": 0, "stride_b": strides[0], "stride_h": strides[1], "stride_q": strides[2],
            "stride_k": strides[3], "ranges": 0, "batch": batch, "head_groups": head_groups, "q_groups": q_groups,
            "lead_b": lead_b, "lead_h": lead_h, "lead_g": lead_g, "heads_per_item": hu, "rows_per_item": ru,
            "mask_heads": ext[1], "mask_rows": ext[2], "seq_q": seq_q, "seq_kv": seq_kv, "n_kv": n_kv,
            "vec16": vec16}
    threads = min(BLOCK_MASK_MAX_THREADS, 32 * n_kv)
    return vals, lead_b * lead_h * lead_g, threads, n_kv


def usable(lk, work, seq_kv: int, device: torch.device) -> bool:
    """Whether the loaded kernel ``lk`` can compute a mask tensor's block mask on ``device`` now: its module
    holds the kernel, the device is PyTorch's current one (the launch binds ``lk``'s context, which must
    not change PyTorch's current device) and its K/V tiles fit the kernel's shared memory."""
    from .launcher import _current_device

    return (getattr(lk, "block_mask", None) is not None and device.type == "cuda"
            and device.index == _current_device() and 0 < -(-seq_kv // work.block_n) <= BLOCK_MASK_MAX_TILES)


def launch(lk, mask: torch.Tensor, work, *, batch: int, heads: int, seq_q: int, seq_kv: int,
           pack_heads: bool = False) -> torch.Tensor:
    """Enqueue ``b200c_block_mask_ranges`` on PyTorch's current stream and return its int32
    ``(num_items, 4)`` result (the values of :func:`b200c.runtime.block_mask.tensor_ranges`, on the mask's
    device; check :func:`usable` first).

    Raises:
        DriverError: the launch failed.
    """
    from . import driver
    from .launcher import _bound, _get_raw_stream

    num_items = work.num_work(batch, heads, seq_q, pack_heads)
    ranges = torch.empty((num_items, 4), dtype=torch.int32, device=mask.device)
    vals, grid, threads, smem = values(mask, work, batch=batch, heads=heads, seq_q=seq_q, seq_kv=seq_kv,
                                       pack_heads=pack_heads)
    vals["mask"] = mask.data_ptr()
    vals["ranges"] = ranges.data_ptr()
    block = ParamBlock(_SPEC, vals)
    cu = driver._cu()
    if getattr(_bound, "ctx", None) is not lk.context:
        driver._check(cu.cuCtxSetCurrent(lk.context), "cuCtxSetCurrent")
        _bound.ctx = lk.context
    (err,) = cu.cuLaunchKernel(lk.block_mask, grid, 1, 1, threads, 1, 1, smem, _get_raw_stream(lk.device),
                               block.array_addr, 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        from ..errors import DriverError

        raise DriverError(f"cuLaunchKernel (block mask of the attn_mask tensor, grid {grid}, block {threads}) of "
                          f"{lk.built.launch.name!r} failed: {driver._err_name(err)}")
    return ranges


__all__ = ["launch", "usable", "values"]

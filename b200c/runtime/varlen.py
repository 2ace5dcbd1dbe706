"""Variable-length (packed) attention: validation and cached launches.

The convention of FlashAttention's ``flash_attn_varlen_func``: q is
``(total_q, H, D)``, k and v ``(total_kv, H_kv, D)``; sequence ``b`` owns
q rows ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` and k/v rows
``cu_seqlens_k[b]:cu_seqlens_k[b + 1]`` (int32 prefix sums on q's device,
B + 1 entries); ``max_seqlen_q`` / ``max_seqlen_k`` bound the lengths. The
LSE is ``(H, total_q)``.

The kernel maps a packed tensor as one batch of ``total`` rows (tensor map
dims ``{D, total, H, 1}``, the logical ``(1, H, total, D)`` view of
:func:`as_bhsd`) and reads each sequence's offsets from ``cu_seqlens``;
``out_stride_b`` and ``lse_stride_b`` are 0.
"""
from __future__ import annotations

import operator

import torch

from ..errors import LaunchError
from . import inputs, launcher, work_order
from .inputs import Problem, check_grid, check_work_items

_MAX_INT32 = (1 << 31) - 1
_F32 = torch.float32
_NAMES = ("q", "k", "v")


def as_bhsd(t: torch.Tensor) -> torch.Tensor:
    """The logical (1, H, total, D) view of a packed (total, H, D) tensor (no copy)."""
    return t.transpose(0, 1).unsqueeze(0)


def seqlen_value(name: str, value) -> int:
    """``max_seqlen_q`` / ``max_seqlen_k`` as an int in [0, 2^31).

    Raises:
        LaunchError: not an integer (a bool, a float) or out of range.
    """
    if type(value) is int and 0 <= value <= _MAX_INT32:
        return value
    if isinstance(value, bool):
        raise LaunchError(f"{name}={value!r} must be an int (the longest sequence's length), not a bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise LaunchError(f"{name}={value!r} ({type(value).__name__}) must be an int (the longest sequence's length)") from None
    if not 0 <= n <= _MAX_INT32:
        raise LaunchError(f"{name}={n} must be in [0, 2^31)")
    return n


def validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, *,
                    check_device: bool = True, check_pointers: bool = True) -> Problem:
    """Check the tensors of a varlen call against every kernel rule (not the values of cu_seqlens).

    Args:
        q: (total_q, H, D) bfloat16. k, v: (total_kv, H_kv, D) bfloat16.
        cu_seqlens_q, cu_seqlens_k: int32, 1-D, B + 1 entries each, contiguous.
        max_seqlen_q, max_seqlen_k: ints (already checked by :func:`seqlen_value`).
        check_device: check that every tensor is on one CUDA device (the last rule).
        check_pointers: check ``data_ptr()`` alignment (off for fake tensors).

    Rules, in order: torch.Tensors; q, k, v bfloat16 and 3-D; same D; k and v
    the same shape; H a multiple of H_kv; D 64, 128 or 256; cu_seqlens int32,
    1-D, the same length >= 1, contiguous; totals < 2^31; the layout rules of
    :func:`b200c.runtime.inputs.validate_inputs` on the (1, H, total, D) views;
    then one CUDA device for all five tensors.

    Returns:
        Problem with batch B, seq_q/seq_kv the max lengths and total_q/total_kv.

    Raises:
        LaunchError: the first broken rule, naming tensor, rule and value.
    """
    inputs.check_tensor_types(q, k, v)
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor of int32, got {type(t).__name__}")
    ts = dict(zip(_NAMES, (q, k, v)))
    inputs._check_dtypes(ts)
    for name, t in ts.items():
        if t.dim() != 3:
            raise LaunchError(
                f"tensor {name} has {t.dim()} dims (shape {tuple(t.shape)}); varlen calls take 3-D packed "
                "(total_tokens, H, D) tensors"
            )
    for name in ("k", "v"):
        if ts[name].shape[2] != q.shape[2]:
            raise LaunchError(f"tensor {name} has head dim D = {ts[name].shape[2]} but q has {q.shape[2]}")
    if tuple(v.shape) != tuple(k.shape):
        raise LaunchError(f"tensor v has shape {tuple(v.shape)} but k has {tuple(k.shape)}; k and v must have the same shape")
    inputs._check_heads(int(q.shape[1]), int(k.shape[1]))
    inputs._check_head_dim(int(q.shape[2]))
    n = None
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if t.dtype != torch.int32:
            raise LaunchError(f"{name} has dtype {t.dtype}; it must be torch.int32 (FlashAttention's convention)")
        if t.dim() != 1 or t.shape[0] < 1:
            raise LaunchError(f"{name} has shape {tuple(t.shape)}; it must be 1-D with B + 1 >= 1 entries")
        if t.shape[0] > 1 and t.stride(0) != 1:
            raise LaunchError(f"{name} has stride {t.stride(0)}; it must be contiguous (call .contiguous())")
        if n is not None and t.shape[0] != n:
            raise LaunchError(
                f"cu_seqlens_k has {t.shape[0]} entries but cu_seqlens_q has {n}; both are B + 1 prefix sums"
            )
        n = t.shape[0]
    total_q, total_kv = int(q.shape[0]), int(k.shape[0])
    for name, total in (("q", total_q), ("k", total_kv)):
        if total > _MAX_INT32:
            raise LaunchError(f"tensor {name} has {total} rows; must be < 2^31")
    problem = Problem(int(n) - 1, int(q.shape[1]), int(k.shape[1]), max_seqlen_q, max_seqlen_k, int(q.shape[2]),
                      total_q, total_kv)
    if problem.needs_launch:
        for name, t in ts.items():
            inputs._check_layout(name, as_bhsd(t), check_pointers and not inputs._is_fake(t))
    if check_device:
        check_devices(q, k, v, cu_seqlens_q, cu_seqlens_k)
    return problem


def check_devices(q, k, v, cu_seqlens_q, cu_seqlens_k) -> None:
    """Raise LaunchError unless all five tensors are on one CUDA device."""
    inputs._check_devices(dict(zip(_NAMES, (q, k, v))))
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if t.device != q.device:
            raise LaunchError(f"{name} is on {t.device} but q is on {q.device}; put cu_seqlens on q's device")


def check_seqlens(cu_seqlens_q, cu_seqlens_k, problem: Problem) -> tuple[int, int]:
    """Check the values of cu_seqlens (one device-to-host copy: a sync on CUDA); return
    ``(cu_seqlens_q[0], cu_seqlens_q[-1])``, the query rows the sequences cover.

    Rules: each starts at >= 0, never decreases, ends at most at the tensor's
    row count (``total_q`` / ``total_kv``), and no sequence is longer than
    ``max_seqlen_q`` / ``max_seqlen_k``.

    Raises:
        LaunchError: naming the tensor, the entry and the values.
    """
    n = problem.batch + 1
    values = torch.cat((cu_seqlens_q, cu_seqlens_k)).tolist()
    for name, cu, total, limit, arg, rows in (
        ("cu_seqlens_q", values[:n], problem.total_q, problem.seq_q, "max_seqlen_q", "q"),
        ("cu_seqlens_k", values[n:], problem.total_kv, problem.seq_kv, "max_seqlen_k", "k"),
    ):
        if cu[0] < 0:
            raise LaunchError(f"{name}[0] = {cu[0]} is negative; prefix sums start at >= 0 (usually 0)")
        for b in range(n - 1):
            length = cu[b + 1] - cu[b]
            if length < 0:
                raise LaunchError(
                    f"{name}[{b + 1}] = {cu[b + 1]} < {name}[{b}] = {cu[b]}: sequence {b} would have a negative "
                    "length; cu_seqlens must not decrease"
                )
            if length > limit:
                raise LaunchError(
                    f"sequence {b} has {length} rows ({name}[{b + 1}] - {name}[{b}]) but {arg} = {limit}; "
                    f"pass {arg} >= the longest sequence"
                )
        if cu[-1] > total:
            raise LaunchError(
                f"{name}[{n - 1}] = {cu[-1]} but tensor {rows} has {total} rows; the sequences must lie inside it"
            )
    return values[0], values[n - 1]


def _capturing(t: torch.Tensor) -> bool:
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def run_varlen(token, target: str, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
               scale: float | None, source, causal: bool = False, return_lse: bool = False,
               check_values: bool = True, mod_call=None):
    """Varlen attention through the launch-entry cache; returns ``(out, lse)`` (lse None unless requested).

    Args: as :func:`b200c.attention_varlen` (validated here on a miss; ``scale``
    already checked), plus ``token``/``source`` as :func:`b200c.runtime.launcher.run`.
    ``check_values``: check cu_seqlens' values before the launch (a sync;
    skipped while a CUDA graph is being captured); query rows outside every
    sequence are then set to 0 (LSE -inf). Unchecked, those rows are
    unspecified and wrong cu_seqlens are undefined behaviour. ``mod_call``: a
    :class:`b200c.runtime.mod_call.ModCall` (the token's kernel has mods; q_idx / kv_idx are
    positions within each sequence, b the sequence).

    Raises:
        LaunchError, UnsupportedDeviceError, BuildError, ScheduleError,
        ResourceError, BarrierTimeoutError: as :func:`b200c.attention_varlen`.
    """
    key = ("varlen", token, target, causal, return_lse, max_seqlen_q, max_seqlen_k, q.data_ptr(), k.data_ptr(),
           v.data_ptr(), cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr(), q.shape, k.shape, v.shape,
           cu_seqlens_q.shape, cu_seqlens_k.shape, q.stride(), k.stride(), v.stride(), cu_seqlens_q.stride(),
           q.dtype, k.dtype, v.dtype, cu_seqlens_q.dtype, cu_seqlens_k.dtype, q.get_device(),
           cu_seqlens_q.get_device(), cu_seqlens_k.get_device())
    e = launcher._entries.get(key)
    if e is None:
        e = _new_entry(key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, source, causal,
                       return_lse)
    covered = None
    if check_values and not _capturing(q):
        problem = e.problem if isinstance(e, launcher.Entry) else e
        covered = check_seqlens(cu_seqlens_q, cu_seqlens_k, problem)
    if not isinstance(e, launcher.Entry):  # nothing to compute: every row is 0, every LSE -inf
        lse = torch.full((e.heads, e.total_q), float("-inf"), dtype=_F32, device=q.device) if return_lse else None
        return torch.zeros_like(q), lse
    out = torch.empty_like(q)
    lse = torch.empty(e.lse_shape, dtype=_F32, device=e.torch_device) if return_lse else None
    e.launch(out, lse, scale, None if mod_call is None else mod_call.values(e, causal, (cu_seqlens_q, cu_seqlens_k),
                                                                          check_values))
    if covered is not None:
        first, end = covered
        for rows in (slice(0, first), slice(end, e.problem.total_q)):
            if rows.start < rows.stop:
                out[rows] = 0
                if lse is not None:
                    lse[:, rows] = float("-inf")
    return out, lse


def _new_entry(key, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, source, causal, return_lse):
    """A launcher Entry for a varlen call, or the Problem when there is nothing to launch."""
    problem = validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_device=False)
    if not problem.needs_launch:
        check_devices(q, k, v, cu_seqlens_q, cu_seqlens_k)
        return problem
    token = source.specialize(key[1], problem.head_dim)  # a schedule that cannot hold D raises here
    check_devices(q, k, v, cu_seqlens_q, cu_seqlens_k)
    device = q.get_device()
    lk = source.load(token, key[2], device)
    launcher.check_capabilities(lk, causal, return_lse, problem.heads != problem.heads_kv, True)
    info = lk.built.launch
    b, h, s = problem.batch, problem.heads, problem.seq_q
    pack = launcher.pack_heads(info.q_stages, h, problem.heads_kv, s, causal, True, info.block_m)
    lk, info, splits = launcher._split_kernel(lk, token, key[2], device, source, problem, pack, causal)
    n_work = info.num_work_items(b, h, s, pack, splits)
    check_work_items(n_work)
    grid = info.grid(b, h, s, lk.num_sms, pack, splits)
    check_grid(grid)
    maps = launcher.tensor_maps(lk, ((n, as_bhsd(t)) for n, t in zip(_NAMES, (q, k, v))))
    sample = torch.empty_like(q)  # (total_q, H, D); empty_like's strides depend only on q's
    out_strides = (0, sample.stride(1), sample.stride(0))
    total = problem.total_q
    lse_shape = (h, total) if return_lse else None
    lse_strides = (0, total, 1) if return_lse else (0, 0, 0)
    values = launcher.kernel_arguments(problem, maps, out_strides, lse_strides, causal, pack, problem.head_dim ** -0.5,
                                       (cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()))
    values.update(launcher.mod_defaults(info))
    split = None
    if info.split_kv:  # split-KV (b200c/runtime/split_kv.py): the workspace holds every packed row per head
        from .split_kv import SplitLaunch

        split = SplitLaunch(lk, splits, h, total, h, out_strides, lse_strides)
        values.update(split.kernel_values())
    # the items longest first, ordered on the GPU before each launch (b200c.runtime.work_order)
    order = work_order.order_for(lk, info, problem, pack, causal, n_work,
                                 (cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()))
    e = launcher.Entry(lk, problem, grid, values, pack, lse_shape, q.device, None, split, order)
    launcher.remember(key, e)
    return e

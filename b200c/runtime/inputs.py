"""Validation of attention inputs and arguments before any launch.

Logical shapes: q and the output ``(B, H, S_q, D)``, k and v ``(B, H_kv,
S_kv, D)`` (like ``torch.nn.functional.scaled_dot_product_attention``; H a
multiple of H_kv for GQA/MQA; D 64, 128 or 256; any S_q, S_kv >= 0). Any
strides with a contiguous last dim are accepted, so both memory layouts work
without copies:

* ``(B, H, S, D)`` memory: a contiguous ``(B, H, S, D)`` tensor;
* ``(B, S, H, D)`` memory: pass ``x.transpose(1, 2)`` of a contiguous
  ``(B, S, H, D)`` tensor.

The S, H and B strides become TMA global strides (docs/sm100-facts.md §6), hence
the 16-byte rules. Every failure is a :class:`b200c.LaunchError` naming the
tensor, the rule and the value.
"""
from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensor

from ..errors import LaunchError

HEAD_DIMS = (64, 128, 256)
_MAX_TMA_STRIDE = 1 << 40  # bytes, exclusive
_MAX_INT32 = (1 << 31) - 1
_ELEM = 2  # bytes per bfloat16
_NAMES = ("q", "k", "v")


@dataclass(frozen=True)
class Problem:
    """Sizes of one attention call (all element counts).

    Attributes:
        batch: B (sequences; varlen: ``len(cu_seqlens_q) - 1``).
        heads: H, query heads.
        heads_kv: H_kv, K/V heads (H is a multiple of it).
        seq_q, seq_kv: S_q and S_kv (varlen: ``max_seqlen_q``, ``max_seqlen_k``).
        head_dim: D.
        total_q, total_kv: varlen: rows of the packed q and k tensors; None for dense calls.
    """

    batch: int
    heads: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    head_dim: int
    total_q: int | None = None
    total_kv: int | None = None

    @property
    def varlen(self) -> bool:
        """A varlen call (packed (total, H, D) tensors with cu_seqlens)."""
        return self.total_q is not None

    @property
    def empty(self) -> bool:
        """The output has no elements (B, H or S_q is 0; varlen: no query rows): nothing to launch."""
        return self.batch == 0 or self.heads == 0 or self.seq_q == 0 or self.total_q == 0

    @property
    def needs_launch(self) -> bool:
        """False for empty outputs and for S_kv = 0 (output is all zeros, LSE -inf)."""
        return not self.empty and self.seq_kv > 0


def check_tensor_types(q, k, v) -> None:
    """Raise LaunchError unless q, k and v are torch.Tensors."""
    for name, t in zip(_NAMES, (q, k, v)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def _is_fake(t: torch.Tensor) -> bool:
    return isinstance(t, FakeTensor) or t.device.type == "meta"


def tma_strides(t: torch.Tensor) -> tuple[int, int, int]:
    """TMA global strides in bytes of a logical (B, H, S, D) tensor: (S, H, B).

    A dimension of size 1 is never stepped over, so its (arbitrary) torch
    stride is replaced by the tensor's byte extent rounded up to 16 bytes.
    """
    b, h, s, _ = t.shape
    extent = _ELEM * (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0))
    extent = -(-extent // 16) * 16
    out = []
    for n, st in ((s, t.stride(2)), (h, t.stride(1)), (b, t.stride(0))):
        out.append(st * _ELEM if n != 1 else extent)
    return out[0], out[1], out[2]


def validate_inputs(q, k, v, *, check_device: bool = True, check_pointers: bool = True) -> Problem:
    """Check q, k, v against every kernel rule; return the problem sizes.

    Args:
        q: (B, H, S_q, D) bfloat16, CUDA. k, v: (B, H_kv, S_kv, D) bfloat16, CUDA.
        check_device: check CUDA and same device (the last rule).
        check_pointers: check ``data_ptr()`` alignment (off for fake tensors,
            whose storage offset is still checked).

    Rules, in order: torch.Tensor; dtype bfloat16; 4-D; same B and D for q,
    k, v and same H_kv and S_kv for k, v; H a multiple of H_kv; D 64, 128 or
    256; for non-empty inputs: last dim contiguous (stride 1), data_ptr
    16-byte aligned, S/H/B strides in bytes multiples of 16 and < 2^40, B, H,
    S < 2^31; then CUDA device, all on one device. Any S_q, S_kv >= 0.

    Raises:
        LaunchError: the first broken rule, naming tensor, rule and value.
    """
    check_tensor_types(q, k, v)
    ts = dict(zip(_NAMES, (q, k, v)))
    _check_dtypes(ts)
    for name, t in ts.items():
        if t.dim() != 4:
            raise LaunchError(
                f"tensor {name} has {t.dim()} dims (shape {tuple(t.shape)}); expected 4-D logical (B, H, S, D)"
            )
    for i, dim in ((0, "batch B"), (3, "head dim D")):
        for name in ("k", "v"):
            if ts[name].shape[i] != q.shape[i]:
                raise LaunchError(
                    f"tensor {name} has {dim} = {ts[name].shape[i]} but q has {q.shape[i]}; "
                    "q, k, v must agree on B and D (logical shapes (B, H, S_q, D) and (B, H_kv, S_kv, D))"
                )
    if v.shape[1] != k.shape[1]:
        raise LaunchError(f"tensor v has H_kv = {v.shape[1]} heads but k has {k.shape[1]}; k and v must have the same heads")
    if v.shape[2] != k.shape[2]:
        raise LaunchError(f"tensor v has S = {v.shape[2]} but k has S = {k.shape[2]}; k and v must have the same length")
    _check_heads(int(q.shape[1]), int(k.shape[1]))
    _check_head_dim(int(q.shape[3]))
    problem = Problem(int(q.shape[0]), int(q.shape[1]), int(k.shape[1]), int(q.shape[2]), int(k.shape[2]),
                      int(q.shape[3]))
    if problem.needs_launch:
        for name, t in ts.items():
            _check_layout(name, t, check_pointers and not _is_fake(t))
    if check_device:
        _check_devices(ts)
    return problem


def _check_dtypes(ts: dict) -> None:
    for name, t in ts.items():
        if t.dtype != torch.bfloat16:
            raise LaunchError(f"tensor {name} has dtype {t.dtype}; b200c kernels need torch.bfloat16 ({name}.to("
                              "torch.bfloat16), or b200c.scaled_dot_product_attention, which falls back to torch for "
                              "other dtypes)")


def _check_heads(heads: int, heads_kv: int) -> None:
    if heads_kv == 0 and heads == 0:
        return
    if heads_kv == 0 or heads % heads_kv != 0:
        raise LaunchError(
            f"q has H = {heads} heads but k and v have H_kv = {heads_kv}; H must be a multiple of H_kv "
            "(GQA/MQA: query head h reads K/V head h // (H / H_kv))"
        )


def _check_head_dim(d: int) -> None:
    if d not in HEAD_DIMS:
        raise LaunchError(
            f"tensor q has head dim D = {d}; b200c kernels support D = 64, 128 or 256 "
            "(pad the head dim, or use torch.nn.functional.scaled_dot_product_attention)"
        )


def _check_layout(name: str, t: torch.Tensor, check_pointer: bool) -> None:
    if t.stride(3) != 1:
        raise LaunchError(
            f"tensor {name} has last-dim stride {t.stride(3)}; the head dim must be contiguous (stride 1); "
            "call .contiguous() or pick a layout with D innermost"
        )
    for dim, n in zip("BHS", t.shape[:3]):
        if n > _MAX_INT32:
            raise LaunchError(f"tensor {name} has {dim} = {n}; must be < 2^31")
    off_bytes = t.storage_offset() * _ELEM
    if off_bytes % 16 != 0:
        raise LaunchError(
            f"tensor {name} starts {t.storage_offset()} elements into its storage ({off_bytes} bytes), "
            "not 16-byte aligned (TMA needs a 16-byte aligned address); use a view starting on a multiple of 8 elements"
        )
    if check_pointer and t.data_ptr() % 16 != 0:
        raise LaunchError(
            f"tensor {name} has data_ptr 0x{t.data_ptr():x}, not 16-byte aligned (TMA rule); "
            "call .contiguous() or allocate it aligned"
        )
    for dim, st in zip("SHB", tma_strides(t)):
        if st % 16 != 0:
            raise LaunchError(
                f"tensor {name} has {dim} stride {st // _ELEM} elements = {st} bytes, not a multiple of 16 bytes "
                "(TMA rule); call .contiguous()"
            )
        if st >= _MAX_TMA_STRIDE:
            raise LaunchError(f"tensor {name} has {dim} stride {st} bytes; TMA strides must be < 2^40 bytes")


def _check_devices(ts: dict[str, torch.Tensor]) -> None:
    for name, t in ts.items():
        if t.device.type != "cuda":
            raise LaunchError(f"tensor {name} is on {t.device}; b200c kernels need a CUDA tensor")
    dev = ts["q"].device
    for name in ("k", "v"):
        if ts[name].device != dev:
            raise LaunchError(f"tensor {name} is on {ts[name].device} but q is on {dev}; put q, k, v on one device")


def check_grid(grid: int) -> None:
    """Raise LaunchError if ``grid`` CTAs exceed the 2^31-1 grid.x limit."""
    if grid > _MAX_INT32:
        raise LaunchError(f"grid of {grid} CTAs exceeds the limit 2^31-1; reduce B*H*S_q")


def check_work_items(n: int) -> None:
    """Raise LaunchError if ``n`` work items exceed the kernel's int32 work counter."""
    if n > _MAX_INT32:
        raise LaunchError(f"{n} work items exceed the kernel's limit 2^31-1 (B * H * ceil(S_q / 128)); reduce B*H*S_q")


def empty_result(q: torch.Tensor, problem: Problem) -> torch.Tensor:
    """Result without a launch: empty for empty outputs, zeros when S_kv = 0 (same layout as q)."""
    return torch.zeros_like(q) if problem.seq_kv == 0 else torch.empty_like(q)


# ---- scalar arguments -------------------------------------------------------------------

LOG2E = 1.4426950408889634
_FAST_MAX_SCALE = 2.0e38  # below the exact FP32 overflow bound of scale * log2(e) (~2.36e38)
# The smallest normal FP32. A scale of 0 (or one that rounds below this) is passed as FLT_MIN: the kernel
# masks scores with -inf before scaling, and -inf * 0 is NaN (measured: NaN rows on the emulated sweep),
# while -inf * FLT_MIN stays -inf and every finite score times FLT_MIN is 0 after the exp2 (a uniform softmax).
FLT_MIN = 1.1754943508222875e-38
_SCALE_HINT = "e.g. 0.0884 (= 1/sqrt(128)), or None for 1/sqrt(D)"


def _f32(x: float) -> float:
    """``x`` rounded to FP32 (inf past FLT_MAX), as the kernel receives it."""
    return ctypes.c_float(x).value


def softmax_scale_value(scale) -> float | None:
    """None, or ``scale`` as a Python float the kernel computes right.

    Accepted: Python float/int, numpy scalars, ``fractions.Fraction``, 0-d
    real torch tensors (``.item()``: a device sync for CUDA tensors), in
    natural-log units, with ``0 <= scale`` and ``scale * log2(e)`` finite in
    FP32 (the kernel works in log2 units). ``0`` gives a uniform softmax;
    scales below the smallest normal FP32 (0 included) are passed as that
    value (:data:`FLT_MIN`), which gives the same result without NaNs.

    Raises:
        LaunchError: not a real number (str, bool, complex, a tensor with
            more than one element, ...), NaN or infinite, negative (the
            kernel's row max is taken before scaling, which a negative scale
            turns into a row minimum), or so large that ``scale * log2(e)``
            overflows FP32.
        BackwardNotSupportedError: a tensor that requires grad, with grad mode on
            (the kernels take the scale as a number: it would get no gradient).
    """
    if type(scale) is float and FLT_MIN <= scale < _FAST_MAX_SCALE:
        return scale
    if scale is None:
        return None
    value, problem = _checked_scale(scale)
    if problem:
        raise LaunchError(problem)
    return value


def scale_problem(scale) -> str:
    """Why :func:`softmax_scale_value` would refuse ``scale`` with a LaunchError ("" if it would not), without
    raising it; a scale tensor that requires grad in grad mode still raises BackwardNotSupportedError."""
    if scale is None:
        return ""
    try:
        return _checked_scale(scale)[1]
    except LaunchError as e:
        return str(e)


def _checked_scale(scale) -> tuple[float, str]:
    value = _real(scale)
    if not math.isfinite(value):
        return value, f"softmax_scale={value} must be finite; use {_SCALE_HINT}"
    if value < 0:
        return value, (
            f"softmax_scale={value} is negative; b200c kernels take the row max of the raw scores and then scale, "
            "which needs softmax_scale >= 0 (negate q instead: softmax((-q) @ k^T * |scale|) is the same attention)"
        )
    if math.isinf(_f32(_f32(value) * _f32(LOG2E))):
        return value, (
            f"softmax_scale={value!r} is too large: softmax_scale * log2(e) overflows FP32 (the kernel works in "
            f"log2 units; the limit is about {3.4028234663852886e38 / LOG2E:.3e}); use {_SCALE_HINT}"
        )
    return max(value, FLT_MIN), ""


def _real(scale) -> float:
    if isinstance(scale, torch.Tensor):
        if scale.dim() != 0 or scale.dtype == torch.bool or scale.is_complex():
            raise LaunchError(
                f"softmax_scale is a tensor of shape {tuple(scale.shape)} and dtype {scale.dtype}; pass a Python "
                f"number or a 0-d real tensor in natural-log units, {_SCALE_HINT}"
            )
        refuse_scale_grad(scale)
        return float(scale.item())
    if isinstance(scale, numbers.Real) and not isinstance(scale, bool):
        try:
            return float(scale)
        except OverflowError:
            raise LaunchError(f"softmax_scale={scale!r} does not fit a float; use {_SCALE_HINT}") from None
    raise LaunchError(
        f"softmax_scale={scale!r} ({type(scale).__name__}) must be a real number in natural-log units, {_SCALE_HINT}"
    )


def refuse_scale_grad(scale, name: str = "softmax_scale", q_name: str = "q") -> None:
    """Refuse a scale tensor that requires grad, with grad mode on: b200c's kernels take the scale as a number,
    so the result would carry no gradient for it (a learnable temperature). ``name`` / ``q_name``: what the
    calling function calls the scale and the query.

    Raises:
        BackwardNotSupportedError: such a tensor, naming detach() and folding the temperature into the query.
    """
    if isinstance(scale, torch.Tensor) and scale.requires_grad and torch.is_grad_enabled():
        from ..errors import BackwardNotSupportedError

        raise BackwardNotSupportedError(
            f"{name} is a tensor that requires grad (a learnable temperature): b200c's kernels take the scale as a "
            f"number, so the result would carry no gradient for it; pass {name}.detach() (or call under "
            f"torch.no_grad()), or fold a learned temperature into {q_name} ({q_name} * t, with {name} the "
            "default), which b200c differentiates")


def type_name(value) -> str:
    """``value``'s type as an error names it: ``int`` for builtins, ``numpy.int32`` (module and name) otherwise."""
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def flag_value(name: str, value) -> bool:
    """``value`` as a bool: True/False, numpy bools, or the ints 0 and 1.

    Raises:
        LaunchError: anything else (e.g. the string ``"true"`` or 2).
    """
    if value is True or value is False:
        return value
    if _numpy_bool(value) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise LaunchError(f"{name}={value!r} ({type_name(value)}) must be True or False")


def _numpy_bool(value) -> bool:
    """A numpy bool scalar (``numpy.bool_``; its class is named ``bool`` in numpy 2), without importing numpy."""
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")


def keyword_given(fname: str, name: str, value) -> str:
    """The start of the error of a keyword ``fname`` does not take: ``"fname() got name=value"`` (a value whose
    repr is longer than 40 characters: its type instead)."""
    shown = repr(value) if len(repr(value)) <= 40 else f"<{type(value).__name__}>"
    return f"{fname}() got {name}={shown}"


def no_such_keyword(fname: str, fn, name: str, given: str, positional: tuple) -> LaunchError:
    """The error of a keyword ``name`` that ``fn`` (called ``fname`` in messages) does not take and that has no
    explanation of its own: the closest of ``fn``'s keyword parameters (those not in ``positional``), or all of
    them."""
    import difflib
    import inspect

    names = [p for p in inspect.signature(fn).parameters if p not in positional + ("kwargs",)]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]}=?" if close else f"its keyword arguments: {', '.join(names)}"
    return LaunchError(f"{given}: {fname} takes no argument {name!r}; {hint}")

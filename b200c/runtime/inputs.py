"""Validation of attention inputs before any launch.

Logical shape of q, k, v and the output is ``(B, H, S, D)`` (like
``torch.nn.functional.scaled_dot_product_attention``). Any strides with a
contiguous last dim are accepted, so both memory layouts work without copies:

* ``(B, H, S, D)`` memory: a contiguous ``(B, H, S, D)`` tensor;
* ``(B, S, H, D)`` memory: pass ``x.transpose(1, 2)`` of a contiguous
  ``(B, S, H, D)`` tensor.

The S, H and B strides become TMA global strides (docs/sm100-facts.md §6), hence
the 16-byte rules. Every failure is a :class:`b200c.LaunchError` naming the
tensor, the rule and the value.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensor

from ..errors import LaunchError

HEAD_DIM = 128
SEQ_MULTIPLE = 128
_MAX_TMA_STRIDE = 1 << 40  # bytes, exclusive
_MAX_INT32 = (1 << 31) - 1
_ELEM = 2  # bytes per bfloat16
_NAMES = ("q", "k", "v")


@dataclass(frozen=True)
class Problem:
    """Sizes of one attention call (all element counts)."""

    batch: int
    heads: int
    seq_q: int
    seq_kv: int
    head_dim: int

    @property
    def empty(self) -> bool:
        """The output has no elements (B, H or S_q is 0): nothing to launch."""
        return self.batch == 0 or self.heads == 0 or self.seq_q == 0

    @property
    def needs_launch(self) -> bool:
        """False for empty outputs and for S_kv = 0 (output is all zeros)."""
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
        q: (B, H, S_q, D) bfloat16, CUDA. k, v: (B, H, S_kv, D) bfloat16, CUDA.
        check_device: check CUDA and same device (the last rule).
        check_pointers: check ``data_ptr()`` alignment (off for fake tensors,
            whose storage offset is still checked).

    Rules, in order: torch.Tensor; dtype bfloat16; 4-D; same B, H, D for q,
    k, v and same S for k, v; D == 128; S_q and S_kv multiples of 128; for
    non-empty inputs: last dim contiguous (stride 1), data_ptr 16-byte
    aligned, S/H/B strides in bytes multiples of 16 and < 2^40, B, H, S
    < 2^31; then CUDA device, all on one device.

    Raises:
        LaunchError: the first broken rule, naming tensor, rule and value.
    """
    check_tensor_types(q, k, v)
    ts = dict(zip(_NAMES, (q, k, v)))
    for name, t in ts.items():
        if t.dtype != torch.bfloat16:
            raise LaunchError(f"tensor {name} has dtype {t.dtype}; b200c kernels need torch.bfloat16")
    for name, t in ts.items():
        if t.dim() != 4:
            raise LaunchError(
                f"tensor {name} has {t.dim()} dims (shape {tuple(t.shape)}); expected 4-D logical (B, H, S, D)"
            )
    for i, dim in ((0, "batch B"), (1, "heads H"), (3, "head dim D")):
        for name in ("k", "v"):
            if ts[name].shape[i] != q.shape[i]:
                raise LaunchError(
                    f"tensor {name} has {dim} = {ts[name].shape[i]} but q has {q.shape[i]}; "
                    "q, k, v must agree on B, H and D (logical shape (B, H, S, D))"
                )
    if v.shape[2] != k.shape[2]:
        raise LaunchError(f"tensor v has S = {v.shape[2]} but k has S = {k.shape[2]}; k and v must have the same length")
    if q.shape[3] != HEAD_DIM:
        raise LaunchError(
            f"tensor q has head dim D = {q.shape[3]}; b200c kernels support D = {HEAD_DIM} only "
            "(generalisation is not there yet)"
        )
    for name in ("q", "k"):
        s = ts[name].shape[2]
        if s % SEQ_MULTIPLE != 0:
            raise LaunchError(
                f"tensor {name} has sequence length S = {s}, not a multiple of {SEQ_MULTIPLE}; "
                "pad the sequence (generalisation is not there yet)"
            )
    problem = Problem(int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), int(k.shape[2]), int(q.shape[3]))
    if problem.needs_launch:
        for name, t in ts.items():
            _check_layout(name, t, check_pointers and not _is_fake(t))
    if check_device:
        _check_devices(ts)
    return problem


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


def empty_result(q: torch.Tensor, problem: Problem) -> torch.Tensor:
    """Result without a launch: empty for empty outputs, zeros when S_kv = 0 (same layout as q)."""
    return torch.zeros_like(q) if problem.seq_kv == 0 else torch.empty_like(q)

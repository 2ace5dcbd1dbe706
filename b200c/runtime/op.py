"""The ``b200c::attention`` torch.library custom op (real, fake and autograd impls).

Schedules cross the op boundary as ``Schedule.to_json()`` text; the generated
kernel is cached per JSON string, the built+loaded kernel per (JSON, target,
device) and each launch configuration per tensor pointers/shapes/strides
(:mod:`b200c.runtime.launcher`), so a repeated call only launches. The fake
impl only propagates shapes, so ``torch.compile(fullgraph=True)`` traces
calls without touching data.

The kernels are forward-only. The op's autograd formula makes that work with
inputs that require grad, in eager mode and under ``torch.compile``: the
forward runs, and only a backward pass through the op raises
:class:`b200c.BackwardNotSupportedError` (from ``b200c::attention_backward``,
whose fake impl lets AOT autograd trace the backward graph).
"""
from __future__ import annotations

import functools
import threading

import torch

from . import launcher
from .inputs import validate_inputs

_lock = threading.Lock()
_kernels: dict[tuple[str, str, int], object] = {}
_capability: dict[int, tuple[tuple[int, int], str]] = {}


@functools.lru_cache(maxsize=256)
def generated_kernel(schedule_json: str, target: str = "sm100a"):
    """``b200c.codegen.generate(Schedule.from_json(schedule_json), target)``,
    cached per (JSON string, target); the emulation target uses the sm100a source.

    Raises:
        ScheduleError, ResourceError, IssueOrderError.
    """
    import b200c

    schedule = b200c.Schedule.from_json(schedule_json)
    return b200c.generate(schedule, "sm90a") if target == "sm90a" else b200c.generate(schedule)


@functools.lru_cache(maxsize=256)
def _schedule_target(schedule_json: str) -> str:
    import b200c
    from ..codegen.targets import schedule_target

    return schedule_target(b200c.Schedule.from_json(schedule_json))


def device_capability(device: int) -> tuple[tuple[int, int], str]:
    """((major, minor), name) of CUDA device ``device`` (cached)."""
    if device not in _capability:
        _capability[device] = (torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
    return _capability[device]


def kernel_for_generated(generated, target: str, device: int):
    """Resolve ``target`` for ``device``, build ``generated`` (disk cache) and load it.

    Raises:
        UnsupportedDeviceError, BuildError, LaunchError.
    """
    from . import driver
    from .build import build

    from ..errors import UnsupportedDeviceError

    cap, name = device_capability(device)
    made_for = getattr(generated, "target", "sm100a")
    resolved = driver.resolve_target(target, cap, name, "sm90a" if made_for == "sm90a" else "sm100a")
    if (made_for == "sm90a") != (resolved == "sm90a"):
        raise UnsupportedDeviceError(
            f"kernel {generated.launch.name!r} was generated for target {made_for!r} but the build target is "
            f"{resolved!r}; generate it with b200c.codegen.generate(schedule, target={resolved!r})"
        )
    return driver.load(build(generated, resolved), device)


def loaded_kernel(schedule_json: str, target: str, device: int):
    """The LoadedKernel for a schedule on a device: resolve target, generate, build, load (cached).

    Raises:
        UnsupportedDeviceError, BuildError, LaunchError, ScheduleError.
    """
    key = (schedule_json, target, device)
    lk = _kernels.get(key)
    if lk is None:
        from . import driver

        cap, name = device_capability(device)
        resolved = driver.resolve_target(target, cap, name, _schedule_target(schedule_json))  # before generating
        with _lock:
            lk = _kernels.get(key)
            if lk is None:
                lk = kernel_for_generated(generated_kernel(schedule_json, resolved), target, device)
                _kernels[key] = lk
    return lk


def run_schedule(q, k, v, schedule_json: str, softmax_scale: float | None, target: str, layout: str = "bhsd"):
    """Launch the kernel of a (validated) schedule JSON on CUDA tensors; the op's real impl.

    ``layout`` says whether q, k, v (and the result) are (B, H, S, D) or
    (B, S, H, D); see :func:`b200c.runtime.launcher.run`.
    """
    return launcher.run(schedule_json, target, layout, q, k, v, softmax_scale, loaded_kernel)


@torch.library.custom_op("b200c::attention", mutates_args=())
def attention_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, schedule_json: str, softmax_scale: float, target: str
) -> torch.Tensor:
    """Dense non-causal attention; see :func:`b200c.attention` (logical (B, H, S, D) bf16)."""
    return run_schedule(q, k, v, schedule_json, softmax_scale, target)


@attention_op.register_fake
def _attention_fake(q, k, v, schedule_json, softmax_scale, target):
    validate_inputs(q, k, v, check_device=False, check_pointers=False)
    return torch.empty_like(q)


@torch.library.custom_op("b200c::attention_backward", mutates_args=())
def attention_backward_op(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of ``b200c::attention``: always raises BackwardNotSupportedError."""
    from ..errors import BackwardNotSupportedError

    raise BackwardNotSupportedError(
        "b200c.attention has no backward pass (its kernels are forward-only), but a gradient was requested "
        "through it; run it under torch.no_grad() or on detached q, k, v, or use "
        "torch.nn.functional.scaled_dot_product_attention where gradients are needed"
    )


@attention_backward_op.register_fake
def _attention_backward_fake(grad_out, q, k, v):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    ctx.save_for_backward(q, k, v)


def _backward(ctx, grad_out):
    q, k, v = ctx.saved_tensors
    dq, dk, dv = torch.ops.b200c.attention_backward(grad_out, q, k, v)
    return dq, dk, dv, None, None, None


attention_op.register_autograd(_backward, setup_context=_setup_context)

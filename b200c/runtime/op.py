"""The ``b200c::attention`` torch.library custom op (real and fake impls).

Schedules cross the op boundary as ``Schedule.to_json()`` text; the generated
kernel is cached per JSON string, and the built+loaded kernel per (JSON,
target, device). The fake impl only propagates shapes, so
``torch.compile(fullgraph=True)`` traces calls without touching data.
"""
from __future__ import annotations

import functools
import threading

import torch

from .inputs import Problem, empty_result, validate_inputs

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
    resolved = driver.resolve_target(target, cap, name)
    made_for = getattr(generated, "target", "sm100a")
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
        resolved = driver.resolve_target(target, cap, name)  # device check before generating anything
        with _lock:
            lk = _kernels.get(key)
            if lk is None:
                lk = kernel_for_generated(generated_kernel(schedule_json, resolved), target, device)
                _kernels[key] = lk
    return lk


def run_attention(q, k, v, problem: Problem, softmax_scale: float, kernel_for_device) -> torch.Tensor:
    """Launch on validated, non-empty inputs; returns the output (allocated here).

    ``kernel_for_device(device_ordinal) -> LoadedKernel`` supplies the kernel.
    """
    from . import driver

    device = q.device.index if q.device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(device):
        lk = kernel_for_device(device)
        out = torch.empty_like(q)
        driver.launch(lk, q, k, v, out, problem, softmax_scale)
    return out


@torch.library.custom_op("b200c::attention", mutates_args=())
def attention_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, schedule_json: str, softmax_scale: float, target: str
) -> torch.Tensor:
    """Dense non-causal attention; see :func:`b200c.runtime.attention` (logical (B, H, S, D) bf16)."""
    problem = validate_inputs(q, k, v)
    if not problem.needs_launch:
        return empty_result(q, problem)
    return run_attention(q, k, v, problem, softmax_scale, lambda dev: loaded_kernel(schedule_json, target, dev))


@attention_op.register_fake
def _attention_fake(q, k, v, schedule_json, softmax_scale, target):
    validate_inputs(q, k, v, check_device=False, check_pointers=False)
    return torch.empty_like(q)

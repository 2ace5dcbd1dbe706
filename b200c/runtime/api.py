"""``b200c.attention``: the user-facing PyTorch entry point."""
from __future__ import annotations

import functools
import os

import torch

from .inputs import check_tensor_types

_TARGETS = ("auto", "sm100a", "sm_100a", "sm_100", "sm100", "emulate", "sm90a", "sm_90a", "sm_90", "sm90")


def _schedule_fields() -> tuple[str, ...]:
    import dataclasses

    from ..dsl import Schedule

    return tuple(f.name for f in dataclasses.fields(Schedule))


_FIELDS = _schedule_fields()


@functools.lru_cache(maxsize=512)
def _json_cached(values: tuple) -> str:
    from ..dsl import Schedule

    return Schedule(**dict(zip(_FIELDS, values))).to_json()


@torch.compiler.assume_constant_result
def _json_of_fields(values: tuple) -> str:
    return _json_cached(values)


@functools.lru_cache(maxsize=256)
def _json_of_file_cached(path: str, mtime_ns: int) -> str:
    from ..dsl import load_schedule_file

    return load_schedule_file(path).to_json()


@torch.compiler.assume_constant_result
def _json_of_file(path) -> str:
    """Schedule JSON of a schedule file, cached per (resolved path, modification time)."""
    from pathlib import Path

    p = Path(path).resolve()
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        mtime = -1  # missing: load_schedule_file raises the ScheduleError
    if mtime < 0:
        return _json_of_file_cached.__wrapped__(str(p), mtime)
    return _json_of_file_cached(str(p), mtime)


def _schedule_json(schedule) -> str:
    """``Schedule.to_json()`` of a Schedule or schedule file path.

    Under torch.compile the Schedule's field values (plain constants) are read
    in the traced code and the JSON is computed once as a constant, so no
    graph break occurs and no dataclass instance has to be reconstructed.

    Raises:
        ScheduleError: neither a Schedule nor a path, or the file is invalid.
    """
    from ..dsl import Schedule
    from ..errors import ScheduleError

    if isinstance(schedule, Schedule):
        return _json_of_fields(tuple([getattr(schedule, name) for name in _FIELDS]))
    if isinstance(schedule, (str, os.PathLike)):
        return _json_of_file(schedule)
    raise ScheduleError(f"schedule must be a b200c.Schedule or a schedule file path, got {type(schedule).__name__}")


def attention(q, k, v, *, schedule, softmax_scale: float | None = None, layout: str = "bhsd",
              target: str = "auto") -> torch.Tensor:
    """Dense non-causal attention ``softmax(q k^T * scale) v`` with a b200c kernel.

    Args:
        q: shape (B, H, S_q, D) (``layout="bhsd"``, like torch SDPA) or
            (B, S_q, H, D) (``layout="bshd"``, like FlashAttention),
            torch.bfloat16, CUDA.
        k, v: the same with S_kv, same dtype and device.
            Any memory layout whose last dim is contiguous works through the
            strides (e.g. (B, S, H, D) storage viewed as (B, H, S, D)): 16-byte
            aligned data and S/H/B strides that are multiples of 8 elements;
            no copies are made. Today D must be 128 and S_q, S_kv multiples
            of 128.
        layout: ``"bhsd"`` or ``"bshd"``: the order of the dimensions of the
            shapes above (and of the result).
        schedule: a :class:`b200c.Schedule` or a path to a schedule file.
        softmax_scale: natural-log units; default ``1 / sqrt(D)``.
        target: ``"auto"`` (sm100a on compute capability 10.0, the native
            Hopper kernel sm90a on 9.0), ``"sm100a"``, ``"sm90a"`` or
            ``"emulate"`` (the sm100a kernel emulated on Hopper, correctness only).

    Returns:
        (B, H, S_q, D) or, for ``layout="bshd"``, (B, S_q, H, D) bfloat16
        with q's memory layout. Empty inputs (B, H or
        S_q = 0) give an empty result and S_kv = 0 gives zeros, without a launch.

    Raises:
        LaunchError: an input rule is broken (names tensor, rule, value).
        UnsupportedDeviceError: the GPU cannot run the target.
        BuildError: nvcc missing or compilation failed.
        ScheduleError / ResourceError / IssueOrderError: invalid schedule.
        BarrierTimeoutError: an earlier emulated launch timed out (see
            :func:`b200c.runtime.check_hang`).

    The first call per (schedule, target, device) generates, builds (cached
    on disk) and loads the kernel; later calls only launch asynchronously on
    the current stream (CUDA-graph capturable). Registered as the custom op
    ``torch.ops.b200c.attention``, so ``torch.compile(fullgraph=True)`` works.
    """
    from ..errors import BuildError, LaunchError

    check_tensor_types(q, k, v)
    if target not in _TARGETS:
        raise BuildError(f"unknown target {target!r}; allowed: 'auto', 'sm_100a' (also 'sm100a', 'sm_100'), "
                         f"'sm_90a' (also 'sm90a', 'sm_90'), 'emulate'")
    if layout not in ("bhsd", "bshd"):
        raise LaunchError(f"layout={layout!r}: use 'bhsd' (B, H, S, D) or 'bshd' (B, S, H, D)")
    if layout == "bshd":  # views only: the kernel reads any strides
        q, k, v = (t.transpose(1, 2) if t.dim() == 4 else t for t in (q, k, v))
    schedule_json = _schedule_json(schedule)
    if softmax_scale is None:
        softmax_scale = float(q.shape[-1]) ** -0.5 if q.dim() > 0 else 1.0
    out = torch.ops.b200c.attention(q, k, v, schedule_json, float(softmax_scale), target)
    return out.transpose(1, 2) if layout == "bshd" else out


def attention_generated(q, k, v, generated, *, softmax_scale: float | None = None, target: str = "auto") -> torch.Tensor:
    """Run a :class:`b200c.codegen.GeneratedKernel` directly (eager only, no custom op).

    For kernels that are not a Schedule (e.g. hand-edited or deliberately
    broken variants in tests). Same inputs, result, rules and errors as
    :func:`attention`; the build is cached on disk by source text, and each
    call re-hashes the source (slower host path than :func:`attention`).
    """
    from ..errors import BuildError
    from . import op
    from .inputs import empty_result, validate_inputs

    check_tensor_types(q, k, v)
    if target not in _TARGETS:
        raise BuildError(f"unknown target {target!r}; allowed: 'auto', 'sm_100a' (also 'sm100a', 'sm_100'), "
                         f"'sm_90a' (also 'sm90a', 'sm_90'), 'emulate'")
    problem = validate_inputs(q, k, v)
    if not problem.needs_launch:
        return empty_result(q, problem)
    scale = float(softmax_scale) if softmax_scale is not None else problem.head_dim ** -0.5
    return op.run_attention(q, k, v, problem, scale, lambda dev: op.kernel_for_generated(generated, target, dev))

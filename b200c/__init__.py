"""b200c: compile declarative attention schedules to CUDA for sm_100a (B200,
tcgen05) or sm_90a (Hopper, wgmma) and run them.

Public API:
    Schedule                 the declarative kernel schedule (b200c.dsl)
    load_schedule_file(path) run a schedule file, return its ``schedule``
    plan(schedule, target="sm100a")      the layout (SMEM, TMEM, barriers, warp roles); checks budgets
    generate(schedule, target="sm100a")  CUDA source + launch info (b200c.codegen); target "sm90a": Hopper
    attention(q, k, v, *, schedule, ...)  PyTorch op (b200c.runtime)
    errors: ScheduleError, ResourceError, IssueOrderError, BuildError, TargetError,
            LaunchError, UnsupportedDeviceError, BarrierTimeoutError, ProtocolError,
            BackwardNotSupportedError
"""
from .errors import (
    B200cError,
    BackwardNotSupportedError,
    BarrierTimeoutError,
    BuildError,
    IssueOrderError,
    LaunchError,
    ProtocolError,
    ResourceError,
    ScheduleError,
    TargetError,
    UnsupportedDeviceError,
)
from .dsl import Schedule, load_schedule_file

__version__ = "0.1.0"


def plan(schedule, target: str = "sm100a"):
    """Validate ``schedule`` for ``target`` and return its layout plan (``print``
    it); raises ScheduleError / IssueOrderError / ResourceError / TargetError
    (see b200c.codegen.make_plan)."""
    from .codegen import make_plan

    return make_plan(schedule, target)


def generate(schedule, target: str = "sm100a", profile: bool = False):
    """Validate ``schedule`` and return its GeneratedKernel for ``target``
    (``"sm100a"``, ``"emulate"`` or ``"sm90a"``; see b200c.codegen.generate)."""
    from .codegen import generate as _generate

    return _generate(schedule, target, profile=profile)


_attention_impl = None


def attention(q, k, v, *, schedule, softmax_scale=None, layout="bhsd", target="auto"):
    """Dense non-causal attention ``softmax(q @ k^T * softmax_scale) @ v`` with a b200c kernel.

    Args:
        q: (B, H, S_q, D) with ``layout="bhsd"`` (like torch SDPA) or
            (B, S_q, H, D) with ``layout="bshd"`` (like FlashAttention);
            torch.bfloat16 on a CUDA device.
        k, v: the same with S_kv instead of S_q; same dtype and device as q.
            Any strides with a contiguous last dimension work without copies
            (e.g. slices of a packed QKV tensor): 16-byte aligned data and
            S/H/B strides that are multiples of 8 elements. Today D must be
            128 and S_q, S_kv multiples of 128.
        schedule: a :class:`b200c.Schedule` or the path of a schedule file
            (a ``.py`` file defining ``schedule``). A file is read again when
            it, or any file it was built from (schedule files it loads, helper
            modules next to it), changes on disk.
        softmax_scale: float in natural-log units; default ``1 / sqrt(D)``.
        layout: ``"bhsd"`` or ``"bshd"``: the order of the dimensions above
            (and of the result).
        target: ``"auto"`` (a B200 schedule: ``"sm100a"`` on compute
            capability 10.0, ``"emulate"`` on 9.0; a Hopper schedule,
            examples/hopper: ``"sm90a"``), ``"sm100a"`` (B200), ``"sm90a"``
            (the native Hopper kernel of a Hopper schedule) or ``"emulate"``
            (the sm100a kernel on H100/H200, correctness only).

    Returns:
        torch.Tensor: bfloat16, q's shape and, for dense q, q's strides.
        Empty inputs (B, H or S_q = 0) give an empty result and S_kv = 0
        gives zeros, without a launch.

    Raises:
        ScheduleError / ResourceError / IssueOrderError: invalid or infeasible
            schedule (checked before the tensors).
        LaunchError: a tensor or argument rule is broken (names the tensor or
            argument, the rule and the value).
        UnsupportedDeviceError: the GPU cannot run the target.
        BuildError: nvcc missing or compilation failed.
        BarrierTimeoutError: an earlier emulated launch timed out (see
            :func:`b200c.runtime.check_hang`).
        BackwardNotSupportedError: raised by ``backward()`` through this
            op: the kernels are forward-only (the forward works on inputs that
            require grad).

    Performance: the first call per (schedule, target, device) generates,
    builds (cached on disk, verified by sha256) and loads the kernel. Later
    calls on plain CUDA tensors only allocate the output and call
    ``cuLaunchKernel`` asynchronously on the current stream: tensor maps and
    the parameter block are cached per data pointers, shapes and strides
    (``python scripts/host_overhead.py`` measures the host time per call).
    Calls are CUDA-graph capturable once the kernel is loaded.

    torch.compile: registered as the custom op ``torch.ops.b200c.attention``,
    so ``torch.compile(fullgraph=True)`` traces it without a graph break; a
    schedule file is read when the function is compiled.

    Example:
        >>> q, k, v = (torch.randn(2, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        >>> o = b200c.attention(q, k, v, schedule=b200c.Schedule())
    """
    global _attention_impl
    if _attention_impl is None:
        from .runtime.api import attention as impl

        _attention_impl = impl
    return _attention_impl(q, k, v, schedule=schedule, softmax_scale=softmax_scale, layout=layout, target=target)


__all__ = [
    "Schedule",
    "load_schedule_file",
    "plan",
    "generate",
    "attention",
    "B200cError",
    "ScheduleError",
    "ResourceError",
    "IssueOrderError",
    "BuildError",
    "TargetError",
    "LaunchError",
    "ProtocolError",
    "UnsupportedDeviceError",
    "BarrierTimeoutError",
    "BackwardNotSupportedError",
    "__version__",
]

"""b200c: compile declarative attention schedules to CUDA for sm_100a (B200,
tcgen05) or sm_90a (Hopper, wgmma) and run them.

Public API:
    Schedule                 the declarative kernel schedule (b200c.dsl)
    load_schedule_file(path) run a schedule file, return its ``schedule``
    plan(schedule, target="sm100a")      the layout (SMEM, TMEM, barriers, warp roles); checks budgets
    generate(schedule, target="sm100a")  CUDA source + launch info (b200c.codegen); target "sm90a": Hopper
    attention(q, k, v, *, schedule, ...)  PyTorch op (b200c.runtime)
    errors: ScheduleError, ResourceError, IssueOrderError, BuildError, TargetError,
            LaunchError, UnsupportedDeviceError, BarrierTimeoutError, ProtocolError
"""
from .errors import (
    B200cError,
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


def attention(q, k, v, *, schedule, softmax_scale=None, layout="bhsd", target="auto"):
    """Dense non-causal attention with a b200c kernel; see b200c.runtime.attention."""
    from .runtime import attention as _attention

    return _attention(q, k, v, schedule=schedule, softmax_scale=softmax_scale, layout=layout, target=target)


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
    "__version__",
]

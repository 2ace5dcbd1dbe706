"""b200c: compile declarative attention schedules to sm_100a CUDA and run them.

Public API:
    Schedule                 the declarative kernel schedule (b200c.dsl)
    load_schedule_file(path) run a schedule file, return its ``schedule``
    plan(schedule)           the layout (SMEM, TMEM, barriers, warp roles); checks budgets
    generate(schedule)       CUDA source + launch info (b200c.codegen)
    attention(q, k, v, *, schedule, ...)  PyTorch op (b200c.runtime)
    errors: ScheduleError, ResourceError, IssueOrderError, BuildError,
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
    UnsupportedDeviceError,
)
from .dsl import Schedule, load_schedule_file

__version__ = "0.1.0"


def plan(schedule):
    """Validate ``schedule`` and return its layout plan (``print`` it); raises
    ScheduleError / IssueOrderError / ResourceError (see b200c.codegen.make_plan)."""
    from .codegen import make_plan

    return make_plan(schedule)


def generate(schedule):
    """Validate ``schedule`` and return its GeneratedKernel (see b200c.codegen)."""
    from .codegen import generate as _generate

    return _generate(schedule)


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
    "LaunchError",
    "ProtocolError",
    "UnsupportedDeviceError",
    "BarrierTimeoutError",
    "__version__",
]

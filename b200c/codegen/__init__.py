"""Code generation: Schedule -> Plan -> KernelIR -> CUDA source.

``generate(schedule)`` is the one entry point the CLI and the runtime use.
"""
from __future__ import annotations

from dataclasses import dataclass

from .launch import KERNEL_NAME, LaunchInfo


@dataclass(frozen=True)
class GeneratedKernel:
    """A generated kernel.

    Attributes:
        source: the self-contained .cu text (sm_100a; ``-DB200C_EMULATE`` with
            ``-I`` :func:`cuda_include_dir` builds the emulated sm_90a target).
        launch: how to launch it (threads, SMEM, TMA maps, grid rule).
    """

    source: str
    launch: LaunchInfo


def cuda_include_dir() -> str:
    """Folder holding b200c_ptx.cuh and b200c_emulate.cuh (for -I)."""
    from pathlib import Path

    return str(Path(__file__).with_name("cuda"))


def generate(schedule) -> GeneratedKernel:
    """Validate, plan, lower and emit one schedule.

    Raises:
        ScheduleError, ResourceError, IssueOrderError.
    """
    from .plan import make_plan
    from .lower import lower
    from .emit import emit

    plan = make_plan(schedule)  # validates
    ir = lower(plan)
    return GeneratedKernel(source=emit(ir), launch=plan.launch_info(ir))


__all__ = ["GeneratedKernel", "LaunchInfo", "KERNEL_NAME", "generate", "cuda_include_dir"]

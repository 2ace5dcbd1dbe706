"""Code generation: Schedule -> Plan -> KernelIR -> (verified) -> CUDA source.

``generate(schedule)`` is the one entry point the CLI and the runtime use;
``make_plan(schedule)`` stops after the layout (and its budget checks).

Passes, in order (each printable: ``b200c compile --emit plan|ir|cu``):
    1. validate the knobs           b200c/dsl/validate.py
    2. plan the layout, budgets     b200c/codegen/<backend>/plan.py
    3. lower to the kernel IR       b200c/codegen/<backend>/lower.py (+ roles/)
    4. verify the barrier protocol  b200c/codegen/verify.py
    5. emit CUDA                    b200c/codegen/<backend>/emit.py (+ templates/)
"""
from __future__ import annotations

from dataclasses import dataclass

from .launch import KERNEL_NAME, LaunchInfo, launch_info


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


def _backend(schedule):
    from . import tcgen05

    return tcgen05


def make_plan(schedule):
    """Validate ``schedule`` and plan its layout.

    Returns:
        The :class:`~b200c.codegen.plan.Plan` (``print`` it to see the layout).

    Raises:
        ScheduleError, IssueOrderError: invalid knobs.
        ResourceError: TMEM, SMEM, threads or registers exceeded.
    """
    from ..dsl.validate import validate_schedule

    issue = validate_schedule(schedule)
    return _backend(schedule).make_plan(schedule, issue)


def lower(schedule, plan=None):
    """Kernel IR of ``schedule`` (its plan computed unless given); verified.

    Raises:
        ScheduleError, IssueOrderError, ResourceError: see :func:`make_plan`.
        ProtocolError: the barrier protocol verifier rejected the IR (a bug).
    """
    from .verify import verify

    p = plan if plan is not None else make_plan(schedule)
    ir = _backend(schedule).lower(schedule, p)
    verify(ir)
    return ir


def generate(schedule) -> GeneratedKernel:
    """Validate, plan, lower, verify and emit one schedule.

    Raises:
        ScheduleError, ResourceError, IssueOrderError, ProtocolError.
    """
    ir = lower(schedule)
    li = launch_info(ir.plan, ir)
    return GeneratedKernel(source=_backend(schedule).emit(ir, li), launch=li)


__all__ = ["GeneratedKernel", "LaunchInfo", "KERNEL_NAME", "generate", "make_plan", "lower", "cuda_include_dir"]

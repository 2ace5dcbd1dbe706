"""Code generation: Schedule -> Plan -> KernelIR -> (verified) -> CUDA source.

``generate(schedule, target)`` is the one entry point the CLI and the runtime
use; ``make_plan(schedule, target)`` stops after the layout (and its budget
checks). ``target`` (a name, resolved by :func:`b200c.codegen.targets.resolve`, or a
:class:`~b200c.codegen.targets.Target`) picks the backend its record names:
``"sm100a"`` (default) and ``"emulate"`` the tcgen05 backend, ``"sm90a"`` the
Hopper wgmma backend.

Passes, in order (each printable: ``b200c compile --emit plan|ir|cu``):
    1. validate the knobs           b200c/dsl/validate.py + b200c/codegen/<backend>/knobs.py
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
            ``-I`` :func:`cuda_include_dir` builds the emulated sm_90a target;
            target sm90a: the native Hopper kernel).
        launch: how to launch it (threads, SMEM, TMA maps, grid rule).
        target: the canonical name of the target it was generated for.
    """

    source: str
    launch: LaunchInfo
    target: str = "sm100a"


def cuda_include_dir() -> str:
    """Folder holding b200c_ptx.cuh and b200c_emulate.cuh (for -I)."""
    from pathlib import Path

    return str(Path(__file__).with_name("cuda"))


def backend(target="sm100a"):
    """The backend package serving ``target`` (its record's ``backend``: ``codegen/tcgen05``,
    ``codegen/sm90``).

    Raises:
        TargetError: unknown target.
    """
    from .targets import resolve

    return resolve(target).backend_module()


def make_plan(schedule, target="sm100a"):
    """Validate ``schedule`` for ``target`` and plan its layout.

    Returns:
        The :class:`~b200c.codegen.plan.Plan` (``print`` it to see the layout).

    Raises:
        TargetError: unknown target.
        ScheduleError, IssueOrderError: invalid knobs, or knobs the target
            cannot honour (the message names the target and what to change).
        ResourceError: TMEM, SMEM, threads or registers exceeded.
    """
    from ..dsl.validate import validate_schedule
    from ..errors import ScheduleError

    _check_schedule_type(schedule)
    be = backend(target)
    try:
        issue = validate_schedule(schedule, be.RULES, p_aliases_s=be.P_ALIASES_S)
    except ScheduleError as e:
        hint = _written_for(schedule, target) if type(e) is ScheduleError else ""  # IssueOrderError: as it is
        if hint and len(e.args) == 1:
            e.args = (f"{e.args[0]}{hint}",)  # the same exception (its traceback names the rule that refused)
        raise
    plan = be.make_plan(schedule, issue)
    if schedule.kv_splits is not None:  # split-KV (b200c/codegen/work.py): every backend, the same way
        import msgspec

        plan = msgspec.structs.replace(plan, split_kv=schedule.kv_splits != 1, kv_splits=schedule.kv_splits)
    return plan


def _written_for(schedule, target) -> str:
    """A hint for a schedule refused by ``target``'s knob rules when it looks written for another backend's
    target (:func:`b200c.codegen.targets.schedule_target`: the native target whose rules it breaks fewest
    of); "" otherwise."""
    from .targets import resolve, schedule_target

    t, native = resolve(target), schedule_target(schedule)
    if native.backend == t.backend:
        return ""
    return (f" (this schedule looks written for {native.name}: it breaks fewer of that target's knob rules; for "
            f"{t.name}, start from b200c.default_schedule(head_dim, target={t.name!r}))")


def lower(schedule, plan=None, target="sm100a", profile: bool = False, mods=None):
    """Kernel IR of ``schedule`` for ``target`` (its plan computed unless
    given); verified. ``profile``: insert the trace stamps of a profiling build.

    Raises:
        TargetError: unknown target, or profiling asked of a backend without stamps.
        ScheduleError, IssueOrderError, ResourceError: see :func:`make_plan`.
        ProtocolError: the barrier protocol verifier rejected the IR (a bug).

    ``mods``: see :func:`generate`.
    """
    from ..errors import TargetError
    from .targets import resolve
    from .verify import verify

    t = resolve(target)
    if profile and not t.caps.profile:
        raise TargetError(f"profiling builds (trace stamps) are generated for {_profiled()} only; the "
                          f"{t.name} kernels do not stamp their roles yet")
    p = plan if plan is not None else make_plan(schedule, t)
    if mods is not None and not mods.empty:
        import msgspec

        if not t.caps.mods:
            raise TargetError(f"score_mod / mask_mod / sinks: the kernels of target {t.name!r} ({t.summary}) do not "
                              "compile mods yet; use target 'sm100a', 'emulate' or 'sm90a'")
        if profile:
            raise TargetError("profiling builds of kernels with mods are not generated; profile the kernel without "
                              "score_mod / mask_mod / sinks")
        p = msgspec.structs.replace(p, mods=mods)
    ir = t.backend_module().lower(schedule, p, profile=profile)
    verify(ir)
    return ir


def generate(schedule, target="sm100a", profile: bool = False, mods=None) -> GeneratedKernel:
    """Validate, plan, lower, verify and emit one schedule for ``target``.

    Args:
        schedule: a :class:`b200c.Schedule`.
        target: ``"sm100a"`` (default), ``"emulate"`` (same source) or ``"sm90a"``
            (any spelling :func:`b200c.codegen.targets.resolve` accepts, or a Target).
        profile: a profiling build (targets whose ``caps.profile`` is set: sm90a): every role stamps its steps with
            ``%globaltimer`` into a trace buffer (``b200c bench --profile``).
        mods: a :class:`b200c.dsl.mod_records.ModSet` (traced score_mod / mask_mod / sinks:
            :func:`b200c.dsl.mods.trace_mods`) compiled into the kernel, or None.

    Raises:
        TargetError, ScheduleError, ResourceError, IssueOrderError, ProtocolError. ScheduleError
        (one line) also for a str where the schedule goes or a Schedule where the target goes
        (``generate("sm100a", s)``: the order is ``generate(schedule, target)``).
    """
    from .targets import resolve

    if isinstance(schedule, str) or not isinstance(target, str):
        _check_argument_order(schedule, target)
    t = resolve(target)
    ir = lower(schedule, target=t, profile=profile, mods=mods)
    li = launch_info(ir.plan, ir)
    return GeneratedKernel(source=t.backend_module().emit(ir, li), launch=li, target=t.name)


def _profiled() -> str:
    from .targets import REGISTRY

    return ", ".join(t.name for t in REGISTRY if t.caps.profile) or "no target"


def _check_argument_order(schedule, target) -> None:
    """One line instead of a long repr when :func:`generate`'s arguments are swapped or the schedule
    is a str (a target name or a file path)."""
    from ..dsl.schedule import Schedule
    from ..errors import ScheduleError

    if isinstance(schedule, str) and isinstance(target, Schedule):
        raise ScheduleError(f"generate() got the target {schedule!r} first and the Schedule {target.name!r} second; "
                            f"the order is generate(schedule, target): generate(schedule, {schedule!r})")
    if isinstance(target, Schedule):
        raise ScheduleError(f"generate() got the Schedule {target.name!r} as its target; the order is "
                            f"generate(schedule, target), target a name such as 'sm100a' or 'sm90a'")
    if isinstance(schedule, str):
        raise ScheduleError(f"generate() got the str {schedule!r} where the schedule goes; the order is "
                            f"generate(schedule, target) with a b200c.Schedule (a schedule file: "
                            f"b200c.load_schedule_file(path))")


def _check_schedule_type(schedule) -> None:
    from ..dsl.schedule import Schedule
    from ..errors import ScheduleError

    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"expected a b200c.Schedule, got {type(schedule).__name__}")


__all__ = ["GeneratedKernel", "LaunchInfo", "KERNEL_NAME", "generate", "make_plan", "lower", "cuda_include_dir",
           "backend"]

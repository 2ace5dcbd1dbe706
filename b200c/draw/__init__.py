"""``b200c draw``: a picture of a schedule's pipeline, derived from its plan and IR.

* :mod:`b200c.draw.timeline`: the picture's content as plain data (lanes per
  warp role, steps in issue order, barrier edges, SMEM/TMEM maps); no
  matplotlib needed.
* :mod:`b200c.draw.backward`: the same content for a backward schedule (the
  sm_90a backward kernel's producer and consumer warpgroups over a few visits).
* :mod:`b200c.draw.render`: draws a timeline with matplotlib (the optional
  extra ``pip install "b200c[draw]"``), imported only when a picture is made.

Layering: this package imports :mod:`b200c.dsl` and :mod:`b200c.codegen`,
never the runtime or the command line.
"""
from .timeline import Edge, Lane, SmemBlock, Step, Timeline, TmemBlock, build_timeline, timeline_from_ir


def draw_schedule(schedule, output, *, target: str = "auto", iterations: int = 3):
    """Draw ``schedule``'s pipeline to ``output`` (``.svg`` or ``.png``).

    Args:
        schedule: a :class:`b200c.Schedule` (``iterations``: K/V tiles of one work item) or a
            :class:`b200c.BackwardSchedule` (``iterations``: visits, Q tiles, of one K/V tile).
        output: the picture's path; its extension picks the format.
        target: ``"auto"`` or a target name.
        iterations: 1 .. 6.

    Raises:
        DrawError: unsupported extension, iterations out of range, matplotlib missing.
        TargetError, ScheduleError, ResourceError, IssueOrderError, ProtocolError:
            the schedule cannot be planned or lowered for ``target``.
        BackwardNotSupportedError: a backward schedule whose kernel is not generated yet.
    """
    from ..dsl.backward_schedule import BackwardSchedule
    from .render import check_format, render

    fmt = check_format(output)
    if isinstance(schedule, BackwardSchedule):
        from .backward import backward_timeline

        timeline = backward_timeline(schedule, target=target, iterations=iterations)
    else:
        timeline = build_timeline(schedule, target=target, iterations=iterations)
    render(timeline, output, fmt=fmt)
    return timeline


__all__ = ["Edge", "Lane", "SmemBlock", "Step", "Timeline", "TmemBlock", "build_timeline", "timeline_from_ir",
           "draw_schedule"]

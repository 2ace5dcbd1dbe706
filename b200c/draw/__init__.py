"""``b200c draw``: a picture of a schedule's pipeline, derived from its plan and IR.

* :mod:`b200c.draw.timeline`: the picture's content as plain data (lanes per
  warp role, steps in issue order, barrier edges, SMEM/TMEM maps); no
  matplotlib needed.
* :mod:`b200c.draw.render`: draws a timeline with matplotlib (the optional
  extra ``pip install "b200c[draw]"``), imported only when a picture is made.

Layering: this package imports :mod:`b200c.dsl` and :mod:`b200c.codegen`,
never the runtime or the command line.
"""
from .timeline import Edge, Lane, SmemBlock, Step, Timeline, TmemBlock, build_timeline, timeline_from_ir


def draw_schedule(schedule, output, *, target: str = "auto", iterations: int = 3):
    """Draw ``schedule``'s pipeline to ``output`` (``.svg`` or ``.png``).

    Raises:
        DrawError: unsupported extension, iterations out of range, matplotlib missing.
        TargetError, ScheduleError, ResourceError, IssueOrderError, ProtocolError:
            the schedule cannot be planned or lowered for ``target``.
    """
    from .render import check_format, render

    fmt = check_format(output)
    timeline = build_timeline(schedule, target=target, iterations=iterations)
    render(timeline, output, fmt=fmt)
    return timeline


__all__ = ["Edge", "Lane", "SmemBlock", "Step", "Timeline", "TmemBlock", "build_timeline", "timeline_from_ir",
           "draw_schedule"]

"""Load a schedule file: ordinary Python defining a module-level ``schedule``."""
from __future__ import annotations

import runpy
from pathlib import Path

from ..errors import ScheduleError
from .schedule import Schedule


def load_schedule_file(path: str | Path) -> Schedule:
    """Run ``path`` and return its module-level ``schedule`` (a Schedule).

    The file may import other examples by path (``examples/`` is not a
    package); it runs with its own directory on ``sys.path``.

    Raises:
        ScheduleError: the file is missing, fails to run, has no ``schedule``,
            or ``schedule`` is not a :class:`b200c.Schedule`.
    """
    p = Path(path)
    if not p.is_file():
        raise ScheduleError(f"schedule file {str(p)!r} does not exist")
    import sys

    sys.path.insert(0, str(p.parent.resolve()))
    try:
        ns = runpy.run_path(str(p), run_name="__b200c_schedule__")
    except ScheduleError:
        raise
    except Exception as e:  # user code: report one line, not a traceback
        raise ScheduleError(f"schedule file {str(p)!r} failed to run: {type(e).__name__}: {e}") from None
    finally:
        sys.path.pop(0)
    if "schedule" not in ns:
        raise ScheduleError(f"schedule file {str(p)!r} defines no module-level 'schedule'")
    s = ns["schedule"]
    if not isinstance(s, Schedule):
        raise ScheduleError(
            f"schedule file {str(p)!r}: 'schedule' is a {type(s).__name__}, expected b200c.Schedule"
        )
    return s

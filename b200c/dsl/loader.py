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
        where = "" if p.is_absolute() else f" (relative to {Path.cwd()})"
        raise ScheduleError(f"schedule file {str(p)!r} does not exist{where}")
    import sys

    sys.path.insert(0, str(p.parent.resolve()))
    try:
        ns = runpy.run_path(str(p), run_name="__b200c_schedule__")
    except ScheduleError as e:  # e.g. a base schedule it loads: say which file asked
        raise type(e)(f"in schedule file {str(p)!r}: {e}") from None
    except SyntaxError as e:
        raise ScheduleError(f"schedule file {str(p)!r} line {e.lineno}: syntax error: {e.msg}") from None
    except BaseException as e:  # user code (also sys.exit): report one line, not a traceback
        if isinstance(e, KeyboardInterrupt):
            raise
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

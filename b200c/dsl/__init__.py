"""Schedule DSL: the knobs, their validation, the issue-order grammar and
schedule-file loading."""
from .schedule import Schedule
from .loader import load_schedule_file, load_with_dependencies

__all__ = ["Schedule", "load_schedule_file", "load_with_dependencies"]

"""Schedule DSL: the knobs, their validation, the issue-order grammar,
schedule-file loading and the built-in schedules (``presets``)."""
from .schedule import Schedule
from .loader import load_schedule_file, load_with_dependencies
from . import presets

__all__ = ["Schedule", "load_schedule_file", "load_with_dependencies", "presets"]

"""Load a schedule file: ordinary Python defining a module-level ``schedule``.

:func:`load_with_dependencies` also returns every file the schedule was built
from (the file, the schedule files it loads, recursively, and the helper
modules it imports from its own folder), so a cache of loaded schedules can
notice an edit to any of them.
"""
from __future__ import annotations

import importlib.machinery
import io
import os
import sys
import threading
import types
from pathlib import Path

from ..errors import ScheduleError
from .schedule import Schedule

_accept = threading.local()  # .backward: load_compile_input is loading (a BackwardSchedule is accepted)
_tracking = threading.local()  # .stack: {path: stat} per load_with_dependencies in progress
# sys.path and sys.modules are process-wide: one load at a time (re-entrant for nested loads; `b200c check`
# loads files from a thread pool, and two loads at once dropped each other's runpy module)
_load_lock = threading.RLock()


def load_schedule_file(path: str | os.PathLike) -> Schedule:
    """Run the file at ``path`` and return its module-level ``schedule`` (a Schedule).

    The file may load other schedule files (``examples/`` is not a package;
    use ``load_schedule_file(Path(__file__).with_name("base.py"))``) and
    import helper modules from its own folder: it runs with its folder on
    ``sys.path``. Helper modules from its folder that it imports for the first
    time are forgotten afterwards, so loading the file again sees their edits;
    b200c's own modules and installed packages never are, wherever the file lies.

    Raises:
        ScheduleError: the path is missing, a directory or not a ``.py`` file, the file fails to
            run (one line: exception type and message), has no ``schedule``
            (the message lists the Schedules it defines under other names), or
            ``schedule`` is not a :class:`b200c.Schedule`.
    """
    p = Path(path)
    if p.is_dir():
        inside = sorted(x.name for x in p.glob("*.py"))[:3]
        hint = f"; pass one of its schedule files, e.g. {str(p / inside[0])!r}" if inside else "; pass a .py file"
        raise ScheduleError(f"schedule file {str(p)!r} is a directory, not a file{hint}")
    if not p.is_file():
        where = "" if p.is_absolute() else f" (relative to {Path.cwd()})"
        if not p.suffix and len(p.parts) == 1 and str(p).isidentifier():  # a schedule's name, not a file
            where += (f"; {str(p)!r} looks like a schedule's name: a schedule is a b200c.Schedule or a .py file "
                      "defining one (the built-in ones: b200c.default_schedule(head_dim, target=...))")
        raise ScheduleError(f"schedule file {str(p)!r} does not exist{where}")
    if p.suffix != ".py":
        raise ScheduleError(f"{str(p)!r} is not a schedule file: a schedule file is Python (.py) defining a "
                            f"module-level `schedule`, e.g. examples/07_compute_pipeline.py")
    with _load_lock:
        return _load(p)


_loading = threading.local()  # .files: the resolved paths of the schedule files this thread is running, outermost first


def _load(p: Path) -> Schedule:
    resolved_p = str(p.resolve())
    running = getattr(_loading, "files", None)
    if running is None:
        running = _loading.files = []
    if resolved_p in running:  # a file that (through others) loads itself would recurse until Python gives up
        names = [repr(os.path.relpath(f)) if not os.path.relpath(f).startswith("..") else repr(f)
                 for f in running[running.index(resolved_p):] + [resolved_p]]
        if len(names) == 2:
            raise ScheduleError(f"schedule file {names[0]} loads itself")
        raise ScheduleError("schedule files load each other in a cycle: " + " -> ".join(names)
                            + "; one of them must build its schedule without loading the other")
    running.append(resolved_p)
    try:
        return _load_file(p, resolved_p)
    finally:
        running.pop()


def _load_file(p: Path, resolved: str) -> Schedule:
    """Run schedule file ``p`` (``resolved``: its resolved path) and return its ``schedule``."""
    folder = p.parent.resolve()  # the folder as named (a symlinked file's helpers sit next to the link)
    stack = getattr(_tracking, "stack", ())
    if stack:
        try:
            st = os.stat(resolved)  # taken before the file runs: an edit during the run shows as a change later
        except OSError as e:
            raise ScheduleError(f"schedule file {str(p)!r} cannot be read: {e.strerror or e}") from None
        for deps in stack:
            deps.setdefault(resolved, st)
    before = set(sys.modules)
    # a new list, not insert/pop in place: another thread's import may be iterating sys.path right now
    # (b200c check loads in a thread pool; an in-place pop(0) made it skip site-packages: "No module
    # named 'jinja2'", seen once in CI)
    sys.path = [str(folder), *sys.path]
    try:
        ns = _run_file(str(p))
    except ScheduleError as e:  # e.g. a base schedule it loads: say which file asked (and its line)
        raise type(e)(f"in schedule file {str(p)!r}{_line_in(e, p)}: {e}") from None
    except SyntaxError as e:
        where = f" line {e.lineno}" if e.lineno else ""
        raise ScheduleError(f"schedule file {str(p)!r}{where}: syntax error: {e.msg}") from None
    except BaseException as e:  # user code (also sys.exit): report one line, not a traceback
        if isinstance(e, KeyboardInterrupt):
            raise
        raise ScheduleError(f"schedule file {str(p)!r} failed to run{_line_in(e, p)}: {type(e).__name__}: {e}") from None
    finally:
        if sys.path and sys.path[0] == str(folder):
            sys.path = sys.path[1:]
        _forget_local_modules(before, folder)
    if "schedule" not in ns:
        others = [name for name, val in ns.items() if isinstance(val, Schedule) and not name.startswith("__")]
        if others:
            names = ", ".join(repr(n) for n in others)
            raise ScheduleError(
                f"schedule file {str(p)!r} defines no module-level 'schedule'; it defines Schedules named {names}: "
                f"assign the one to use to 'schedule' (e.g. schedule = {others[0]})"
            )
        raise ScheduleError(f"schedule file {str(p)!r} defines no module-level 'schedule'")
    s = ns["schedule"]
    from .backward_schedule import BackwardSchedule

    if isinstance(s, BackwardSchedule):
        if getattr(_accept, "backward", False):
            return s
        raise ScheduleError(
            f"schedule file {str(p)!r}: 'schedule' is a BackwardSchedule; `b200c compile` prints its plan, IR, CUDA, "
            "PTX or cubin (--emit plan|ir|cu|ptx|cubin), `b200c check` checks it and `b200c draw` draws it; the other "
            "commands, and b200c.attention's schedule=, take a forward b200c.Schedule (from Python, "
            "b200c.attention_backward(q, k, v, out, dout, lse, schedule=path) runs it)")
    if not isinstance(s, Schedule):
        raise ScheduleError(
            f"schedule file {str(p)!r}: 'schedule' is a {type(s).__name__}, expected b200c.Schedule"
        )
    return s


_RUN_NAME = "__b200c_schedule__"
_compiled: dict = {}  # (file name, source bytes) -> code object: a file read again unchanged is not recompiled


def _run_file(fname: str) -> dict:
    """Run the Python file ``fname`` as ``runpy.run_path(fname, run_name=_RUN_NAME)`` does
    for a plain .py file (a temporary module in ``sys.modules`` and ``sys.argv[0]`` set
    while it runs; its globals returned), without runpy's zip-importer probe of the path."""
    with io.open_code(fname) as f:
        source = f.read()
    code = _compiled.get((fname, source))
    if code is None:
        code = compile(source, fname, "exec")
        if len(_compiled) > 256:
            _compiled.clear()
        _compiled[(fname, source)] = code
    mod = types.ModuleType(_RUN_NAME)
    mod.__dict__.update(__file__=fname, __cached__=None, __doc__=None, __loader__=None, __package__="",
                        __spec__=None)
    saved_mod = sys.modules.get(_RUN_NAME, _MISSING)
    saved_argv0 = sys.argv[0] if sys.argv else _MISSING
    sys.modules[_RUN_NAME] = mod
    if saved_argv0 is not _MISSING:
        sys.argv[0] = fname
    try:
        exec(code, mod.__dict__)
        return mod.__dict__.copy()
    finally:
        if saved_argv0 is not _MISSING:
            sys.argv[0] = saved_argv0
        if saved_mod is _MISSING:
            sys.modules.pop(_RUN_NAME, None)
        else:
            sys.modules[_RUN_NAME] = saved_mod


_MISSING = object()


def _line_in(e: BaseException, p: Path) -> str:
    """`` at line N`` of the innermost traceback frame in file ``p`` (the line of the schedule file
    that raised or called what raised), or '' when none is."""
    import traceback

    target = os.path.realpath(p)
    line = None
    for fr in traceback.extract_tb(e.__traceback__):
        if os.path.realpath(fr.filename) == target:
            line = fr.lineno
    return f" at line {line}" if line else ""


def _forget_local_modules(before: set, folder: Path) -> None:
    """Drop the schedule's own helper modules first imported during a load from ``folder`` (so loading
    again runs their edits) and record their files as dependencies.

    A helper is a top-level module or package new in ``sys.modules`` since ``before`` that lies
    directly in ``folder`` (``folder/name.py``, ``folder/name/``) and that no other import path finds
    (neither another ``sys.path`` entry nor a meta-path finder such as an editable install's), together
    with its submodules. Everything else stays: b200c's own modules (imported before any load, and
    another thread of ``b200c check`` may be importing them right now), installed packages, and a
    package on ``sys.path`` that happens to lie in the schedule's folder (a schedule in an editable
    repository root next to ``b200c/``).
    """
    new = set(sys.modules) - before  # one C-level copy of the keys: another thread may be importing
    helpers = {name for name in new if "." not in name and _is_helper(name, folder)}
    stack = getattr(_tracking, "stack", ())
    for name in new:
        if name.partition(".")[0] not in helpers:
            continue
        mod = sys.modules.get(name)
        file = getattr(mod, "__file__", None)
        if file:
            try:
                st = os.stat(file)
            except OSError:
                st = None
            if st is not None:
                for deps in stack:
                    deps.setdefault(str(Path(file).resolve()), st)
        sys.modules.pop(name, None)


def _is_helper(name: str, folder: Path) -> bool:
    """Whether top-level module ``name`` (in ``sys.modules``) lies directly in ``folder`` and is found
    only through the schedule's folder (not through another ``sys.path`` entry or a meta-path finder)."""
    mod = sys.modules.get(name)
    spec = getattr(mod, "__spec__", None)
    file = getattr(mod, "__file__", None)
    locations = [Path(file)] if file else [Path(x) / "__init__.py" for x in getattr(mod, "__path__", ())]
    try:
        where = {(q.parent.parent if q.name.startswith("__init__.") else q.parent).resolve() for q in locations}
    except (OSError, RuntimeError):
        return False
    if where != {folder} or spec is None:
        return False
    others = []
    for entry in sys.path:
        try:
            if Path(entry or ".").resolve() != folder:
                others.append(entry)
        except (OSError, RuntimeError, TypeError):
            others.append(entry)
    for finder in sys.meta_path:  # as a fresh import without the folder on sys.path would look
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            found = find(name, others) if finder is importlib.machinery.PathFinder else find(name, None)
        except Exception:  # a broken finder or path entry: keep the module rather than guess
            return False
        if found is not None:  # an installed package (an editable install's finder too), b200c, PYTHONPATH
            return False
    return True


def load_compile_input(path: str | os.PathLike):
    """:func:`load_with_dependencies` for ``b200c compile``, ``check`` and ``draw``, whose file may also define a
    :class:`b200c.BackwardSchedule` (returned as it is).

    Raises:
        ScheduleError: as :func:`load_schedule_file`.
    """
    _accept.backward = True
    try:
        return load_with_dependencies(path)
    finally:
        _accept.backward = False


def load_with_dependencies(path: str | os.PathLike) -> tuple[Schedule, tuple[tuple[str, os.stat_result], ...]]:
    """:func:`load_schedule_file` plus every file the schedule was built from.

    Returns:
        ``(schedule, files)``: ``files`` holds ``(absolute path, os.stat_result)``
        for ``path`` itself, every schedule file it loaded (recursively) and
        the helper modules it imported from those files' folders for the
        first time, sorted by path. A schedule file's stat is taken just before
        it ran, so an edit while it ran shows as a change afterwards.

    Raises:
        ScheduleError: as :func:`load_schedule_file`.
    """
    if not hasattr(_tracking, "stack"):
        _tracking.stack = []
    deps: dict = {}
    _tracking.stack.append(deps)
    try:
        s = load_schedule_file(path)
    finally:
        _tracking.stack.pop()
    return s, tuple(sorted(deps.items()))

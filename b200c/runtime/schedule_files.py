"""Schedule files and Schedule objects as validated JSON, cached: a file is run once and again only when
it or a file it was built from changes on disk (one poll of an inotify queue while nothing did,
:mod:`b200c.runtime.watch`). Forward files (``b200c.attention(schedule=path)``) and backward files
(``b200c.attention_backward(schedule=path)``) share the cache.
"""
from __future__ import annotations

import functools
import os
import time

from ..dsl import Schedule
from ..errors import ScheduleError
from . import watch as _watch


@functools.lru_cache(maxsize=512)
def _validated_json(schedule_json: str) -> str:
    """``schedule_json`` after its knobs and hardware budgets were checked (``b200c.plan``
    for the target the schedule is written for, see :func:`b200c.codegen.targets.schedule_target`;
    cached, failures are not)."""
    from ..codegen import make_plan
    from ..codegen.targets import schedule_target

    s = Schedule.from_json(schedule_json)
    make_plan(s, schedule_target(s))
    return schedule_json


def _json_of_schedule(schedule) -> str:
    """Validated JSON of a Schedule object: its canonical JSON (computed when the immutable
    Schedule was made), checked once per distinct text."""
    text = schedule._json
    if text is None:  # a knob that JSON cannot hold: validate() names it
        schedule.validate()
        text = schedule.to_json()
    return _validated_json(text)


_RACY_S = 2.0  # a file modified this close to when it was read may change again without a new mtime


class _FileEntry:
    """A loaded schedule file: its JSON, what its files looked like when read, and its watch state
    (``watcher``: the :class:`~b200c.runtime.watch.Watcher` holding watches on ``files``, None
    when they cannot be watched; ``gen``: its generation when the files were last verified;
    ``cwd``: for a relative path, the working folder it was resolved in: the watches answer for
    that folder only, so the fast path also compares ``os.getcwd()``)."""

    __slots__ = ("sig", "deps", "json", "racy_until", "digests", "files", "watcher", "tried", "gen", "cwd")

    def __init__(self, sig, deps, json, racy_until, digests, files, cwd=None):
        self.sig, self.deps, self.json, self.racy_until, self.digests = sig, deps, json, racy_until, digests
        self.files = files
        self.cwd = cwd
        self.watcher = None
        self.tried = None  # the Watcher that watch() was last tried with
        self.gen = -1


_files: dict[tuple[str, bool], _FileEntry] = {}  # (path as given, backward) -> the loaded file


def _sig(st) -> tuple:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest(path: str) -> bytes | None:
    import hashlib

    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).digest()
    except OSError:
        return None


def _json_of_file(path: str, backward: bool = False) -> str:
    """Validated JSON of a schedule file, reloaded when it or any file it was built from changes.
    ``backward``: the file's ``schedule`` is a :class:`b200c.BackwardSchedule` (the JSON is its
    ``to_json()``), else a :class:`b200c.Schedule`.

    A cached file is verified by stat'ing the file (by the path as given: no
    resolve) and the files it was built from (see
    :func:`b200c.dsl.load_with_dependencies`); another inode, size, mtime or
    ctime reloads. While the newest of them was modified less than 2 s before
    it was read (an edit within one timestamp tick keeps the mtime), their
    contents are compared by sha256 as well. Once verified, files on a local
    file system are watched (:mod:`b200c.runtime.watch`): while no event
    arrived since the last verification (and, for a relative path, the working
    folder is the one it was resolved in), a call returns the cached JSON after
    one poll of the event queue instead of the stats.

    Raises:
        ScheduleError: the file is missing, invalid or its schedule infeasible; with ``backward``, its
            ``schedule`` is not a BackwardSchedule.
    """
    e = _files.get((path, backward))
    if e is not None:
        w = e.watcher
        if w is not None and w is _watch.current and w.quiet(e.gen) and (e.cwd is None or os.getcwd() == e.cwd):
            return e.json
        return _verify_file(path, e, backward)
    return _load_file(path, backward)


def _verify_file(path: str, e: _FileEntry, backward: bool = False) -> str:
    w = _watch.watcher()
    if e.tried is not w:  # first check after the load, or a forked child's new queue
        e.tried = w
        e.watcher = w if w.watch(e.files) else None
    gen = w.sync() if e.watcher is not None else -1  # events after this fail the next quiet()
    stat = os.stat
    try:
        fresh = _sig(stat(path)) == e.sig
        if fresh:
            for d, s in e.deps:
                if _sig(stat(d)) != s:
                    fresh = False
                    break
    except OSError:
        fresh = False
    if fresh and e.racy_until is not None:
        fresh = all(_digest(d) == h for d, h in e.digests)
        if fresh and time.time() >= e.racy_until:
            e.racy_until = None
    if fresh:
        e.gen = gen if e.racy_until is None else -1  # while racy, every call compares the contents
        return e.json
    return _load_file(path, backward)


def _load_file(path: str, backward: bool = False) -> str:
    from ..dsl import load_with_dependencies

    _files.pop((path, backward), None)
    t_read = time.time()
    if backward:
        schedule, deps = _load_backward(path)
        text = schedule.to_json()
    else:
        schedule, deps = load_with_dependencies(path)  # raises ScheduleError for a missing path
        text = _validated_json(schedule.to_json())
    try:
        main = os.stat(path)
    except OSError:
        return text  # gone already: not cached
    sigs = {d: _sig(st) for d, st in deps}
    main_path = os.path.realpath(path)
    if sigs.get(main_path, _sig(main)) != _sig(main):
        return text  # changed while it ran: not cached, the next call loads it again
    newest = max([main.st_mtime_ns] + [st.st_mtime_ns for _, st in deps]) / 1e9
    racy = t_read < newest + _RACY_S
    files = [main_path] + [d for d in sigs if d != main_path]
    digests = tuple((f, _digest(f)) for f in files) if racy else ()
    if len(_files) >= 256:
        _files.clear()
    # the path as given (its folders and links; a relative one from the working folder) and the real files
    cwd = None if os.path.isabs(path) else os.getcwd()
    watched = tuple(dict.fromkeys([os.path.join(cwd, path) if cwd else path] + files))
    _files[(path, backward)] = _FileEntry(_sig(main), tuple((d, s) for d, s in sigs.items() if d != main_path), text,
                              newest + _RACY_S if racy else None, digests, watched, cwd)
    return text


def _load_backward(path: str):
    """(BackwardSchedule, files) of a backward schedule file (see :func:`b200c.dsl.load_with_dependencies`).

    Raises:
        ScheduleError: as :func:`b200c.load_schedule_file`; the file's ``schedule`` is not a BackwardSchedule.
    """
    from ..dsl.backward_schedule import BackwardSchedule
    from ..dsl.loader import load_compile_input

    schedule, deps = load_compile_input(path)
    if not isinstance(schedule, BackwardSchedule):
        raise ScheduleError(f"attention_backward: schedule must be a b200c.BackwardSchedule or the path of a file "
                            f"defining one (b200c.default_backward_schedule(head_dim) is the built-in one); schedule "
                            f"file {path!r} defines a {type(schedule).__name__} (a forward schedule: b200c.attention's)")
    return schedule.validate(), deps


@functools.lru_cache(maxsize=64)
def _backward_of_json(text: str):
    from ..dsl.backward_schedule import BackwardSchedule

    return BackwardSchedule.from_json(text)


def backward_schedule_of_file(path) -> "object":
    """The :class:`b200c.BackwardSchedule` a backward schedule file defines, loaded once and reloaded
    when the file or any file it was built from changes (as ``b200c.attention(schedule=path)`` does for
    forward schedule files: see :func:`_json_of_file`).

    Raises:
        ScheduleError: the file is missing or invalid, or its ``schedule`` is not a BackwardSchedule.
    """
    return _backward_of_json(_json_of_file(os.fspath(path), backward=True))

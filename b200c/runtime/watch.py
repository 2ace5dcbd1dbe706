"""A change signal for schedule files: one Linux inotify queue, polled once per call.

:func:`b200c.attention` with a schedule *path* must see an edit of any file
the schedule was built from on the very next call. Checking that by ``stat``
costs about 2 us per file (example 07 is built from 7 files); this module
lets a call skip the stats when the kernel says nothing happened:

* :meth:`Watcher.watch` adds inotify watches on each file (its inode: writes
  through any hard link), its folder (writes, creations, deletions, renames,
  attribute changes of its entries) and every ancestor folder of the path
  (renames or replacements of a folder or symbolic link on the way), all in
  one queue. The kernel queues an event before the modifying system call
  returns, so an edit that finished before a call is pending when it polls.
* :meth:`Watcher.quiet` is one ``poll`` of that queue (about 0.8 us, one poll object per thread) plus a
  generation compare; :meth:`Watcher.sync` drains the queue and bumps the
  generation, after which the caller verifies by ``stat`` as before.

Nothing runs in the background: the queue is only polled and drained by the
calls themselves. The inotify system calls and the event parsing are the
``inotify_simple`` package's (:class:`inotify_simple.INotify`, opened
non-blocking and close-on-exec); only the file system type check is a ctypes
``statfs(2)`` here, since no standard-library call returns ``f_type``
(``os.statvfs`` does not).

The watcher is only the fast "nothing changed" answer: every event (also an
unrelated file in a watched folder, a queue overflow) sends the next call of
every cached schedule file back to the ``stat`` check, which stays the
authority. Files are only watched on local file systems (ext2/3/4, XFS,
Btrfs, tmpfs, overlayfs, F2FS, ZFS, ramfs): network file systems (NFS, CIFS,
FUSE) do not report edits made on other hosts, so their files are stat'ed on
every call. Without inotify (another OS, ``inotify_simple`` not installed, no
inotify queue to be had, a watch limit reached) every call stats, as before.
A forked child gets its own queue (the parent's is shared with the child
otherwise, and a read in one would hide events from the other).
Not seen: a mount placed over a folder on the path after it was watched.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import sys
import threading

# statfs(2) f_type of file systems whose edits are all reported by inotify (local ones)
LOCAL_FS = frozenset((
    0xEF53,      # ext2/3/4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0x794C7630,  # overlayfs
    0xF2F52010,  # f2fs
    0x2FC12FC1,  # zfs
    0x858458F6,  # ramfs
))


class Watcher:
    """One inotify queue for every watched schedule file (see the module docstring).

    Attributes:
        generation: bumped (before the drain) each time :meth:`sync` finds events.
    """

    def __init__(self) -> None:
        self.generation = 0
        self._lock = threading.Lock()
        self._inotify = None
        self._poll = None
        if not sys.platform.startswith("linux"):
            return
        try:
            from inotify_simple import INotify, flags

            statfs = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).statfs
            inotify = INotify(nonblocking=True)  # close-on-exec by default
        except (ImportError, OSError, AttributeError):  # not installed / no inotify queue / no statfs
            return
        statfs.argtypes = (ctypes.c_char_p, ctypes.c_void_p)
        self._statfs = statfs
        f = flags
        self._file_mask = f.MODIFY | f.ATTRIB | f.CLOSE_WRITE | f.DELETE_SELF | f.MOVE_SELF | f.MASK_ADD
        self._ancestor_mask = (f.CREATE | f.DELETE | f.MOVED_FROM | f.MOVED_TO | f.DELETE_SELF | f.MOVE_SELF
                               | f.MASK_ADD)
        self._folder_mask = self._ancestor_mask | f.MODIFY | f.ATTRIB | f.CLOSE_WRITE
        self._inotify = inotify
        self._fd = inotify.fileno()
        self._threads = threading.local()
        self._poll = self._poll_this_thread

    def _poll_this_thread(self, timeout: int):
        # one poll object per thread: a select.poll object refuses two threads polling it at once
        # (RuntimeError "concurrent poll() invocation", seen with 8 threads calling b200c)
        p = getattr(self._threads, "poll", None)
        if p is None:
            p = self._threads.poll = select.poll()
            p.register(self._fd, select.POLLIN)
        return p.poll(timeout)

    def __del__(self) -> None:
        ino = getattr(self, "_inotify", None)
        if ino is not None:
            ino.close()

    @property
    def available(self) -> bool:
        """Whether this process has an inotify queue."""
        return self._poll is not None

    def quiet(self, generation: int) -> bool:
        """True when no event arrived since a check that recorded ``generation`` (from :meth:`sync`)."""
        return not self._poll(0) and self.generation == generation

    def sync(self) -> int:
        """Drain the queue; return the generation a check starting now records once it verified its files.

        Events arriving after the drain stay queued and fail the next :meth:`quiet`.
        """
        if self._poll is not None and self._poll(0):
            with self._lock:
                self.generation += 1  # first: a concurrent quiet() that sees the drained queue fails on this
                try:
                    while self._inotify.read(timeout=0):
                        pass
                except BlockingIOError:
                    pass
        return self.generation

    def _local(self, path: str) -> bool:
        buf = ctypes.create_string_buffer(512)  # struct statfs; f_type (a long) comes first
        if self._statfs(os.fsencode(path), buf) != 0:
            return False
        return (ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF) in LOCAL_FS

    def _add_watch(self, path: str, mask: int) -> bool:
        try:
            self._inotify.add_watch(path, mask)
        except OSError:  # e.g. ENOSPC: fs.inotify.max_user_watches reached; ENOENT
            return False
        return True

    def watch(self, paths) -> bool:
        """Watch each file of ``paths`` (absolute), its folder and every ancestor folder.

        Call it before the check whose result is cached. Returns False (and the
        caller must keep stat'ing) if inotify is unavailable, a path is
        relative, a file is not on a local file system, or a watch cannot be
        added (e.g. ``fs.inotify.max_user_watches`` reached).
        """
        if self._poll is None:
            return False
        ancestors: dict[str, int] = {}
        for p in paths:
            if not os.path.isabs(p):
                return False
            if not self._local(p) or not self._add_watch(p, self._file_mask):
                return False
            folder = os.path.dirname(p)
            ancestors[folder] = self._folder_mask
            while True:
                up = os.path.dirname(folder)
                if up == folder:
                    break
                ancestors.setdefault(up, self._ancestor_mask)
                folder = up
        return all(self._add_watch(d, mask) for d, mask in ancestors.items())


current: Watcher | None = None  # this process's Watcher, once made
_watcher_lock = threading.Lock()


def watcher() -> Watcher:
    """This process's :class:`Watcher` (created on first use; :data:`current` afterwards)."""
    global current
    w = current
    if w is None:
        with _watcher_lock:
            if current is None:
                current = Watcher()
            w = current
    return w


def _forget_in_child() -> None:
    global current
    current = None  # the child makes its own queue (entries watched by the parent's one are re-verified)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

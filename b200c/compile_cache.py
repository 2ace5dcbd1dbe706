"""On-disk caches that make a fresh ``b200c compile`` fast: the compiled
jinja2 templates (Python bytecode), the issue-order grammar's LALR tables,
parsed issue orders (:mod:`b200c.dsl.order_syntax`) and the protocol
verifier's verdicts (:mod:`b200c.codegen.verdicts`).

All live under ``<root>/compile/``, where ``<root>`` is the kernel cache
root (``$B200C_CACHE_DIR``, else ``platformdirs.user_cache_dir("b200c")``),
in a folder per Python version and library versions, so two interpreters or
an upgrade never read each other's entries. They only save time: every entry
is checked before use (a damaged, truncated or stale entry is ignored and
rebuilt), and where the folder cannot be created or written, b200c compiles
without them. ``B200C_COMPILE_CACHE=0`` turns them all off.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

_OFF = ("0", "off", "no", "false")


def cache_root() -> Path:
    """b200c's cache root, not created: ``$B200C_CACHE_DIR`` (``~`` expanded), else
    ``platformdirs.user_cache_dir("b200c")``. Shared by these compile caches and the
    kernel cache (:func:`b200c.runtime.cache.cache_dir`)."""
    env = os.environ.get("B200C_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    fast = _linux_user_cache()
    if fast is not None:
        return Path(fast) / "b200c"
    import platformdirs

    return Path(platformdirs.user_cache_dir("b200c"))


def _linux_user_cache() -> str | None:
    """The XDG user cache folder in the plain Linux cases, where platformdirs gives the
    same answer (tested): an absolute ``$XDG_CACHE_HOME``, else ``~/.cache`` with an
    absolute ``$HOME``. None elsewhere (other systems, Android, a relative or blank
    variable): the caller asks platformdirs, whose import costs a fresh process ~9 ms."""
    if sys.platform != "linux" or "ANDROID_DATA" in os.environ:
        return None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg:
        return xdg if os.path.isabs(xdg) else None
    home = os.environ.get("HOME", "")
    return os.path.expanduser("~/.cache") if os.path.isabs(home) else None


def compile_cache_dir(kind: str, *versions: str) -> Path | None:
    """The folder for cache ``kind`` (created), or None when caching is off or impossible.

    Args:
        kind: a short name (``"templates"``, ``"grammar"``).
        versions: what the cached data depends on besides the Python version
            (library versions, options); part of the folder name.
    """
    if os.environ.get("B200C_COMPILE_CACHE", "").strip().lower() in _OFF:
        return None
    try:
        root = cache_root()
        tag = hashlib.sha256("\0".join((sys.implementation.cache_tag or "", sys.version) + versions)
                             .encode()).hexdigest()[:16]
        folder = root / "compile" / f"{kind}-{tag}"
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError):  # a file in the way, no permission, a bad path: no cache
        return None
    return folder


def read_entry(folder: Path, name: str) -> bytes | None:
    """The payload of entry ``name`` in ``folder`` written by :func:`write_entry`,
    or None when it is absent, unreadable, or its bytes do not match the
    sha256 stored in front of them (a damaged entry is a miss, never an error)."""
    try:
        data = (folder / name).read_bytes()
    except (OSError, ValueError):
        return None
    digest, payload = data[:32], data[32:]
    if len(digest) != 32 or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def write_entry(folder: Path, name: str, payload: bytes) -> None:
    """Write ``payload`` behind its sha256 as entry ``name`` of ``folder``,
    atomically (temporary file + rename); any OS error skips the write."""
    path = folder / name
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except (OSError, ValueError):
        try:
            os.remove(tmp)
        except OSError:
            pass


_TEMPLATE_RECORD = b"b200c-template-code-1\n"


def template_bytecode_cache(*versions: str):
    """A jinja2 bytecode cache in :func:`compile_cache_dir` ``("templates", ...)``, or None.

    Each entry holds a header line, the template source's checksum (jinja2's
    ``Bucket.checksum``) on one line and the marshalled code, behind a sha256
    of all that: an entry whose bytes changed in any way, or made from another
    source, is ignored (the template is compiled again and the entry
    rewritten), never loaded. Writes go to a temporary file renamed into
    place; a write that fails is skipped. (``marshal.loads`` on the bytes: a
    third of the time jinja2's own record format, read through a file object,
    takes.)
    """
    folder = compile_cache_dir("templates", *versions, _TEMPLATE_RECORD.decode())  # apart from other formats
    if folder is None:
        return None
    import marshal

    import jinja2

    class CheckedBytecodeCache(jinja2.FileSystemBytecodeCache):
        """jinja2's file-system bytecode cache with a sha256 over every entry."""

        def load_bytecode(self, bucket) -> None:
            """Fill ``bucket`` from its file if the file is whole, matches its digest and
            was made from the template's current source."""
            record = read_entry(folder, self.pattern % (bucket.key,))
            if record is None or not record.startswith(_TEMPLATE_RECORD):
                return
            checksum, sep, code = record[len(_TEMPLATE_RECORD):].partition(b"\n")
            if not sep or checksum != str(bucket.checksum).encode():
                return
            try:
                bucket.code = marshal.loads(code)
            except Exception:  # noqa: BLE001 - a record that does not load is a cache miss
                bucket.reset()
                return
            if not hasattr(bucket.code, "co_code"):
                bucket.reset()

        def dump_bytecode(self, bucket) -> None:
            """Write ``bucket`` atomically (temporary file + rename); skip on any OS error."""
            record = _TEMPLATE_RECORD + str(bucket.checksum).encode() + b"\n" + marshal.dumps(bucket.code)
            write_entry(folder, self.pattern % (bucket.key,), record)

    return CheckedBytecodeCache(str(folder), pattern="%s.jinja2-bytecode")

"""On-disk content-addressed cache of built kernels.

Layout: ``<cache_dir>/<key>/`` holds ``kernel.cu``, ``kernel.cubin``,
``launch.json`` (``LaunchInfo.to_json()``), ``build.log`` and
``manifest.json`` (the key and the sha256 of ``kernel.cubin`` and
``launch.json``, written at build time). An entry folder appears only by an
atomic rename of a finished build; it is a hit only if its manifest names its
key and both hashes match what is on disk now, so a truncated, zero-filled or
replaced file is never loaded: the entry is rebuilt (with a one-line warning).
``<cache_dir>/locks/<key>.lock`` serializes builders of one key across
processes; ``<cache_dir>/failed/<key>/`` keeps the source and log of the last
failed build for the error message.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import filelock

from ..errors import BuildError

ENTRY_FILES = ("kernel.cu", "kernel.cubin", "launch.json", "build.log", "manifest.json")
HASHED_FILES = ("kernel.cubin", "launch.json")  # what the runtime uses; their sha256 is in manifest.json
MANIFEST_FORMAT = 1


def cache_dir() -> Path:
    """Cache root: env ``B200C_CACHE_DIR`` or ``platformdirs.user_cache_dir("b200c")`` (created).

    Raises:
        BuildError: the folder cannot be created (e.g. the path is a file).
    """
    from ..compile_cache import cache_root

    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BuildError(
            f"kernel cache folder {str(root)!r} cannot be created ({e.strerror or e}); "
            "set B200C_CACHE_DIR to a writable folder"
        ) from None
    return root


def cache_key(source: str, flags: list[str], target: str, nvcc_version: str, b200c_version: str, extra: str = "") -> str:
    """sha256 hex digest over everything that determines the cubin.

    Args:
        source: generated .cu text.
        flags: nvcc flags.
        target: canonical target name.
        nvcc_version: ``nvcc --version`` text.
        b200c_version: ``b200c.__version__``.
        extra: further inputs (text of included headers for the emulation target).
    """
    blob = json.dumps([source, list(flags), target, nvcc_version, b200c_version, extra])
    return hashlib.sha256(blob.encode()).hexdigest()


def entry_dir(key: str, root: Path | None = None) -> Path:
    """Folder of the cache entry for ``key`` (may not exist)."""
    return (root or cache_dir()) / key


def failed_dir(key: str, root: Path | None = None) -> Path:
    """Folder keeping the source and log of the last failed build of ``key``."""
    return (root or cache_dir()) / "failed" / key


def sha256_bytes(data: bytes) -> str:
    """sha256 hex digest of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    return sha256_bytes(path.read_bytes())  # cubins are at most a few MB


def write_manifest(folder: Path, key: str) -> None:
    """Record ``key`` and the sha256 of :data:`HASHED_FILES` of a finished build in ``folder``."""
    digests = {name: _sha256_file(folder / name) for name in HASHED_FILES}
    text = json.dumps({"format": MANIFEST_FORMAT, "key": key, "sha256": digests}, sort_keys=True)
    (folder / "manifest.json").write_text(text + "\n")


def verify_entry(entry: Path, key: str | None = None) -> tuple[str | None, str | None]:
    """Check a cache entry against its manifest.

    Args:
        entry: the entry folder.
        key: the expected key (default: the folder's name).

    Returns:
        ``(None, cubin_sha256)`` for a sound entry, else ``(problem, None)``:
        ``problem`` is ``"absent"`` when nothing is there, otherwise a short
        phrase saying what is damaged (e.g. ``"kernel.cubin does not match its
        recorded sha256"``). Never raises for anything found on disk.
    """
    key = key or entry.name
    if not os.path.lexists(entry):
        return "absent", None
    if not entry.is_dir():
        return "not a folder", None
    try:
        raw = (entry / "manifest.json").read_bytes()
    except OSError:
        return "manifest.json is missing or unreadable (entry written by an older b200c or damaged)", None
    try:
        manifest = json.loads(raw.decode())
        digests = manifest["sha256"]
        ok = manifest.get("format") == MANIFEST_FORMAT and manifest.get("key") == key and isinstance(digests, dict)
    except (ValueError, KeyError, TypeError, AttributeError):
        return "manifest.json is not valid", None
    if not ok:
        return "manifest.json does not describe this entry", None
    for name in ENTRY_FILES:
        if not (entry / name).is_file():
            return f"{name} is missing", None
    for name in HASHED_FILES:
        try:
            actual = _sha256_file(entry / name)
        except OSError as e:
            return f"{name} is unreadable ({e.strerror or e})", None
        if actual != digests.get(name):
            return f"{name} does not match its recorded sha256", None
    return None, digests["kernel.cubin"]


def is_complete(entry: Path) -> bool:
    """True when ``entry`` holds every entry file and they match its manifest."""
    return verify_entry(entry)[0] is None


def remove(path: Path) -> None:
    """Remove a file, link or folder at ``path`` if there is one (errors ignored)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            path.unlink()
    except OSError:
        pass


def key_lock(key: str, root: Path | None = None, timeout: float = -1) -> filelock.FileLock:
    """A (not yet acquired) inter-process lock for building ``key``; ``timeout`` in seconds, -1 waits forever.

    Raises:
        BuildError: the ``locks`` folder cannot be created.
    """
    d = (root or cache_dir()) / "locks"
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BuildError(
            f"kernel cache lock folder {str(d)!r} cannot be created ({e.strerror or e}); "
            "remove what is in the way or set B200C_CACHE_DIR to another folder"
        ) from None
    return filelock.FileLock(str(d / f"{key}.lock"), timeout=timeout)


def publish(built: Path, key: str, root: Path | None = None) -> Path:
    """Atomically move a finished build folder ``built`` (with its manifest) into place as the entry of ``key``.

    Call with the key's lock held. If a sound entry already exists (built
    outside the lock protocol), it is kept and ``built`` is discarded; a
    damaged one is replaced. Returns the entry folder.
    """
    dest = entry_dir(key, root)
    if is_complete(dest):
        shutil.rmtree(built, ignore_errors=True)
        return dest
    remove(dest)
    os.replace(built, dest)
    return dest

"""On-disk content-addressed cache of built kernels.

Layout: ``<cache_dir>/<key>/`` holds ``kernel.cu``, ``kernel.cubin``,
``launch.json`` (``LaunchInfo.to_json()``) and ``build.log``. An entry folder
appears only by an atomic rename of a finished build, so a folder with all
four files (and a non-empty cubin) is a hit. ``<cache_dir>/locks/<key>.lock``
serializes builders of one key across processes; ``<cache_dir>/failed/<key>/``
keeps the source and log of the last failed build for the error message.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import filelock

ENTRY_FILES = ("kernel.cu", "kernel.cubin", "launch.json", "build.log")


def cache_dir() -> Path:
    """Cache root: env ``B200C_CACHE_DIR`` or ``platformdirs.user_cache_dir("b200c")`` (created)."""
    env = os.environ.get("B200C_CACHE_DIR")
    if env:
        root = Path(env).expanduser()
    else:
        import platformdirs

        root = Path(platformdirs.user_cache_dir("b200c"))
    root.mkdir(parents=True, exist_ok=True)
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


def is_complete(entry: Path) -> bool:
    """True when ``entry`` holds every entry file and a non-empty cubin."""
    try:
        return all((entry / f).is_file() for f in ENTRY_FILES) and (entry / "kernel.cubin").stat().st_size > 0
    except OSError:
        return False


def key_lock(key: str, root: Path | None = None, timeout: float = -1) -> filelock.FileLock:
    """A (not yet acquired) inter-process lock for building ``key``; ``timeout`` in seconds, -1 waits forever."""
    d = (root or cache_dir()) / "locks"
    d.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(d / f"{key}.lock"), timeout=timeout)


def publish(built: Path, key: str, root: Path | None = None) -> Path:
    """Atomically move a finished build folder ``built`` into place as the entry of ``key``.

    Call with the key's lock held. If a complete entry already exists (built
    outside the lock protocol), it is kept and ``built`` is discarded.
    Returns the entry folder.
    """
    dest = entry_dir(key, root)
    if is_complete(dest):
        shutil.rmtree(built, ignore_errors=True)
        return dest
    if dest.exists():  # an incomplete leftover (e.g. removed files): replace it
        shutil.rmtree(dest, ignore_errors=True)
    os.replace(built, dest)
    return dest

"""Build generated kernels into cubins through the on-disk cache; ninja drives nvcc.

``build_many`` finds the cache misses, takes one inter-process lock per
missing key (sorted, so overlapping builders cannot deadlock), checks again,
writes one ``build.ninja`` for all remaining kernels in a temporary folder
inside the cache and runs ``ninja -j N`` once; each finished kernel folder is
then renamed atomically into the cache.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..codegen import GeneratedKernel, LaunchInfo
from ..errors import BuildError, PerformanceWarning
from ..nvcc import CompileResult, first_error_line
from . import cache
from ..codegen.targets import resolve
from ..toolchain import find_nvcc, header_digest_text, nvcc_flags, nvcc_version, warn_untested

log = logging.getLogger("b200c.runtime")


@dataclass(frozen=True)
class BuiltKernel:
    """A kernel in the cache.

    Attributes:
        cubin_path: the cached ``kernel.cubin``.
        launch: its launch configuration.
        target: canonical target (``"sm100a"`` or ``"emulate"``).
        key: cache key (sha256 hex).
        built: True if this call compiled it, False if it was cached.
        cubin_sha256: sha256 of the cubin recorded at build time (checked
            again when the cubin is loaded; ``""``: not checked).
    """

    cubin_path: Path
    launch: LaunchInfo
    target: str
    key: str
    built: bool
    cubin_sha256: str = ""


def find_ninja() -> str:
    """Path of ninja: ``PATH``, else the ``ninja`` pip package's ``BIN_DIR``.

    Raises:
        BuildError: neither exists.
    """
    p = shutil.which("ninja")
    if p:
        return p
    try:
        import ninja  # the pip package

        cand = Path(ninja.BIN_DIR) / "ninja"
        if cand.is_file():
            return str(cand)
    except ImportError:
        pass
    raise BuildError("ninja not found on PATH and the 'ninja' Python package is not installed; pip install ninja")


def build(generated_kernel: GeneratedKernel, target: str) -> BuiltKernel:
    """Build one kernel (or find it in the cache), without progress output.

    Raises:
        BuildError: unknown target, nvcc/ninja missing, or compilation failed.
    """
    name = generated_kernel.launch.name
    return build_many([(name, generated_kernel)], target, progress=False)[0]


def build_many(
    items: list[tuple[str, GeneratedKernel]],
    target: str,
    jobs: int | None = None,
    progress: bool = True,
) -> list[BuiltKernel]:
    """Build every kernel of ``items`` missing from the cache in one ninja run.

    Args:
        items: ``(name, generated_kernel)`` pairs; names label progress/errors.
        target: a target name (``"sm100a"``, ``"emulate"``, ``"sm90a"``, any spelling
            :func:`b200c.codegen.targets.resolve` accepts) or Target; each kernel must have
            been generated for the target whose source it builds (``emulate``: ``sm100a``).
        jobs: parallel nvcc processes (default: CPU count).
        progress: let ninja print its ``[k/n]`` lines to stdout.

    Returns:
        One :class:`BuiltKernel` per item, in order.

    Every cache hit is verified against the sha256 recorded at build time;
    a damaged entry (truncated, zero-filled, missing or foreign files) is
    rebuilt with a one-line warning on the ``b200c.runtime`` logger.

    Warns:
        PerformanceWarning: a kernel built now on a native target whose ptxas report shows register
            spills or serialized wgmmas (it runs, slower than intended; once, when it is built).

    Raises:
        TargetError: unknown target.
        BuildError: a kernel generated for another target, nvcc/ninja missing,
            the cache folder unusable, or any kernel failed to compile
            (kernels that compiled are still cached).
    """
    from ..version import __version__

    t = resolve(target)
    target = t.name
    for name, gk in items:
        if resolve(gk.target).source != t.source:
            raise BuildError(f"kernel {name!r} was generated for target {gk.target!r}, which target {t.name!r} does "
                             f"not build (it builds the {t.source} source); generate it with target={t.name!r}")
    nvcc = find_nvcc()
    version = nvcc_version(nvcc)
    warn_untested(nvcc)  # once per process: the spill-free builds are checked with TESTED_NVCC
    flags = nvcc_flags(target)
    extra = header_digest_text(target)
    root = cache.cache_dir()

    keys = [cache.cache_key(gk.source, flags, target, version, __version__, extra) for _, gk in items]
    digests: dict[str, str] = {}
    missing: dict[str, tuple[str, GeneratedKernel]] = {}
    for key, item in zip(keys, items):
        if key in missing or key in digests:
            continue
        entry = cache.entry_dir(key, root)
        problem, digest = cache.verify_entry(entry, key)
        if problem is None:
            digests[key] = digest
            continue
        if problem != "absent":
            log.warning("b200c: kernel cache entry %s is damaged (%s); rebuilding it", entry, problem)
        missing[key] = item

    built_now: set[str] = set()
    if missing:
        try:
            with contextlib.ExitStack() as stack:
                for key in sorted(missing):
                    stack.enter_context(cache.key_lock(key, root))
                todo = {}
                for key, item in missing.items():  # another process may have built it meanwhile
                    problem, digest = cache.verify_entry(cache.entry_dir(key, root), key)
                    if problem is None:
                        digests[key] = digest
                    else:
                        todo[key] = item
                if todo:
                    _ninja_build(todo, nvcc, flags, target, root, jobs, progress)
                    built_now = set(todo)
                    for key in todo:
                        problem, digest = cache.verify_entry(cache.entry_dir(key, root), key)
                        if problem is not None:
                            raise BuildError(f"kernel cache entry {cache.entry_dir(key, root)} is unusable right "
                                             f"after its build ({problem}); check the disk or set B200C_CACHE_DIR")
                        digests[key] = digest
        except OSError as e:  # the cache folder itself is unusable (permissions, a file in the way, disk full)
            raise BuildError(f"kernel cache {root}: {e.strerror or e}: {e.filename or ''}; "
                             "set B200C_CACHE_DIR to a writable folder") from None

    return [
        BuiltKernel(cache.entry_dir(key, root) / "kernel.cubin", gk.launch, target, key, key in built_now, digests[key])
        for key, (_, gk) in zip(keys, items)
    ]


def _slow_build_note(name: str, target: str, log_text: str) -> str:
    """The PerformanceWarning text of a native build whose ptxas report (``-Xptxas -v``) shows register
    spills or serialized wgmmas (C7510-C7519) in any of its kernels, else ``""``: the kernel runs, slower
    than its schedule intends, and a schedule of one's own is where that usually comes from."""
    from ..toolchain import TESTED_NVCC

    report = CompileResult(Path(), log_text)  # ptxas' report, read as `b200c check` reads it
    found = []
    for fn in report.functions():
        spills = report.spills(fn)
        if spills and sum(spills):
            found.append(f"{fn}: {spills[0]} B spill stores, {spills[1]} B spill loads")
    found += sorted(set(report.serialized_wgmma()))
    if not found:
        return ""
    return (f"kernel {name!r} (target {target}) built, but ptxas reports {'; '.join(found)}: it runs slower than "
            "its schedule intends (spilled registers go through local memory; serialized wgmmas each wait for the "
            "one before). Give the warp role more registers or keep fewer values live (smaller tiles, fewer "
            f"stages); `b200c check <schedule file>` shows each kernel's registers and spills. The built-in "
            f"schedules compile without either with nvcc {TESTED_NVCC}")


def _ninja_escape(text: str) -> str:
    return text.replace("$", "$$")


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name) or "kernel"


def _write_ninja(path: Path, todo: dict[str, tuple[str, GeneratedKernel]], nvcc: str, flags: list[str]) -> None:
    cmd_flags = " ".join(shlex.quote(f) for f in flags)
    lines = [
        f"nvcc = {_ninja_escape(shlex.quote(nvcc))}",
        f"flags = {_ninja_escape(cmd_flags)}",
        "rule nvcc",
        # -Xptxas -v: ptxas' resource report in the log (spills, serialized wgmmas: _slow_build_note); the SASS
        # and the cache key do not change (the cubin records ptxas' options)
        "  command = $nvcc $flags -Xptxas -v -o $out $in > $log 2>&1 || { cat $log; exit 1; }",
        "  description = nvcc $name",
        "",
    ]
    for key, (name, _) in todo.items():
        lines += [
            f"build {key}/kernel.cubin: nvcc {key}/kernel.cu",
            f"  log = {key}/build.log",
            f"  name = {_safe_name(name)}",
        ]
    path.write_text("\n".join(lines) + "\n")


def _ninja_build(
    todo: dict[str, tuple[str, GeneratedKernel]],
    nvcc: str,
    flags: list[str],
    target: str,
    root: Path,
    jobs: int | None,
    progress: bool,
) -> None:
    """Compile ``todo`` (key -> (name, kernel)) with one ninja run; publish successes.

    Call with the keys' locks held. Raises BuildError naming the first failure.
    """
    ninja = find_ninja()
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        for key, (_, gk) in todo.items():
            d = tmp / key
            d.mkdir()
            (d / "kernel.cu").write_text(gk.source)
            (d / "launch.json").write_text(gk.launch.to_json())
        _write_ninja(tmp / "build.ninja", todo, nvcc, flags)
        n = jobs if jobs and jobs > 0 else (os.cpu_count() or 1)
        cmd = [ninja, "-k", "0", "-j", str(n)]
        try:
            r = subprocess.run(
                cmd,
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                stdout=None if progress else subprocess.PIPE,
                stderr=subprocess.STDOUT if not progress else None,
                text=True,
            )
        except OSError as e:
            raise BuildError(f"cannot run ninja {ninja!r}: {e}") from None

        failures: list[tuple[str, Path, str]] = []
        slow: list[str] = []
        native = resolve(target).emulates is None  # an emulation target's software model spills by design
        for key, (name, _) in todo.items():
            d = tmp / key
            cubin = d / "kernel.cubin"
            if cubin.is_file() and cubin.stat().st_size > 0 and (d / "build.log").is_file():
                note = _slow_build_note(name, target, (d / "build.log").read_text(errors="replace")) if native else ""
                if note:
                    slow.append(note)
                cache.write_manifest(d, key)
                cache.publish(d, key, root)
                continue
            log_path = d / "build.log"
            log_text = log_path.read_text(errors="replace") if log_path.is_file() else (r.stdout or "")
            fdir = cache.failed_dir(key, root)
            shutil.rmtree(fdir, ignore_errors=True)
            fdir.mkdir(parents=True)
            shutil.copy(d / "kernel.cu", fdir / "kernel.cu")
            (fdir / "build.log").write_text(log_text)
            line = first_error_line(log_text).replace(f"{key}/kernel.cu", str(fdir / "kernel.cu"))
            failures.append((name, fdir, line))
        for note in slow:
            warnings.warn(note, PerformanceWarning, stacklevel=4)
        if failures:
            name, fdir, line = failures[0]
            more = ""
            if len(failures) > 1:
                more = f" ({len(failures) - 1} more failed: {', '.join(f[0] for f in failures[1:])})"
            raise BuildError(
                f"nvcc failed for kernel {name!r} (target {target}): {line}; "
                f"generated file: {fdir / 'kernel.cu'}; full log: {fdir / 'build.log'}{more}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

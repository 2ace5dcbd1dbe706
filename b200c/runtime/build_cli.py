"""``b200c build FILE...``: build many schedule files in one parallel ninja run."""
from __future__ import annotations

import sys

from ..errors import B200cError


def run_build(paths: list[str], target: str, jobs: int | None) -> int:
    """Load, generate and build every schedule file in ``paths``.

    Prints ninja's ``[k/n]`` progress, then one line per schedule:
    ``built  <path>`` or ``cached <path>``. Errors (bad schedule, missing
    nvcc, compile failure) print one line to stderr.

    Args:
        paths: schedule files (Python defining ``schedule``).
        target: ``"sm100a"``, ``"emulate"`` or ``"sm90a"`` (native Hopper).
        jobs: parallel nvcc processes (None: CPU count).

    Returns:
        0 when every schedule built or was cached, else 1.
    """
    import b200c
    from b200c.codegen import generate

    from .build import build_many

    items = []
    failed = False
    for p in paths:
        try:
            items.append((p, generate(b200c.load_schedule_file(p), codegen_target(target))))
        except B200cError as e:
            print(f"b200c build: {p}: {e}", file=sys.stderr)
            failed = True
    if failed:
        return 1
    try:
        results = build_many(items, target, jobs=jobs, progress=True)
    except B200cError as e:
        print(f"b200c build: {e}", file=sys.stderr)
        return 1
    for (p, _), r in zip(items, results):
        print(f"{'built ' if r.built else 'cached'} {p}")
    return 0


def codegen_target(build_target: str) -> str:
    """The code-generation target of a build target: ``sm90a`` for the Hopper
    spellings, else ``sm100a`` (the emulation target builds the sm100a source).
    Unknown names pass through and are reported by the build."""
    t = str(build_target).strip().lower()
    return "sm90a" if t in ("sm90a", "sm_90a", "sm_90", "sm90") else "sm100a"

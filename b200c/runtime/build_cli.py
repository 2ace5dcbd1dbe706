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
        target: ``"sm100a"`` or ``"emulate"``.
        jobs: parallel nvcc processes (None: CPU count).

    Returns:
        0 when every schedule built or was cached, else 1.
    """
    import b200c

    from .build import build_many

    items = []
    failed = False
    for p in paths:
        try:
            items.append((p, b200c.generate(b200c.load_schedule_file(p))))
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

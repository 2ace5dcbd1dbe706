"""``b200c build FILE...``: build many schedule files in one parallel ninja run."""
from __future__ import annotations


def run_build(paths: list[str], target: str, jobs: int | None) -> int:
    """Load, generate and build every schedule file in ``paths``.

    Prints ninja's ``[k/n]`` progress, then one line per schedule:
    ``built  <path>`` or ``cached <path>``.

    Args:
        paths: schedule files (Python defining ``schedule``).
        target: ``"sm100a"``, ``"emulate"`` or ``"sm90a"`` (native Hopper).
        jobs: parallel nvcc processes (None: CPU count).

    Returns:
        0 when every schedule built or was cached.

    Raises:
        ScheduleError (and subclasses): a file is missing or invalid; the
            message starts with the first such file and counts the others.
            Nothing is built then.
        BuildError: unknown target, nvcc/ninja missing, or a kernel failed
            to compile (the others are still cached).
    """
    import b200c
    from b200c.codegen import generate

    from ..errors import B200cError
    from .build import build_many

    items = []
    failures = []
    for p in paths:
        try:
            items.append((p, generate(b200c.load_schedule_file(p), codegen_target(target))))
        except B200cError as e:
            failures.append((p, e))
    if failures:
        p, e = failures[0]
        more = ""
        if len(failures) > 1:
            more = f" ({len(failures) - 1} more failed: {', '.join(f for f, _ in failures[1:])})"
        raise type(e)(f"{p}: {e}{more}")
    results = build_many(items, target, jobs=jobs, progress=True)
    for (p, _), r in zip(items, results):
        print(f"{'built ' if r.built else 'cached'} {p}")
    return 0


def codegen_target(build_target: str) -> str:
    """The code-generation target of a build target: ``sm90a`` for the Hopper
    spellings, else ``sm100a`` (the emulation target builds the sm100a source).
    Unknown names pass through and are reported by the build."""
    t = str(build_target).strip().lower()
    return "sm90a" if t in ("sm90a", "sm_90a", "sm_90", "sm90") else "sm100a"

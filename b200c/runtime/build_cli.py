"""``b200c build FILE...``: build many schedule files in one parallel ninja run."""
from __future__ import annotations


def run_build(paths: list[str], target="auto", jobs: int | None = None) -> int:
    """Load, generate and build every schedule file in ``paths``.

    Prints ninja's ``[k/n]`` progress, then one line per schedule:
    ``built  <path> (<target>) -> <cubin>`` or ``cached <path> (<target>) -> <cubin>``.

    Args:
        paths: schedule files (Python defining ``schedule``).
        target: ``"auto"`` (each schedule's own native target: sm90a for a Hopper schedule,
            else sm100a), or a target name or Target (``"sm100a"``, ``"emulate"``, ``"sm90a"``)
            for all of them.
        jobs: parallel nvcc processes (None: CPU count).

    Returns:
        0 when every schedule built or was cached.

    Raises:
        TargetError: unknown target.
        ScheduleError (and subclasses): a file is missing or invalid; the
            message starts with the first such file and counts the others.
            Nothing is built then.
        BuildError: nvcc/ninja missing, or a kernel failed to compile (the
            others are still cached).
    """
    from .. import codegen
    from ..codegen.targets import AUTO, resolve_or_auto, schedule_target
    from ..dsl import load_schedule_file
    from ..errors import B200cError
    from .build import build_many

    wanted = resolve_or_auto(target)
    groups: dict = {}  # build target -> [(path, generated)]
    failures = []
    for p in paths:
        try:
            s = load_schedule_file(p)
            t = schedule_target(s) if wanted == AUTO else wanted
            groups.setdefault(t.name, (t, []))[1].append((p, codegen.generate(s, t.source_target())))
        except B200cError as e:
            failures.append((p, e))
    if failures:
        p, e = failures[0]
        more = ""
        if len(failures) > 1:
            more = f" ({len(failures) - 1} more failed: {', '.join(f for f, _ in failures[1:])})"
        raise type(e)(f"{p}: {e}{more}")
    for t, items in groups.values():
        results = build_many(items, t, jobs=jobs, progress=True)
        for (p, _), r in zip(items, results):
            print(f"{'built ' if r.built else 'cached'} {p} ({t.name}) -> {r.cubin_path}")
    return 0

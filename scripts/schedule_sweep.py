"""Long sweep of the schedule space (issue 19): draw schedules, generate each, optionally compile.

    python scripts/schedule_sweep.py -n 5000 --seed 1
    python scripts/schedule_sweep.py -n 300 --seed 2 --compile --jobs 2

Draws ``-n`` schedules with hypothesis from tests/schedule_space.py (every example, variant and
Hopper schedule as a start point, 1..4 knobs changed, the native or the other target), runs
validation + plan + generate on each, and with ``--compile`` also nvcc (``-Xptxas -v``) on every
distinct generated source (``--jobs`` at once). Prints the table: samples, generated, refused by
rule (the raising rule function), refusals whose message names no knob, internal errors (each
with a reproducer: the example file, the ``replace(...)`` and the target), and with ``--compile``
compiled / spilling / nvcc failures. Exit status 1 when there is an internal error, a refusal
naming no knob, a spill or an nvcc failure (the property of tests/test_schedule_space.py). ``--json`` also writes every sample's outcome to a file.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def draw_samples(n: int, seed: int, max_changes: int = 4):
    """Run hypothesis for ``n`` examples; returns the list of (key, schedule, target)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    import schedule_space as space

    drawn = []

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=("generate",))
    @given(space.schedules(max_changes))
    def collect(sample):
        drawn.append(sample)

    collect()
    return drawn


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--samples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-changes", type=int, default=4)
    ap.add_argument("--compile", action="store_true", help="also nvcc every distinct generated kernel")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", help="write each sample's outcome here")
    a = ap.parse_args(argv)

    import schedule_space as space

    t0 = time.time()
    samples = draw_samples(a.samples, a.seed, a.max_changes)
    import dataclasses

    import b200c

    knobs = [f.name for f in dataclasses.fields(b200c.Schedule) if f.name not in ("name", "blog_stage")]
    unnamed = []  # refusals whose message names no knob (it must say what to change)
    refused = collections.Counter()
    internal = []
    generated = {}  # source key -> (kernel, reproducer)
    n_generated = 0
    records = []
    for key, s, target in samples:
        kind, what, msg = space.outcome(s, target)
        rep = space.reproducer(key, s, target)
        rec = {"schedule": rep, "outcome": kind}
        if kind == "refused":
            refused[what] += 1
            if not any(k in msg for k in knobs):
                unnamed.append((rep, msg))
            rec["rule"], rec["message"] = what, msg
        elif kind == "generated":
            n_generated += 1
            generated.setdefault(space.source_key(what), (what, rep))
            rec["source"] = space.source_key(what)
        else:
            internal.append((rep, what, msg))
            rec["error"] = f"{what}: {msg}"
        records.append(rec)
    t_gen = time.time() - t0

    compiled = {}
    if a.compile and generated:
        work = Path(tempfile.mkdtemp(prefix="b200c_sweep_"))
        items = list(generated.items())
        done = 0

        def one(item):
            k, (kernel, rep) = item
            return k, space.compile_outcome(kernel, work)

        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
            for k, res in ex.map(one, items):
                compiled[k] = res
                done += 1
                if done % 20 == 0:
                    print(f"  compiled {done}/{len(items)} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        for rec in records:
            if rec.get("source") in compiled:
                rec["nvcc"] = compiled[rec["source"]]

    print(f"schedule sweep: seed {a.seed}, {len(samples)} samples, up to {a.max_changes} knobs changed "
          f"({t_gen:.0f} s to generate)")
    by_target = collections.Counter(str(t) for _, _, t in samples)  # Target records and names alike
    print(f"  targets: {', '.join(f'{t} {c}' for t, c in sorted(by_target.items()))}")
    print(f"  generated:        {n_generated} ({len(generated)} distinct kernels)")
    print(f"  refused:          {sum(refused.values())}")
    for rule, c in refused.most_common():
        print(f"    {c:6d}  {rule}")
    print(f"  refusals naming no knob: {len(unnamed)}")
    for rep, msg in unnamed[:10]:
        print(f"    {rep}\n      {msg[:300]}")
    print(f"  internal errors:  {len(internal)}")
    for rep, what, msg in internal:
        print(f"    {rep}\n      {what}: {msg[:300]}")
    bad = bool(internal or unnamed)
    if a.compile:
        spills = [(generated[k][1], r) for k, r in compiled.items() if r.get("spill_bytes")]
        fails = [(generated[k][1], r) for k, r in compiled.items() if "error" in r]
        stack = sum(1 for r in compiled.values() if r.get("stack_frame"))
        print(f"  compiled:         {len(compiled)} distinct kernels ({stack} with a stack frame, "
              f"{time.time() - t0:.0f} s in all)")
        print(f"  spilling:         {len(spills)}")
        for rep, r in spills:
            print(f"    {rep}\n      {r['spill_bytes']} spill bytes, {r['registers']} registers, "
                  f"{r['stack_frame']} B stack")
        print(f"  nvcc failures:    {len(fails)}")
        for rep, r in fails:
            print(f"    {rep}\n      {r['error'][:300]}")
        bad = bad or bool(spills or fails)
    if a.json:
        Path(a.json).write_text(json.dumps(records, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

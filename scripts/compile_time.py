"""How long ``b200c compile`` (schedule file -> CUDA text) takes, cold and warm.

    python scripts/compile_time.py [--runs 10] [--warm 20] [--examples FILE[:TARGET] ...] [--no-bytecode]

What is measured (every number is the median over ``--runs`` fresh processes,
or over ``--warm`` in-process repetitions; milliseconds):

    python -c pass      bare start-up of this Python (interpreter + site), for
                        comparison: no b200c code runs.
    process total (a)   wall time of a fresh ``python -m b200c compile FILE -o
                        OUT --target T`` process, measured from outside: start-up,
                        ``import b200c``, the compile, writing OUT, exit.
    import b200c        inside a fresh process: the time of ``import b200c``.
    cold compile (b)    inside the same fresh process, after ``import b200c``:
                        ``b200c.cli.main(["compile", FILE, "-o", OUT, "--target",
                        T])`` (argument parsing, the CLI's own imports, loading the
                        schedule file, validate, plan, lower, verify, emit, write).
                        This is the number the goal "cold compile < 50 ms" holds.
    warm compile        the same ``main([...])`` call repeated in one process
                        after a first call (templates and modules already loaded);
                        it still reads and runs the schedule file each time.
    warm generate()     ``b200c.generate(schedule, target)`` repeated in one process
                        on the loaded schedule: validate, plan, lower, verify, emit
                        (the protocol verifier's verdict for this kernel is already
                        known after the first call: it is not simulated again).
    new schedule        ``b200c.generate()`` in the same warm process of a schedule
                        it has not compiled before (the loaded one renamed, a new
                        name each repetition, so its IR and verdict key are new and
                        the verifier simulates it; no on-disk entry exists for it).
    empty cache (b)     (b) once, in a fresh process whose compile cache folder
                        is new and empty (``B200C_CACHE_DIR`` pointed at a
                        temporary folder: no template bytecode, parsed issue
                        orders or verifier verdicts): the first compile after
                        installing or upgrading b200c, or of a schedule never
                        compiled before.

Every fresh process but the empty-cache one uses the normal cache folder; one
unmeasured run per example fills it first. The script also checks that every
run wrote the same bytes, and says if any process imported torch.

Exit status: 0 when both goals (cold compile < 50 ms, warm < 5 ms) are met, 1
when one is not (the last line says which).

Python bytecode: the child processes run as a default Python does, writing
and reading ``.pyc`` files (as a ``pip install`` of b200c has them), but into
a temporary ``PYTHONPYCACHEPREFIX`` so the checkout stays clean;
``PYTHONDONTWRITEBYTECODE`` is dropped for them. ``--no-bytecode`` keeps the
environment as it is instead (with ``PYTHONDONTWRITEBYTECODE=1`` every b200c
module is compiled from source in every process).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXAMPLES = (
    "examples/07_compute_pipeline.py:sm100a",
    "examples/18_tma_l2_promotion.py:sm100a",
    "examples/hopper/h11_persistent.py:sm90a",
)

# runs in a fresh process: argv = file, target, out, warm repetitions; prints one JSON line
_DRIVER = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
import b200c
t1 = time.perf_counter()
from b200c.cli import main
f, target, out, warm = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
args = ["compile", f, "-o", out, "--target", target]
rc = main(args)
t2 = time.perf_counter()
times, gen, new = [], [], []
for _ in range(warm):
    s = time.perf_counter()
    rc |= main(args)
    times.append(time.perf_counter() - s)
if warm:
    schedule = b200c.load_schedule_file(f)
    for _ in range(warm):
        s = time.perf_counter()
        b200c.generate(schedule, target)
        gen.append(time.perf_counter() - s)
    for i in range(warm):
        fresh = schedule.replace(name=f"{schedule.name}_new_{i}_{time.time_ns()}")
        s = time.perf_counter()
        b200c.generate(fresh, target)
        new.append(time.perf_counter() - s)
print(json.dumps({"rc": rc, "import": t1 - t0, "cold": t2 - t1,
                  "warm": statistics.median(times) if times else None,
                  "generate": statistics.median(gen) if gen else None,
                  "new": statistics.median(new) if new else None,
                  "torch": "torch" in sys.modules}))
"""

_BYTECODE = {"pycache": None}  # the temporary PYTHONPYCACHEPREFIX, or None: environment as it is


def _env(cache_dir: str | None = None) -> dict:
    env = dict(os.environ)
    if _BYTECODE["pycache"] is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = _BYTECODE["pycache"]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    if cache_dir is not None:
        env["B200C_CACHE_DIR"] = cache_dir
    return env


def _run(cmd: list[str], env: dict) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"compile_time: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return dt, r.stdout


def _driver(example: str, target: str, out: Path, warm: int, env: dict) -> dict:
    _, stdout = _run([sys.executable, "-c", _DRIVER, example, target, str(out), str(warm)], env)
    return json.loads(stdout.strip().splitlines()[-1])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def measure(example: str, target: str, runs: int, warm: int, work: Path) -> dict:
    """Median times (seconds) for one example; see the module docstring for what each one is."""
    env = _env()
    out = work / "x.cu"
    _driver(example, target, out, 0, env)  # fills the template cache, warms the OS file cache
    digests = {_digest(out)}
    total, imp, cold, torch_loaded = [], [], [], False
    for _ in range(runs):
        dt, _ = _run([sys.executable, "-m", "b200c", "compile", example, "-o", str(out), "--target", target], env)
        total.append(dt)
        digests.add(_digest(out))
        d = _driver(example, target, out, 0, env)
        imp.append(d["import"])
        cold.append(d["cold"])
        torch_loaded |= d["torch"]
        digests.add(_digest(out))
    w = _driver(example, target, out, warm, env)
    digests.add(_digest(out))
    with tempfile.TemporaryDirectory(prefix="b200c_empty_cache_") as empty:
        e = _driver(example, target, out, 0, _env(empty))
    digests.add(_digest(out))
    if len(digests) != 1:
        sys.exit(f"compile_time: {example} gave different outputs across runs")
    return {"total": statistics.median(total), "import": statistics.median(imp), "cold": statistics.median(cold),
            "warm": w["warm"], "generate": w["generate"], "new": w["new"], "empty": e["cold"], "torch": torch_loaded or w["torch"] or e["torch"]}


def main(argv=None) -> int:
    """Measure and print the table (see the module docstring); returns the exit status (0: both goals met,
    1: a goal not met)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10, help="fresh processes per example (default 10)")
    p.add_argument("--warm", type=int, default=20, help="in-process repetitions for the warm median (default 20)")
    p.add_argument("--examples", nargs="+", default=list(DEFAULT_EXAMPLES), metavar="FILE[:TARGET]",
                   help="schedule files relative to the repository root, each with its target "
                        "(default: " + " ".join(DEFAULT_EXAMPLES) + ")")
    p.add_argument("--no-bytecode", action="store_true",
                   help="run the processes with the environment as it is (see the module docstring)")
    args = p.parse_args(argv)
    if args.runs < 1 or args.warm < 1:
        p.error("--runs and --warm must be >= 1")
    with tempfile.TemporaryDirectory(prefix="b200c_compile_time_") as work:
        if not args.no_bytecode:
            _BYTECODE["pycache"] = str(Path(work) / "pycache")
            _run([sys.executable, "-c", "pass"], _env())  # fills the bytecode folder for start-up
        bare = statistics.median(_run([sys.executable, "-c", "pass"], _env())[0] for _ in range(args.runs))
        pyc = "as the environment has it" if args.no_bytecode else ".pyc written and read (PYTHONPYCACHEPREFIX)"
        print(f"b200c compile timing: median of {args.runs} fresh processes (warm: {args.warm} in-process repeats), "
              f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, bytecode: {pyc}")
        print(f"python -c pass (bare start-up): {bare * 1e3:.1f} ms")
        head = (f"{'example':<24} {'target':<6} {'process total (a)':>17} {'import b200c':>12} "
                f"{'cold compile (b)':>16} {'warm compile':>12} {'warm generate()':>15} {'new schedule':>12} "
                f"{'empty cache (b)':>15}")
        print(head)
        print("-" * len(head))
        worst_cold = worst_warm = 0.0
        for spec in args.examples:
            example, _, target = spec.partition(":")
            r = measure(example, target or "sm100a", args.runs, args.warm, Path(work))
            worst_cold, worst_warm = max(worst_cold, r["cold"]), max(worst_warm, r["warm"])
            print(f"{Path(example).stem:<24} {target or 'sm100a':<6} {r['total'] * 1e3:>14.1f} ms "
                  f"{r['import'] * 1e3:>9.1f} ms {r['cold'] * 1e3:>13.1f} ms {r['warm'] * 1e3:>9.1f} ms "
                  f"{r['generate'] * 1e3:>12.1f} ms {r['new'] * 1e3:>9.1f} ms {r['empty'] * 1e3:>12.1f} ms"
                  + ("   (torch was imported!)" if r["torch"] else ""))
    ok_cold, ok_warm = worst_cold < 0.050, worst_warm < 0.005
    print(f"goal: cold compile (b) < 50 ms: {'met' if ok_cold else 'NOT met'} (worst {worst_cold * 1e3:.1f} ms); "
          f"warm < 5 ms: {'met' if ok_warm else 'NOT met'} (worst {worst_warm * 1e3:.1f} ms)")
    return 0 if ok_cold and ok_warm else 1


if __name__ == "__main__":
    sys.exit(main())

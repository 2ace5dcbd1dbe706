#!/usr/bin/env python3
"""The native Hopper GPU job in one command (target sm90a), called by
``scripts/gpu_job.py --target sm90a --files ...`` (or run directly):

    python3 scripts/gpu_job.py --target sm90a --files examples/hopper/*.py --out $OUT

1. build every schedule for sm90a twice into the kernel cache: release, and a
   debug build with bounded mbarrier waits (``B200C_BOUNDED_WAIT=1``) whose
   stuck wait traps and is reported (role, barrier, CTA, iteration);
2. numerics, in worker subprocesses under a watchdog (a hang or crash in one
   schedule restarts the worker past it): the debug builds on the small
   shapes, then the release builds on every shape (small + the blog's 4K, 8K,
   16K) and a BSHD-layout case; the same inputs, FP32 reference and
   FlashAttention rule as scripts/gpu_job.py:
   max|out - ref| <= 2 max|sdpa_bf16 - ref| + 1e-3;
3. ``b200c bench`` of the schedules that passed (the blog's shapes, next to
   torch SDPA cuDNN / FA2 / efficient): table on stdout, and
   $OUT/hopper-progression.md, bench.csv, bench.json, bench.png;
4. ``b200c bench --profile`` of the last schedule: $OUT/profile/<name>.trace.json
   (Chrome/Perfetto) and .timeline.png.

One table at the end; everything also in $OUT/hopper_job.json.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

SMALL = ["s128", "s256", "s384", "odd_work"]
ALL = SMALL + ["4k", "8k", "16k"]


def emit(ev: dict) -> None:
    """One worker event on stdout (``@@`` + JSON) for the parent."""
    sys.stdout.write("@@" + json.dumps(ev) + "\n")
    sys.stdout.flush()


# ---- worker (one process; the parent restarts it past a crash or hang) ---------------------------
def fake_worker(files: list, shapes: list, debug: bool, plan: str) -> int:
    """``B200C_FAKE_WORKER="stem:hang|crash|fail,..."``: exercise the parent's watchdog without a GPU."""
    what = dict(x.split(":") for x in plan.split(",") if x)
    emit({"ev": "start", "device": "fake"})
    for shape in shapes:
        for f in files:
            emit({"ev": "step", "what": f"{Path(f).stem} {shape} bhsd", "file": f})
            kind = what.get(Path(f).stem, "ok")
            if kind == "hang":
                time.sleep(3600)
            if kind == "crash":
                return 3
            emit({"ev": "result", "file": f, "shape": shape, "layout": "bhsd", "debug": debug, "tol": 0.02,
                  "max_err": 0.01 if kind == "ok" else 0.5, "status": "PASS" if kind == "ok" else "FAIL"})
    emit({"ev": "done"})
    return 0


def worker(files: list, shapes: list, debug: bool) -> int:
    """Numerics of ``files`` on ``shapes`` (target sm90a), one result event per case; exit 3 when the CUDA
    context died (a trap), so the parent restarts past that schedule."""
    if os.environ.get("B200C_FAKE_WORKER"):
        return fake_worker(files, shapes, debug, os.environ["B200C_FAKE_WORKER"])
    import torch
    import torch.nn.functional as F

    import b200c
    from b200c.runtime import synchronize
    from gpu_inputs import SHAPES, make_inputs, reference

    emit({"ev": "start", "device": torch.cuda.get_device_name(0)})
    for shape in shapes:
        B, H, S, _ = SHAPES[shape]
        emit({"ev": "step", "what": f"inputs {shape}"})
        q, k, v = make_inputs(B, H, S, seed=S + H, device="cuda")
        scale = 128 ** -0.5
        ref = reference(q, k, v, scale)
        ref_err = (F.scaled_dot_product_attention(q, k, v, scale=scale).float() - ref).abs().max().item()
        tol = 2 * ref_err + 1e-3
        cases = [("bhsd", q, k, v)]
        if shape == "s256":  # FlashAttention's (B, S, H, D) layout through strides, no copies
            cases.append(("bshd", *(t.transpose(1, 2).contiguous() for t in (q, k, v))))
        for f in files:
            for layout, a, b_, c_ in cases:
                emit({"ev": "step", "what": f"{Path(f).stem} {shape} {layout}", "file": f})
                row = {"ev": "result", "file": f, "shape": shape, "layout": layout, "debug": debug, "tol": tol,
                       "ref_bf16_err": ref_err}
                try:
                    t0 = time.time()
                    out = b200c.attention(a, b_, c_, schedule=f, target="sm90a", layout=layout)
                    synchronize()
                    row["wall_s"] = round(time.time() - t0, 3)
                    if layout == "bshd":
                        out = out.transpose(1, 2)
                    err = (out.float() - ref).abs().max().item()
                    row.update(max_err=err, nan=bool(torch.isnan(out).any().item()))
                    row["status"] = "PASS" if err <= tol and not row["nan"] else "FAIL"
                except Exception as e:  # noqa: BLE001 - reported; a dead context ends the worker
                    row.update(status="ERROR", error=f"{type(e).__name__}: {e}"[:500])
                    emit(row)
                    if "restart the process" in row["error"] or "illegal" in row["error"].lower():
                        return 3
                    continue
                emit(row)
        del q, k, v, ref
        torch.cuda.empty_cache()
    emit({"ev": "done"})
    return 0


# ---- parent --------------------------------------------------------------------------------------
def run_worker_set(files, shapes, debug, step_timeout, deadline, log) -> list:
    """Run the numerics worker over ``files`` x ``shapes``; a file whose run hangs
    (no output for ``step_timeout`` s) or crashes the worker is recorded as HANG or
    ERROR and the worker restarts without it (rows already measured are kept; a
    restart may measure some again, the last row of each case counts)."""
    rows: dict = {}  # (file, shape, layout) -> result row
    bad: set = set()  # files that hung or crashed
    while time.time() < deadline:
        todo = [f for f in files if f not in bad]
        if not todo:
            break
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if debug:
            env["B200C_BOUNDED_WAIT"] = "1"
            env.setdefault("B200C_WAIT_TIMEOUT_MS", "3000")
        cmd = [sys.executable, __file__, "--worker", "--shapes", ",".join(shapes), "--files", *todo]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put(None)], daemon=True).start()
        current, finished = None, False

        def fail(status, why):
            f = current["file"]
            bad.add(f)
            rows[(f, current["what"].split()[1], "-")] = {"file": f, "shape": current["what"].split()[1],
                                                          "layout": "-", "debug": debug, "status": status,
                                                          "error": why}

        while True:
            try:
                ln = lines.get(timeout=max(1.0, min(step_timeout, deadline - time.time())))
            except queue.Empty:
                log(f"[watchdog] no progress for {step_timeout:.0f} s at {current and current['what']}; "
                    f"killing the worker")
                proc.kill()
                proc.wait()
                if current and current.get("file"):
                    fail("HANG", f"no progress for {step_timeout:.0f} s at {current['what']}")
                else:
                    finished = True
                break
            if ln is None:
                rc = proc.wait()
                if rc == 0:
                    finished = True
                elif current and current.get("file"):
                    fail("ERROR", f"worker exit {rc} at {current['what']}")
                else:
                    log(f"[watchdog] the worker died (exit {rc}) before its first schedule; giving up on this set")
                    for f in todo:
                        rows[(f, "-", "-")] = {"file": f, "shape": "-", "layout": "-", "debug": debug,
                                               "status": "ERROR", "error": f"worker exit {rc} before any schedule ran"}
                    finished = True
                break
            if not ln.startswith("@@"):
                log("   | " + ln.rstrip())
                continue
            ev = json.loads(ln[2:])
            if ev["ev"] == "step":
                current = ev
            elif ev["ev"] == "result":
                rows[(ev["file"], ev["shape"], ev["layout"])] = ev
                mark = f"err {ev['max_err']:.3e} tol {ev['tol']:.3e}" if "max_err" in ev else ev.get("error", "")
                log(f"{'debug  ' if debug else 'release'} {Path(ev['file']).stem:28s} {ev['shape']:9s} "
                    f"{ev['layout']:5s} {ev['status']:5s} {mark}")
                if ev["status"] == "ERROR" and ("restart the process" in ev.get("error", "")
                                                or "illegal" in ev.get("error", "").lower()):
                    bad.add(ev["file"])  # the context died with it: the worker exits next
        if finished:
            break
    return list(rows.values())


def main(argv=None) -> int:
    """The job (module docstring); exit status 0 when every schedule passed every case."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", nargs="+", default=[str(p) for p in sorted((ROOT / "examples/hopper").glob("h*.py"))])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/b200c_hopper"))
    ap.add_argument("--shapes", default=",".join(ALL), help="release-build shapes (debug builds: the small ones)")
    ap.add_argument("--deadline-s", type=float, default=560.0, help="the whole job")
    ap.add_argument("--step-timeout", type=float, default=90.0, help="seconds without progress = a hang")
    ap.add_argument("--skip", default="", help="comma list of: build, debug, release, bench, profile")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    if args.worker:
        return worker(args.files, shapes, os.environ.get("B200C_BOUNDED_WAIT") == "1")

    t0 = time.time()
    deadline = t0 + args.deadline_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    files = [str(Path(f).resolve()) for f in args.files]
    report: dict = {"target": "sm90a", "files": files}
    logf = open(out / "hopper_job.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    if "build" not in skip:
        from b200c import load_schedule_file
        from b200c.codegen import generate
        from b200c.runtime.build import build_many

        items = [(Path(f).stem, generate(load_schedule_file(f), "sm90a")) for f in files]
        for debug in (False, True):
            if debug:
                os.environ["B200C_BOUNDED_WAIT"] = "1"
                os.environ.setdefault("B200C_WAIT_TIMEOUT_MS", "3000")
            t = time.time()
            try:
                build_many(items, "sm90a", progress=False)
                log(f"built {len(items)} {'debug' if debug else 'release'} sm90a kernels in {time.time() - t:.0f} s")
            except Exception as e:  # noqa: BLE001
                log(f"BUILD FAILED ({'debug' if debug else 'release'}): {e}")
            os.environ.pop("B200C_BOUNDED_WAIT", None)
    results = []
    if "debug" not in skip:
        results += run_worker_set(files, [s for s in shapes if s in SMALL], True, args.step_timeout, deadline, log)
    if "release" not in skip:
        results += run_worker_set(files, shapes, False, args.step_timeout, deadline, log)
    report["numerics"] = results
    passed = [f for f in files if all(r["status"] == "PASS" for r in results if r["file"] == f)
              and any(r["file"] == f for r in results)]
    bench_files = passed if results else files
    if "bench" not in skip and bench_files and time.time() < deadline - 30:
        cmd = [sys.executable, "-m", "b200c.cli", "bench", *bench_files, "--iters", str(args.iters),
               "--md", str(out / "hopper-progression.md"), "--csv", str(out / "bench.csv"),
               "--json", str(out / "bench.json"), "--png", str(out / "bench.png"), "--quiet"]
        log("$ " + " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=max(30, deadline - time.time() - 20))
        log(r.stdout + r.stderr)
        report["bench_rc"] = r.returncode
    if "profile" not in skip and bench_files and time.time() < deadline - 20:
        cmd = [sys.executable, "-m", "b200c.cli", "bench", bench_files[-1], "--shapes", "8x16x4096", "--iters", "3",
               "--warmup", "1", "--no-baselines", "--quiet", "--profile", str(out / "profile")]
        log("$ " + " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=max(20, deadline - time.time() - 5))
        log(r.stdout[-2000:] + r.stderr[-2000:])
        report["profile_rc"] = r.returncode
    report["seconds"] = round(time.time() - t0, 1)
    (out / "hopper_job.json").write_text(json.dumps(report, indent=1))
    # the table
    log("\n" + "=" * 110)
    log(f"{'schedule':32s} {'debug small':>14s} {'release small':>14s} {'4k':>6s} {'8k':>6s} {'16k':>6s} "
        f"{'bshd':>6s} {'worst err/tol':>14s}")
    for f in files:
        rs = [r for r in results if r["file"] == f]

        def cell(pred):
            sel = [r for r in rs if pred(r)]
            if not sel:
                return "-"
            ok = sum(r["status"] == "PASS" for r in sel)
            return "ok" if ok == len(sel) else f"{len(sel) - ok} BAD"

        worst = max((r["max_err"] / r["tol"] for r in rs if r.get("max_err") is not None), default=float("nan"))
        log(f"{Path(f).stem:32s} {cell(lambda r: r['debug']):>14s} "
            f"{cell(lambda r: not r['debug'] and r['shape'] in SMALL and r['layout'] == 'bhsd'):>14s} "
            + " ".join(f"{cell(lambda r, s=s: not r['debug'] and r['shape'] == s):>6s}" for s in ("4k", "8k", "16k"))
            + f" {cell(lambda r: r['layout'] == 'bshd'):>6s} {worst:14.3f}")
        for r in rs:
            if r["status"] != "PASS":
                log(f"    {r['status']} {r['shape']} {r.get('layout', '')} {'debug' if r['debug'] else 'release'}: "
                    f"{r.get('error', '')}{' max_err %.3e tol %.3e' % (r['max_err'], r['tol']) if 'max_err' in r else ''}")
    n_pass = sum(r["status"] == "PASS" for r in results)
    log(f"{n_pass} of {len(results)} numerics runs passed; {len(passed)} of {len(files)} schedules passed all; "
        f"total {time.time() - t0:.0f} s; outputs in {out}")
    return 0 if len(passed) == len(files) else 1


if __name__ == "__main__":
    sys.exit(main())

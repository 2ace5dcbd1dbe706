#!/usr/bin/env python3
"""The whole GPU job in one device call (emulated Blackwell on a Hopper GPU).

Builds every example for the emulation target, runs the descriptor proof,
runs every example against FP32 attention on the given shapes, checks that a
deliberately broken kernel (a missing arrive) fails with the role/barrier
named instead of hanging, and prints one table. Results go to ``--out``
(JSON + text). Wall times are EMULATED: correctness only, never speed.

    python scripts/gpu_job.py --out $OUT [--shapes small,4k] [--stages 1-18] [--budget-s 420]
    python scripts/gpu_job.py --target sm90a --files examples/hopper/*.py --out $OUT   # native Hopper:
        build (release + bounded-wait debug), numerics, b200c bench, profile (scripts/hopper_job.py)
    python scripts/gpu_job.py --out $OUT --sweep real-inputs      # issue 10: scripts/real_inputs_sweep.py

Accept rule (FlashAttention tests): max|out - ref| <= 2 * max|out_torch_bf16 - ref| + 1e-3,
ref = attention in FP32 from the same BF16 inputs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_inputs import GROUPS, SHAPES, make_inputs, reference  # noqa: E402,F401 (shared with hopper_job, race_probe)


def run_numerics(examples, shapes, budget_s, results):
    import torch
    import torch.nn.functional as F

    import b200c
    from b200c.runtime import synchronize

    t_start = time.time()
    for shape in shapes:
        B, H, S, note = SHAPES[shape]
        q, k, v = make_inputs(B, H, S, seed=S + H, device="cuda")
        scale = 128 ** -0.5
        ref = reference(q, k, v, scale)
        torch_bf16 = F.scaled_dot_product_attention(q, k, v, scale=scale)
        ref_err = (torch_bf16.float() - ref).abs().max().item()
        tol = 2 * ref_err + 1e-3
        for ex in examples:
            if time.time() - t_start > budget_s:
                results.append(dict(stage=ex.stem, shape=shape, status="not run (time budget)"))
                continue
            row = dict(stage=ex.stem, shape=f"{shape} B={B} H={H} S={S}", ref_bf16_err=ref_err, tol=tol)
            try:
                out = torch.full_like(q, float("nan"))
                t0 = time.time()
                out = b200c.attention(q, k, v, schedule=str(ex), target="emulate")
                synchronize()  # raises BarrierTimeoutError naming role/barrier if a bounded wait timed out
                row["wall_s_emulated"] = round(time.time() - t0, 3)
                err = (out.float() - ref).abs().max().item()
                row["max_err"] = err
                row["nan"] = bool(torch.isnan(out).any().item())
                row["status"] = "PASS" if (err <= tol and not row["nan"]) else "FAIL"
            except Exception as e:  # report and go on (a hang/trap kills the context: stop then)
                row["status"] = "ERROR"
                row["error"] = f"{type(e).__name__}: {e}"[:400]
                results.append(row)
                print(f"{ex.stem} {shape}: {row['error']}", flush=True)
                if "restart the process" in row["error"] or "illegal" in row["error"].lower():
                    return False
                continue
            results.append(row)
            print(f"{ex.stem:32s} {shape:9s} err={row['max_err']:.3e} tol={tol:.3e} {row['status']} "
                  f"({row['wall_s_emulated']} s emulated)", flush=True)
    return True


def descriptor_proof(out_dir):
    src = ROOT / "tests/gpu/descriptor_proof.cu"
    exe = Path("/tmp/b200c_descriptor_proof")
    inc = ROOT / "b200c/codegen/cuda"
    cmd = ["nvcc", "-arch=sm_90a", "-DB200C_EMULATE", "-DB200C_BOUNDED_WAIT", f"-I{inc}", str(src), "-lcuda",
           "-o", str(exe)]
    b = subprocess.run(cmd, capture_output=True, text=True)
    if b.returncode:
        return "BUILD FAILED\n" + b.stdout + b.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    return f"exit {r.returncode}\n{r.stdout}{r.stderr}"


def broken_variant():
    """A stage-4 kernel whose softmax warps never arrive on p_ready: must fail
    with the role/barrier named within seconds, in a child process."""
    code = r"""
import sys, time, torch
sys.path.insert(0, %r)
from tests.gpu.broken import broken_kernel
gen = broken_kernel(%r, "softmax", "p_ready")
from b200c.runtime import attention_generated
q = torch.randn(1, 1, 256, 128, device="cuda", dtype=torch.bfloat16)
t0 = time.time()
try:
    attention_generated(q, q, q, gen, target="emulate")
    from b200c.runtime import synchronize
    synchronize()
    print("NO ERROR (bad)")
except Exception as e:
    print(f"raised after {time.time()-t0:.1f} s: {type(e).__name__}: {e}")
""" % (str(ROOT), str(ROOT / "examples/04_warp_specialization.py"))
    env = dict(os.environ, B200C_CACHE_DIR="/tmp/b200c_broken_cache")
    t0 = time.time()
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        return f"{time.time() - t0:.1f} s, exit {r.returncode}\n" + (r.stdout + r.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        return "HUNG (killed after 120 s)"


def _gpu_or_exit() -> None:
    """One line and exit status 2 on a machine without a CUDA GPU (as ``b200c bench``), no traceback."""
    try:
        import torch

        ok = torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch at all
        ok = False
    if not ok:
        print("gpu_job.py: error: needs a CUDA GPU (an H100/H200 for the emulation and sm90a targets) and none "
              "is visible here; run it on the GPU machine", file=sys.stderr)
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/b200c_out"),
                    help="folder for the tables and logs (default $OUT or /tmp/b200c_out)")
    ap.add_argument("--shapes", default="small", help="comma list of shape names or groups of scripts/gpu_inputs.py "
                                                      "(small, blog, 4k, 8k, 16k, s128, ...; default small)")
    ap.add_argument("--stages", default="1-18", help="blog stages to run: a range such as 1-18, or one stage (default 1-18)")
    ap.add_argument("--budget-s", type=float, default=400, help="seconds after which the remaining numerics cases are skipped "
                                                                "and listed (default 400; 330 with --sweep)")
    ap.add_argument("--skip", default="", help="comma list: build,proof,numerics,broken")
    ap.add_argument("--files", nargs="*", help="schedule files to run instead of examples/NN_*.py")
    ap.add_argument("--sweep", choices=["real-inputs"],
                    help="run a sweep instead of the default job: real-inputs = scripts/real_inputs_sweep.py "
                         "(any lengths, causal, GQA, head dims, varlen, LSE, special values, the SDPA drop-in); "
                         "--budget-s then bounds its cases (default 330 s)")
    ap.add_argument("--target", default="emulate", help="emulate (default: the sm100a kernels emulated on Hopper; "
                                                        "also the target of --sweep) or sm90a (native Hopper: "
                                                        "scripts/hopper_job.py)")
    args, rest = ap.parse_known_args()
    _gpu_or_exit()
    if args.target in ("sm90a", "sm_90a") and not args.sweep:
        import hopper_job

        fwd = ["--out", args.out] + (["--files", *args.files] if args.files else []) + rest
        fwd += ["--skip", args.skip] if args.skip else []
        if args.shapes != "small":
            fwd += ["--shapes", ",".join(s for g in args.shapes.split(",") for s in GROUPS.get(g, [g]))]
        sys.exit(hopper_job.main(fwd))
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.sweep == "real-inputs":
        from real_inputs_sweep import run_sweep

        budget = args.budget_s if "--budget-s" in sys.argv else 330.0
        report = run_sweep(out, args.target, budget)
        c = report["counts"]
        return 0 if c["FAIL"] == c["ERROR"] == 0 else 1
    skip = set(filter(None, args.skip.split(",")))
    lo, hi = (int(x) for x in args.stages.split("-")) if "-" in args.stages else (int(args.stages),) * 2
    examples = [p for p in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")) if lo <= int(p.stem[:2]) <= hi]
    if args.files:
        examples = [Path(f).resolve() for f in args.files]
    shapes = [s for g in args.shapes.split(",") for s in GROUPS.get(g, [g])]
    report = {"emulated": True, "note": "emulated Blackwell on Hopper: wall times are not speed figures"}

    import torch

    p = torch.cuda.get_device_properties(0)
    report["device"] = f"{p.name} cc {p.major}.{p.minor} SMs {p.multi_processor_count}"
    print(report["device"], "torch", torch.__version__, flush=True)

    if "build" not in skip:
        from b200c import generate, load_schedule_file
        from b200c.runtime.build import build_many

        t0 = time.time()
        built = build_many([(e.stem, generate(load_schedule_file(e))) for e in examples], "emulate", progress=False)
        report["build_s"] = round(time.time() - t0, 1)
        print(f"built {len(built)} emulated kernels in {report['build_s']} s", flush=True)
    if "proof" not in skip:
        report["descriptor_proof"] = descriptor_proof(out)
        print(report["descriptor_proof"], flush=True)
    results = []
    if "numerics" not in skip:
        report["context_ok"] = run_numerics(examples, shapes, args.budget_s, results)
    report["results"] = results
    if "broken" not in skip:
        report["broken_variant"] = broken_variant()
        print("broken variant:", report["broken_variant"], flush=True)
    (out / "gpu_job.json").write_text(json.dumps(report, indent=1))
    lines = [f"{'stage':32s} {'shape':28s} {'max abs err':>12s} {'ref bf16 err':>12s} {'result':>6s} {'wall (emulated)':>16s}"]
    for r in results:
        lines.append(f"{r['stage']:32s} {r['shape']:28s} {r.get('max_err', float('nan')):12.3e} "
                     f"{r.get('ref_bf16_err', float('nan')):12.3e} {r['status']:>6s} "
                     f"{str(r.get('wall_s_emulated', '-')) + ' s':>16s}")
    table = "\n".join(lines)
    (out / "table.txt").write_text(table + "\n")
    print(table)
    n_pass = sum(r["status"] == "PASS" for r in results)
    print(f"{n_pass} of {len(results)} emulated runs passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A sample of the schedule space, run on the GPU against FP32 attention (issue "Nothing a valid call or a
valid schedule can break", item 3).

    python scripts/schedule_sample.py pick --n 16 --seed 1 --out sample.json    # CPU: draw, generate, nvcc
    python scripts/schedule_sample.py pick --n 8 --bases hopper --out h.json     # start from the Hopper examples
    python scripts/schedule_sample.py run sample.json --out $OUT                 # GPU: every schedule, 3 shapes

``pick`` draws schedules from the examples, variants and Hopper examples with 1-3 knobs changed
(scripts/process_replay.py's knob values, seeded), keeps those that validate and generate for their own
target, compiles each with nvcc (0 spill bytes required) and writes their JSON and target. ``run`` runs
every one on a few shapes (partial tiles, causal, GQA, LSE) natively when its target is sm90a and
through the emulation target when it is sm100a, each against FP32 attention with FlashAttention's
tolerance rule, and prints one table (also ``schedule_sample.json`` under --out).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

SHAPES = ((1, 4, 2, 300, 300, True), (2, 4, 4, 129, 1000, False), (1, 8, 2, 1000, 257, True))


def pick(n: int, seed: int, out: str, bases_from: str = "all") -> int:
    import b200c
    from b200c.codegen.targets import schedule_target
    from b200c.errors import B200cError
    from b200c.nvcc import compile_cuda
    from process_replay import KNOB_VALUES

    files = sorted((ROOT / "examples/hopper").glob("h*.py"))
    if bases_from == "all":  # "hopper": only the Hopper examples (a sample with more sm90a schedules)
        files = sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")) + sorted((ROOT / "examples/variants").glob("*.py")) \
            + files
    bases = [b200c.load_schedule_file(f) for f in files]
    rng = random.Random(seed)
    knobs = sorted(KNOB_VALUES)
    chosen, tried, refused = [], 0, 0
    work = Path(tempfile.mkdtemp(prefix="b200c_sample_"))
    while len(chosen) < n and tried < 400 * n:
        tried += 1
        s = rng.choice(bases)
        changes = {}
        for k in rng.sample(knobs, rng.randint(1, 3)):
            changes[k] = rng.choice(KNOB_VALUES[k])
        try:
            t = s.replace(name=f"sample{len(chosen)}", **changes)
            target = schedule_target(t)
            g = b200c.generate(t, target)
        except B200cError:
            refused += 1
            continue
        res = compile_cuda(g.source, work / f"s{len(chosen)}.cubin", "cubin", target).resources()
        if res["spill_bytes"]:
            print(f"SPILL {res['spill_bytes']} B: {t.to_json()}", flush=True)
            continue
        chosen.append({"from": s.name, "changes": changes, "target": target.name, "json": t.to_json()})
        print(f"picked {len(chosen)}: {s.name} + {changes} -> {target.name}", flush=True)
    Path(out).write_text(json.dumps(chosen, indent=1))
    print(f"{len(chosen)} schedules from {tried} draws ({refused} refused by validation) -> {out}")
    return 0


def run(path: str, out: str) -> int:
    import torch

    import b200c
    from b200c.runtime import synchronize
    from real_inputs_sweep import reference

    torch.set_float32_matmul_precision("highest")
    sample = json.loads(Path(path).read_text())
    from b200c.runtime.build import build_many

    for tgt, gen_t in (("sm90a", "sm90a"), ("emulate", "sm100a")):  # every kernel built first, in parallel
        items = [(f"s{i}", b200c.generate(b200c.Schedule.from_json(e["json"]), gen_t))
                 for i, e in enumerate(sample) if (e["target"] == "sm90a") == (tgt == "sm90a")]
        if items:
            build_many(items, tgt, progress=False)
    rows = []
    for i, e in enumerate(sample):
        s = b200c.Schedule.from_json(e["json"])
        target = "sm90a" if e["target"] == "sm90a" else "emulate"  # an sm100a schedule runs emulated here
        for b, h, hkv, sq, skv, causal in SHAPES:
            g = torch.Generator().manual_seed(i * 7 + sq)
            q = (torch.randn(b, h, sq, s.head_dim, generator=g) * 2).to("cuda", torch.bfloat16)
            k = torch.randn(b, hkv, skv, s.head_dim, generator=g).to("cuda", torch.bfloat16)
            v = torch.randn(b, hkv, skv, s.head_dim, generator=g).to("cuda", torch.bfloat16)
            row = dict(i=i, schedule=f"{e['from']} + {e['changes']}", target=target, shape=f"{b}x{h}/{hkv}x{sq}:{skv}"
                       + (" causal" if causal else ""))
            try:
                o, lse = b200c.attention(q, k, v, schedule=s, causal=causal, return_lse=True, target=target)
                synchronize()
                ref, ref_lse, tb, vis = reference(q, k, v, s.head_dim ** -0.5, causal)
                tol = 2 * (tb.float() - ref).abs()[:, :, vis].max().item() + 1e-3
                err = (o.float() - ref).abs()[:, :, vis].max().item()
                lerr = (lse - ref_lse).abs()[:, :, vis].max().item()
                # rowsum='bf16' sums the BF16-rounded P (Schedule's docstring): each P is off by <= 2^-9 of
                # itself, so the sum and its log (the LSE) by <= 2^-9 more than the 1e-3 every schedule gets
                lse_tol = 1e-3 + (2 ** -9 if s.rowsum == "bf16" else 0.0)
                row.update(err=err, tol=tol, lse_err=lerr, lse_tol=lse_tol,
                           status="PASS" if err <= tol and lerr <= lse_tol else "FAIL")
            except Exception as ex:  # noqa: BLE001 - reported in the table
                row.update(status="ERROR", error=f"{type(ex).__name__}: {ex}"[:300])
            rows.append(row)
            print(f"{row['status']:5s} #{i} {row['target']:7s} {row['shape']:22s} {row['schedule'][:90]}"
                  + (f" err {row['err']:.2e} tol {row['tol']:.2e} lse {row['lse_err']:.1e}" if "err" in row else "")
                  + (f" {row.get('error', '')}" if row["status"] == "ERROR" else ""), flush=True)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "schedule_sample.json").write_text(json.dumps(rows, indent=1))
    n_pass = sum(r["status"] == "PASS" for r in rows)
    print(f"{n_pass} of {len(rows)} runs passed ({len(sample)} schedules x {len(SHAPES)} shapes)")
    return 0 if n_pass == len(rows) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pick")
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="schedule_sample.json")
    p.add_argument("--bases", choices=("all", "hopper"), default="all",
                   help="start points: every example, variant and Hopper example (default), or the Hopper ones")
    r = sub.add_parser("run")
    r.add_argument("sample")
    r.add_argument("--out", default="/tmp/b200c_sample")
    a = ap.parse_args(argv)
    return pick(a.n, a.seed, a.out, a.bases) if a.cmd == "pick" else run(a.sample, a.out)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Repeat emulated runs of some stages on one shape and locate wrong rows.

A result that changes between runs on the same inputs is a race (METHOD.md).
For each failing run, prints which (batch, head, Q tile, 32-row warp slice)
rows are wrong, to tell a lost hand-off of one warp from one of a whole tile.

    python scripts/race_probe.py --stages 12,13,14 --shape 4k --repeat 5
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_inputs import SHAPES, make_inputs, reference  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", default="13")
    ap.add_argument("--shape", default="4k")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    import b200c
    from b200c.runtime import synchronize

    B, H, S, _ = SHAPES[args.shape]
    q, k, v = make_inputs(B, H, S, seed=S + H, device="cuda")
    scale = 128 ** -0.5
    ref = reference(q, k, v, scale)
    tol = 2 * (F.scaled_dot_product_attention(q, k, v, scale=scale).float() - ref).abs().max().item() + 1e-3
    for st in [int(x) for x in args.stages.split(",")]:
        ex = next((ROOT / "examples").glob(f"{st:02d}_*.py"))
        for rep in range(args.repeat):
            out = b200c.attention(q, k, v, schedule=str(ex), target="emulate")
            synchronize()
            err = (out.float() - ref).abs().amax(dim=-1)  # (B, H, S) per row
            bad = (err > tol).nonzero().tolist()
            print(f"{ex.stem} run {rep}: max err {err.max().item():.3e} tol {tol:.3e} bad rows {len(bad)}", flush=True)
            if bad:
                groups = {}
                for b, h, s in bad:
                    key = (b, h, s // 128, (s % 128) // 32)
                    groups[key] = groups.get(key, 0) + 1
                items = sorted(groups.items())[:12]
                print("   (b, h, q_tile, warp slice): bad rows ->", items, f"... {len(groups)} groups", flush=True)


if __name__ == "__main__":
    main()

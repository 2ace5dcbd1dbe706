"""Probe (docs/decode.md): the capstone's generate() with the drop-in, the grown K/V cache entries
(b200c/runtime/grown.py) on and off, and torch SDPA, timed in one process, alternating, so the three are
compared on one machine in one run (the grown entries' effect was measured only across runs so far).
Prints tokens per second of the decoding steps (the time of N + 1 tokens minus that of 1, over N) per
variant, median of the rounds. Needs a CUDA GPU and transformers.

    python scripts/generate_ab.py [--batch 1] [--prompt 32768] [--new 32] [--rounds 3]
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "capstone"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32768)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("generate_ab: needs a CUDA GPU (nothing measured)")
        return 0
    from generate import build, run

    from b200c.runtime import grown

    model, cfg = build(a.layers, "cuda")
    ids = torch.randint(1, cfg.vocab_size, (a.batch, a.prompt), generator=torch.Generator().manual_seed(1)).cuda()
    regrown = grown.regrown
    variants = {"torch SDPA": (False, regrown), "b200c, grown entries": (True, regrown),
                "b200c, full misses": (True, lambda *args, **kw: None)}
    for b200c_on, fn in variants.values():  # warm-up: kernels built and loaded, cuDNN plans made
        grown.regrown = fn
        run(model, ids, 2, b200c_on)
    per_step = {name: [] for name in variants}
    try:
        for r in range(a.rounds):
            names = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in names:
                b200c_on, fn = variants[name]
                grown.regrown = fn
                t1 = run(model, ids, 1, b200c_on)[1]
                tn = run(model, ids, a.new + 1, b200c_on)[1]
                per_step[name].append((tn - t1) / a.new)
    finally:
        grown.regrown = regrown
    base = statistics.median(per_step["torch SDPA"])
    print(f"decoder {a.layers} layers, batch {a.batch}, prompt {a.prompt}, {a.new} new tokens, {a.rounds} rounds")
    for name, ts in per_step.items():
        t = statistics.median(ts)
        print(f"  {name:22s} {a.batch / t:9.1f} tokens/s  ({base / t:.2f}x torch)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

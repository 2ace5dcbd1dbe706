"""Where a model's attention time goes, call by call: runs one forward of a capstone model (LTX-2 or the
GQA decoder) with torch's SDPA, records every distinct attention call (shapes, mask), and times each one
with torch's SDPA and with ``b200c.scaled_dot_product_attention``:

* GPU time: CUDA events around each call, L2 flushed before each, the two in the same rounds
  (``b200c.bench.timing.time_interleaved``), median of 20. For a call too small to keep the GPU busy
  this is the host's time to issue it.
* host time: the wall time of issuing the call (its Python and launch work), each call timed alone
  between two synchronizations that are not counted, median of 50. (An earlier version issued 50 calls
  behind a long ``torch.cuda._sleep`` kernel; a call of ~30 small kernels then filled the driver's launch
  queue and the host waited for the sleep to end: 1.5 ms per masked call that back-to-back calls did not
  show.)

A masked call gets a fresh copy of its mask each time, for torch and b200c alike (a model makes a new
mask per forward, and b200c keeps the block mask of a mask tensor it has seen: the recorded tensor alone
would time the cached path); the copy's time is in both columns. The ``b200c`` column says whether
b200c ran the call and which kernel, or why it fell back to torch.

Prints a Markdown table and the sums per forward (each call times how often the forward makes it).

    pip install -e ".[capstone]" && python examples/capstone/per_call.py --model ltx2 --layers 4
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def record_calls(forward) -> dict:
    """{(q shape, k shape, mask dtype and shape or None): [args, kwargs, calls per forward]} of one forward."""
    import torch
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention
    seen = {}

    def spy(*args, **kw):
        q = args[0] if args else kw["query"]
        k = args[1] if len(args) > 1 else kw["key"]
        m = kw.get("attn_mask", args[3] if len(args) > 3 else None)
        key = (tuple(q.shape), tuple(k.shape), None if m is None else (str(m.dtype).replace("torch.", ""),
                                                                          tuple(m.shape)))
        seen.setdefault(key, [args, dict(kw), 0])[2] += 1
        return original(*args, **kw)

    F.scaled_dot_product_attention = spy
    try:
        with torch.no_grad():
            forward()
        torch.cuda.synchronize()
    finally:
        F.scaled_dot_product_attention = original
    return seen


def host_us(fn, calls: int = 50) -> float:
    """Median microseconds of host time of one ``fn()``: each call is issued alone, after the GPU has
    finished the last one, so its launches never wait for a full launch queue."""
    import statistics

    import torch

    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("ltx2", "decoder"), default="ltx2")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pad", type=int, default=0, help="decoder: right-pad the last sequence (masked calls)")
    a = ap.parse_args(argv)
    from harness import missing

    why = missing("diffusers" if a.model == "ltx2" else "transformers")
    if why:
        print(f"per_call.py: {why}", file=sys.stderr)
        return 2
    import torch
    import torch.nn.functional as F

    import b200c
    from b200c.bench.timing import time_interleaved

    if a.model == "ltx2":
        from ltx2 import build

        _, forward = build(a.layers, "cuda")
    else:
        from decoder import build

        _, forward = build(a.layers, "cuda", pad=a.pad)
    calls = record_calls(forward)
    from b200c.runtime import op, sdpa

    print("| call: q, k, attn_mask | per forward | b200c ran | GPU us: torch SDPA | b200c | host us: torch SDPA "
          "| b200c |")
    print("|---|---:|---|---:|---:|---:|---:|")
    totals = [0.0, 0.0, 0.0, 0.0]
    with torch.no_grad():
        for (qs, ks, mask), (args, kw, n) in calls.items():
            def fresh(kw):
                m = kw.get("attn_mask")
                return kw if m is None else dict(kw, attn_mask=m.clone())

            def torch_call(args=args, kw=kw):
                return F.scaled_dot_product_attention(*args, **fresh(kw))

            def b200c_call(args=args, kw=kw):
                return b200c.scaled_dot_product_attention(*args, **fresh(kw))

            sdpa.calls.clear()
            loaded = set(op._kernels)
            b200c_call()  # builds and loads the kernel
            torch.cuda.synchronize()
            fallen = [k for k in sdpa.calls if k != "b200c"]
            names = sorted({lk.built.launch.name for key, lk in op._kernels.items() if key not in loaded})
            ran = f"fell back: {fallen[0]}" if fallen else (", ".join(names) or "yes (kernel already loaded)")
            t_torch, t_b200c = time_interleaved([torch_call, b200c_call], warmup=3, iters=20)
            row = (t_torch.median_ms * 1e3, t_b200c.median_ms * 1e3, host_us(torch_call), host_us(b200c_call))
            for i, x in enumerate(row):
                totals[i] += n * x
            m = "none" if mask is None else f"{mask[0]} {mask[1]}"
            print(f"| {qs}, {ks}, {m} | {n} | {ran} | " + " | ".join(f"{x:.1f}" for x in row) + " |")
    print(f"per forward, ms: GPU {totals[0] / 1e3:.2f} (torch SDPA) / {totals[1] / 1e3:.2f} (b200c); "
          f"host {totals[2] / 1e3:.2f} / {totals[3] / 1e3:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Soak: one process making many b200c calls of mixed kinds, with GPU and host memory printed as it goes.

    python scripts/soak.py [--calls 20000] [--target auto] [--out DIR]

The mix (round-robin, seeded): dense calls of several shapes (GQA, causal, LSE), BSHD views and strided
slices of a packed QKV tensor, calls on a side stream, CUDA graph replays of a captured call with new
data, torch.compile(fullgraph=True)'d calls, varlen calls, the SDPA drop-in; and bad calls that must
raise their typed error (wrong dtype, a head dim b200c does not take, k/v heads that do not divide q's,
a negative scale, cu_seqlens of the wrong dtype); and, on tensors made anew by each call, refused calls
(D = 256 inputs with a D = 128 schedule: a ResourceError) and SDPA drop-in calls that fall back to torch
(each must say so with one FallbackWarning): every such call's inputs must be freed, so a refusal or a
fallback that kept them alive shows as growth of the allocated memory (1 MiB per call). Every good call
is compared with the result the same call gave the first time (bit-equal); every bad call must raise the
expected b200c error class.

Memory: ``torch.cuda.memory_allocated`` / ``memory_reserved`` (PyTorch's allocator), the driver's used
device memory (``cuMemGetInfo``) and the process RSS (``/proc/self/statm``), at the start (after the
warm-up round) and every tenth of the run: flat means the last checkpoint is within a small margin of
the first. Prints one table and writes ``soak.json`` under --out. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def device_used_mib() -> float:
    from cuda.bindings import driver as cu

    err, free, total = cu.cuMemGetInfo()
    return (total - free) / 2 ** 20


def make_mix(target: str):
    """[(name, kind, fn)]: kind ``good`` (returns tensors) or an exception class a bad call must raise."""
    import torch

    import b200c

    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g, device="cuda").to(dtype)

    mix = []
    for b, h, hkv, s, skv, d, causal, lse in ((2, 8, 8, 512, 512, 128, False, False), (1, 16, 4, 1000, 1000, 128, True, True),
                                               (2, 8, 2, 257, 1500, 64, True, False), (1, 4, 4, 300, 300, 256, False, True),
                                               (3, 6, 3, 129, 129, 128, True, True)):
        q, k, v = rnd(b, h, s, d), rnd(b, hkv, skv, d), rnd(b, hkv, skv, d)
        mix.append((f"dense {b}x{h}/{hkv}x{s}:{skv} D{d}{' causal' if causal else ''}{' lse' if lse else ''}", "good",
                    lambda q=q, k=k, v=v, c=causal, l=lse: b200c.attention(q, k, v, causal=c, return_lse=l, target=target)))
    qkv = rnd(2, 700, 3, 8, 128)  # a packed (B, S, 3, H, D) QKV: strided (B, S, H, D) views, no copies
    mix.append(("bshd views of packed qkv", "good", lambda: b200c.attention(
        qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], layout="bshd", causal=True, target=target)))
    side = torch.cuda.Stream()
    qs, ks, vs = rnd(1, 8, 640, 128), rnd(1, 8, 640, 128), rnd(1, 8, 640, 128)

    def on_side():
        with torch.cuda.stream(side):
            out = b200c.attention(qs, ks, vs, target=target)
        torch.cuda.current_stream().wait_stream(side)
        return out

    mix.append(("side stream", "good", on_side))
    gq, gk, gv = rnd(1, 8, 512, 128), rnd(1, 8, 512, 128), rnd(1, 8, 512, 128)
    b200c.attention(gq, gk, gv, target=target)  # loaded before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gout = b200c.attention(gq, gk, gv, target=target)
    fresh = [rnd(1, 8, 512, 128) for _ in range(4)]
    step = {"i": 0}

    def replay():
        gq.copy_(fresh[step["i"] % len(fresh)])
        step["i"] += 1
        graph.replay()
        return gout.clone()

    mix.append(("CUDA graph replay, new data", "good_cycle4", replay))
    compiled = torch.compile(lambda a, b_, c: b200c.attention(a, b_, c, causal=True, target=target) * 1.0,
                             fullgraph=True)
    cq, ck, cv = rnd(2, 8, 384, 128), rnd(2, 4, 384, 128), rnd(2, 4, 384, 128)
    mix.append(("torch.compile(fullgraph)", "good", lambda: compiled(cq, ck, cv)))
    lens = [300, 0, 129, 1000, 64]
    cu = torch.tensor([0, *__import__("itertools").accumulate(lens)], dtype=torch.int32, device="cuda")
    vq, vk, vv = rnd(sum(lens), 8, 128), rnd(sum(lens), 2, 128), rnd(sum(lens), 2, 128)
    mix.append(("varlen with an empty sequence", "good", lambda: b200c.attention_varlen(
        vq, vk, vv, cu, cu, max(lens), max(lens), causal=True, return_lse=True, target=target)))
    sq, sk = rnd(2, 8, 1024, 64), rnd(2, 2, 1024, 64)
    mix.append(("SDPA drop-in, GQA causal", "good", lambda: b200c.scaled_dot_product_attention(
        sq, sk, sk, is_causal=True, enable_gqa=True, target=target)))
    # bad calls: each must raise its typed error and leave the good ones alone
    f16 = rnd(1, 4, 128, 128, dtype=torch.float16)
    mix.append(("bad: float16", b200c.LaunchError, lambda: b200c.attention(f16, f16, f16, target=target)))
    d80 = rnd(1, 4, 128, 80)
    mix.append(("bad: head dim 80", (b200c.LaunchError, b200c.ScheduleError),
                lambda: b200c.attention(d80, d80, d80, target=target)))
    q6, k4 = rnd(1, 6, 128, 128), rnd(1, 4, 128, 128)
    mix.append(("bad: 6 query heads, 4 K/V heads", b200c.LaunchError, lambda: b200c.attention(q6, k4, k4, target=target)))
    mix.append(("bad: negative scale", b200c.LaunchError,
                lambda: b200c.attention(q6, q6, q6, softmax_scale=-1.0, target=target)))
    cu64 = cu.to(torch.int64)
    mix.append(("bad: int64 cu_seqlens", b200c.LaunchError, lambda: b200c.attention_varlen(
        vq, vk, vv, cu64, cu64, max(lens), max(lens), target=target)))
    # refused and fallen-back calls on new tensors per call (1 MiB each): nothing of theirs may stay alive
    d128 = b200c.default_schedule(128)  # cannot hold D = 256 (768 of 512 TMEM columns), on any device
    big = rnd(1, 4, 512, 256)

    def refused():
        q = big.clone()
        b200c.attention(q, q, q, schedule=d128, target=target)

    mix.append(("refused: D=256 inputs, D=128 schedule, new tensors", b200c.ResourceError, refused))

    def fallen_back():
        q = big.clone()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always", b200c.FallbackWarning)
            out = b200c.scaled_dot_product_attention(q, q, q, schedule=d128, target=target)
        said = sum(issubclass(w.category, b200c.FallbackWarning) for w in rec)
        if said != 1:
            raise RuntimeError(f"the SDPA drop-in fell back with {said} FallbackWarnings, expected 1")
        return out

    mix.append(("SDPA drop-in falls back, new tensors", "good", fallen_back))
    return mix


def _tensors(r):
    return [t for t in (r if isinstance(r, tuple) else (r,)) if t is not None]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--target", default="auto")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/b200c_soak"))
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("soak.py: error: needs a CUDA GPU", file=sys.stderr)
        return 2
    mix = make_mix(a.target)
    want = {}
    for name, kind, fn in mix:  # the warm-up round: builds, loads, first results
        if kind.__class__ is str:
            if kind == "good_cycle4":
                want[name] = [[t.clone() for t in _tensors(fn())] for _ in range(4)]
            else:
                want[name] = [t.clone() for t in _tensors(fn())]
    torch.cuda.synchronize()
    marks = []

    def mark(i):
        torch.cuda.synchronize()
        marks.append(dict(calls=i, allocated_mib=torch.cuda.memory_allocated() / 2 ** 20,
                          reserved_mib=torch.cuda.memory_reserved() / 2 ** 20, device_used_mib=device_used_mib(),
                          rss_mib=rss_mib()))

    mark(0)
    counts = {"good": 0, "bad": 0, "wrong": 0, "untyped": 0}
    problems = []
    t0 = time.time()
    cycle = {}
    for i in range(1, a.calls + 1):
        name, kind, fn = mix[i % len(mix)]
        if isinstance(kind, str):
            got = _tensors(fn())
            if kind == "good_cycle4":
                j = cycle.get(name, 0)
                cycle[name] = j + 1
                ref = want[name][j % 4]
            else:
                ref = want[name]
            if len(got) != len(ref) or not all(torch.equal(x, y) for x, y in zip(got, ref)):
                counts["wrong"] += 1
                problems.append(f"call {i} ({name}): result differs from its first run")
            else:
                counts["good"] += 1
        else:
            try:
                fn()
                counts["untyped"] += 1
                problems.append(f"call {i} ({name}): no error raised")
            except kind:
                counts["bad"] += 1
            except Exception as e:  # noqa: BLE001 - the wrong error type is what this counts
                counts["untyped"] += 1
                problems.append(f"call {i} ({name}): {type(e).__name__}: {e}"[:300])
        if i % max(1, a.calls // 10) == 0:
            mark(i)
    wall = time.time() - t0
    first, last = marks[0], marks[-1]
    flat = {k: last[k] - first[k] for k in ("allocated_mib", "reserved_mib", "device_used_mib", "rss_mib")}
    report = dict(calls=a.calls, target=a.target, wall_s=round(wall, 2), counts=counts, problems=problems[:20],
                  marks=marks, growth_mib=flat, device=torch.cuda.get_device_name())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(report, indent=1))
    print(f"soak on {report['device']}: {a.calls} calls in {wall:.1f} s ({len(mix)} kinds)")
    print(f"  good {counts['good']}, bad with their typed error {counts['bad']}, wrong results {counts['wrong']}, "
          f"bad calls without the typed error {counts['untyped']}")
    print(f"  {'calls':>7s} {'allocated MiB':>14s} {'reserved MiB':>13s} {'device used MiB':>16s} {'RSS MiB':>9s}")
    for m in marks:
        print(f"  {m['calls']:7d} {m['allocated_mib']:14.1f} {m['reserved_mib']:13.1f} {m['device_used_mib']:16.1f} "
              f"{m['rss_mib']:9.1f}")
    print("  growth first -> last mark: " + ", ".join(f"{k} {v:+.1f}" for k, v in flat.items()))
    for p in problems[:5]:
        print("  " + p)
    ok = counts["wrong"] == 0 and counts["untyped"] == 0 and flat["allocated_mib"] <= 1 and flat["rss_mib"] <= 64
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

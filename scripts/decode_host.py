"""Probe (docs/decode.md): per-call wall time of a decoding step's attention as transformers' DynamicCache
makes it (K/V grown by torch.cat each step, a new q each step), torch SDPA against b200c's drop-in; the same
with fixed tensors (b200c's launch entries hit); and the host time of one call alone (b200c: an entry miss).
Needs a CUDA GPU. python scripts/decode_host.py"""
import sys
import time

import torch
import torch.nn.functional as F

import b200c

if not torch.cuda.is_available():
    print("decode_host: needs a CUDA GPU")
    sys.exit(0)
for B, L in ((1, 32768), (32, 4096)):
    H, HK, D = 32, 8, 128
    kv0 = [torch.randn(B, HK, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    def loop(fn, n=100, grow=True):
        k, v = kv0
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for i in range(n):
            if grow:
                k = torch.cat([k, torch.randn(B, HK, 1, D, device="cuda", dtype=torch.bfloat16)], 2)
                v = torch.cat([v, torch.randn(B, HK, 1, D, device="cuda", dtype=torch.bfloat16)], 2)
            q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
            fn(q, k, v)
        torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e6
    t_sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    b_sdpa = lambda q, k, v: b200c.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    nothing = lambda q, k, v: None
    for name, fn in (("cat+randn only", nothing), ("torch SDPA", t_sdpa), ("b200c drop-in", b_sdpa), ("torch SDPA", t_sdpa), ("b200c drop-in", b_sdpa)):
        loop(fn, 10)
        print(f"B={B} L={L} grow  {name:16s} {loop(fn):8.1f} us/step", flush=True)
    for name, fn in (("torch SDPA", t_sdpa), ("b200c drop-in", b_sdpa)):
        loop(fn, 10, False)
        print(f"B={B} L={L} fixed {name:16s} {loop(fn, grow=False):8.1f} us/step", flush=True)
    # host time of one b200c miss, no GPU work queued behind it
    k, v = kv0
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    ts = []
    for i in range(30):
        kk = k[:, :, : L - 1 - i]
        torch.cuda.synchronize(); t0 = time.perf_counter(); b_sdpa(q, kk, v[:, :, : L - 1 - i]); ts.append(time.perf_counter() - t0)
    ts.sort(); print(f"B={B} L={L} b200c miss host {ts[len(ts)//2]*1e6:.1f} us (median of 30)")
    ts = []
    for i in range(30):
        torch.cuda.synchronize(); t0 = time.perf_counter(); t_sdpa(q, kk, v[:, :, : L - 30]); ts.append(time.perf_counter() - t0)
    ts.sort(); print(f"B={B} L={L} torch host {ts[len(ts)//2]*1e6:.1f} us (median of 30)")

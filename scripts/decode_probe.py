"""Probe: one decoding shape's time against the split count (CUDA events, L2 flushed), for the notes of
docs/decode.md; prints a table. python scripts/decode_probe.py B H H_kv S_kv [page [D]]"""
import sys

import torch

import b200c
from b200c.bench.timing import time_interleaved

b, h, hk, s = (int(x) for x in sys.argv[1:5])
page = int(sys.argv[5]) if len(sys.argv) > 5 else 0
d = int(sys.argv[6]) if len(sys.argv) > 6 else 128
q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
fns, names = [], []
for n in (0, 1, 4, 8, 16, 32, 64):
    if page:
        kc, vc = k.reshape(-1, page, hk, d), v.reshape(-1, page, hk, d)
        tab = torch.arange(kc.shape[0], dtype=torch.int32, device="cuda").reshape(b, -1)
        fns.append(lambda n=n: b200c.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=tab, num_splits=n))
    else:
        fns.append(lambda n=n: b200c.attention_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=n))
    names.append(f"kvcache splits={n or 'auto'}")
qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
fns.append(lambda: b200c.attention(qb, kb, vb))
names.append("attention()")
for f in fns:
    f()
torch.cuda.synchronize()
ts = time_interleaved(fns, warmup=3, iters=20)
mb = 2 * b * s * hk * d * 2 / 1e6
for n, t in zip(names, ts):
    print(f"{b}x{h}/{hk}:{s}x{d} p{page} {n:24s} {t.median_ms * 1e3:8.1f} us  {mb / t.median_ms:7.0f} GB/s")

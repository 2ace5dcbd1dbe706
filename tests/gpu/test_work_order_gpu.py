"""The varlen item order on a Hopper GPU (b200c_work_order, b200c.runtime.work_order): the order the kernel
writes equals the Python model's, and an ordered launch's output and LSE are bit-equal to the unordered
launch of the same call (the order picks which CTA computes an item, not what it computes) and close to
FP32 attention.

    python -m pytest -q -m gpu tests/gpu/test_work_order_gpu.py
"""
import itertools
import random

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def env():
    import torch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the native sm90a kernels need a compute capability 9.0 GPU")
    return torch


def _cu(torch, lengths):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device="cuda")


CASES = [  # lengths, H, H_kv, D, causal
    ((8192, 256, 4096, 512, 6144, 1024, 2048, 768), 16, 16, 128, True),
    ((8192, 256, 4096, 512, 6144, 1024, 2048, 768), 16, 16, 128, False),
    ("random40", 32, 8, 128, True),  # GQA: packed heads
    ("random17", 8, 1, 64, False),  # MQA
    ("random30", 16, 16, 256, True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0] if isinstance(c[0], str) else 'fixed'}-{c[1]}/{c[2]}-d{c[3]}-{'causal' if c[4] else 'full'}")
def test_ordered_launch_matches_model_and_unordered(env, monkeypatch, case):
    torch = env
    import b200c
    from b200c.codegen.work import longest_first
    from b200c.runtime import launcher, varlen, work_order

    monkeypatch.setenv("B200C_VARLEN_ORDER", "1")  # off by default until this test has run on a GPU
    lengths, h, hkv, d, causal = case
    if isinstance(lengths, str):
        rng = random.Random(len(lengths) * 131 + h)
        n = int(lengths[len("random"):])
        lengths = [rng.choice((0, 1, 100, 700, 1500, 3000)) for _ in range(n)]
    total, mx = sum(lengths), max(lengths)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(total, h, d, device="cuda", generator=gen).to(torch.bfloat16)
    k = torch.randn(total, hkv, d, device="cuda", generator=gen).to(torch.bfloat16)
    v = torch.randn(total, hkv, d, device="cuda", generator=gen).to(torch.bfloat16)
    cu_ordered, cu_plain = _cu(torch, lengths), _cu(torch, lengths)

    tables = []
    table = work_order.OrderLaunch.table
    monkeypatch.setattr(work_order.OrderLaunch, "table", lambda self, empty: tables.append(table(self, empty)) or tables[-1])
    out, lse = b200c.attention_varlen(q, k, v, cu_ordered, cu_ordered, mx, mx, causal=causal, return_lse=True)
    assert len(tables) == 1, "the call should have been ordered (more items than SMs)"
    entry = next(e for e in launcher._entries.values() if getattr(e, "order", None) is not None
                 and e.problem.total_q == total and e.order.block.slot("cu_seqlens_q").value == cu_ordered.data_ptr())
    work = entry.lk.built.launch.work()
    expect = longest_first(work, batch=len(lengths), seq_q=mx, cu_seqlens_q=cu_ordered.tolist(),
                           cu_seqlens_k=cu_ordered.tolist(), causal=causal, pack_heads=entry.pack_heads,
                           max_key=-(-mx // work.block_n))
    assert tables[0].tolist() == expect

    with monkeypatch.context() as m:
        m.setattr(varlen.work_order, "order_for", lambda *a, **kw: None)
        out_plain, lse_plain = b200c.attention_varlen(q, k, v, cu_plain, cu_plain, mx, mx, causal=causal,
                                                      return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, out_plain) and torch.equal(lse, lse_plain)

    # against FP32 attention, sequence by sequence (the first two only: the reference is slow)
    starts = list(itertools.accumulate([0, *lengths]))
    for b in [i for i, n in enumerate(lengths) if n][:2]:
        s, e = starts[b], starts[b + 1]
        qs, ks, vs = (t[s:e].transpose(0, 1).float() for t in (q, k, v))
        ks, vs = ks.repeat_interleave(h // hkv, 0), vs.repeat_interleave(h // hkv, 0)
        ref = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
        err = (out[s:e].transpose(0, 1).float() - ref).abs().max().item()
        assert err < 2e-2, (b, err)

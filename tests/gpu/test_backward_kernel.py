"""The generated sm_90a backward kernels (b200c/codegen/sm90/backward.py), launched directly
(b200c.runtime.backward_launch), against FP32 torch autograd with FlashAttention's backward tolerance:
per gradient, twice the max error of the same computation in BF16 plus 1e-3 of the gradient's largest
magnitude. The forward's output and LSE come from FP32 attention (O rounded to BF16, as a forward kernel
hands it over). Cases: dense and causal, S not a multiple of the tiles, S_q != S_kv (bottom-right causal,
rows that see no key: their dQ exactly 0), 1 to 16 heads, GQA; head dims 128 (each consumer warpgroup
computes half of dQ's columns), 64 (128-row visits: each computes 64 of dQ's rows; with 64-row visits each
computes every column over its own keys) and 256 (each keeps half of dK's and dV's columns, and computes half
of dQ's)."""
import math

import pytest

pytestmark = pytest.mark.gpu


def _hopper():
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90a backward kernels run on compute capability 9.0 (H100 / H200)")


def _attention(q, k, v, causal, scale):
    """Reference attention in q's dtype (GQA: K/V heads repeated), bottom-right causal."""
    import torch

    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        rows = torch.arange(sq, device=q.device)[:, None]
        cols = torch.arange(skv, device=q.device)[None, :]
        s = s.masked_fill(cols > rows + (skv - sq), float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(q.dtype)  # rows that see no key: 0
    return p @ v, lse


CASES = [
    # (B, H, H_kv, S_q, S_kv, causal, D)
    (1, 1, 1, 128, 128, False, 128),
    (2, 4, 4, 256, 384, False, 128),
    (1, 2, 2, 200, 333, False, 128),
    (2, 3, 3, 256, 256, True, 128),
    (1, 2, 2, 300, 300, True, 128),
    (1, 16, 16, 512, 512, True, 128),
    (1, 2, 2, 512, 200, True, 128),   # S_q > S_kv: the first 312 rows see no key
    (1, 2, 2, 77, 1000, True, 128),   # S_q < S_kv, bottom-right
    (2, 8, 2, 320, 320, True, 128),   # GQA 4:1
    (1, 4, 1, 1, 257, False, 128),    # one query row, MQA
    (1, 1, 1, 128, 128, False, 64),
    (1, 2, 2, 200, 333, False, 64),
    (2, 3, 3, 256, 256, True, 64),
    (1, 2, 2, 512, 200, True, 64),
    (1, 2, 2, 77, 1000, True, 64),
    (2, 8, 2, 320, 320, True, 64),
    (1, 1, 1, 128, 128, False, 256),
    (1, 2, 2, 200, 333, False, 256),
    (2, 3, 3, 256, 256, True, 256),
    (1, 2, 2, 512, 200, True, 256),
    (1, 2, 2, 77, 1000, True, 256),
    (2, 8, 2, 320, 320, True, 256),
]


@pytest.mark.parametrize("b,h,hk,sq,skv,causal,d", CASES)
def test_backward_kernel_matches_autograd(b, h, hk, sq, skv, causal, d):
    _check(b, h, hk, sq, skv, causal, d)


@pytest.mark.parametrize("b,h,hk,sq,skv,causal", [(1, 2, 2, 200, 333, False), (2, 8, 2, 320, 320, True),
                                                  (1, 2, 2, 512, 200, True)])
def test_head_dim_64_with_64_row_visits(b, h, hk, sq, skv, causal):
    """block_m = 64 at head dim 64 (the built-in takes 128 x 128): each warpgroup computes every dQ column over
    its own keys and both bulk-add into the same part of dq_accum."""
    import b200c

    _check(b, h, hk, sq, skv, causal, 64, b200c.default_backward_schedule(64).replace(name="d64_m64", block_m=64))


def _check(b, h, hk, sq, skv, causal, d, schedule=None):
    _hopper()
    import torch

    from b200c.runtime.backward_launch import attention_backward

    torch.manual_seed(b * 1000 + h * 100 + sq + skv + causal + d)
    scale = 1.0 / math.sqrt(d)
    dev = "cuda"
    q = torch.randn(b, h, sq, d, device=dev).to(torch.bfloat16)
    k = torch.randn(b, hk, skv, d, device=dev).to(torch.bfloat16)
    v = torch.randn(b, hk, skv, d, device=dev).to(torch.bfloat16)
    dout = torch.randn(b, h, sq, d, device=dev).to(torch.bfloat16)

    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    out_f, lse = _attention(qf, kf, vf, causal, scale)
    out_f.backward(dout.float())
    ref = (qf.grad, kf.grad, vf.grad)
    qb, kb, vb = (t.clone().requires_grad_() for t in (q, k, v))
    out_b, _ = _attention(qb, kb, vb, causal, scale)
    out_b.backward(dout)
    bf16 = (qb.grad, kb.grad, vb.grad)

    dq, dk, dv = attention_backward(q, k, v, out_f.detach().to(torch.bfloat16), dout, lse.detach(), causal=causal,
                                    scale=scale, schedule=schedule)
    torch.cuda.synchronize()
    for name, got, r, rb in zip(("dQ", "dK", "dV"), (dq, dk, dv), ref, bf16):
        assert got.shape == r.shape and got.dtype == torch.bfloat16, name
        assert bool(torch.isfinite(got).all()), f"{name}: non-finite values"
        err = float((got.float() - r).abs().max())
        tol = 2 * float((rb.float() - r).abs().max()) + 1e-3 * float(r.abs().max())
        assert err <= tol, f"{name}: max error {err:.4g} over the tolerance {tol:.4g}"
    if causal and sq > skv:
        hidden = sq - skv  # rows 0 .. hidden - 1 see no key
        assert bool((dq[:, :, :hidden] == 0).all()), "dQ of rows that see no key is not exactly 0"


def test_backward_kernel_bhsd_and_bshd_views_agree():
    _hopper()
    import torch

    from b200c.runtime.backward_launch import attention_backward

    torch.manual_seed(7)
    b, h, s, d = 2, 4, 192, 128
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda").to(torch.bfloat16) for _ in range(4))  # BSHD storage
    qh, kh, vh, doh = (t.transpose(1, 2) for t in (q, k, v, dout))  # BHSD views of BSHD memory
    out, lse = _attention(qh.float(), kh.float(), vh.float(), True, 1 / math.sqrt(d))
    a = attention_backward(qh, kh, vh, out.to(torch.bfloat16), doh, lse, causal=True)
    c = attention_backward(*(t.contiguous() for t in (qh, kh, vh)), out.to(torch.bfloat16).contiguous(),
                           doh.contiguous(), lse, causal=True)
    torch.cuda.synchronize()
    assert torch.equal(a[1], c[1]) and torch.equal(a[2], c[2])  # dK, dV: one CTA each, fixed order
    # dQ: FP32 additions from several CTAs in any order (dq_reduction="atomic"): equal up to BF16 rounding
    assert float((a[0].float() - c[0].float()).abs().max()) <= 1e-2 * float(c[0].float().abs().max())


@pytest.mark.parametrize("d", [128, 64, 256])
def test_deterministic_backward_is_bit_equal_over_runs(d):
    """dq_reduction="deterministic" (deterministic=True): dQ, dK, dV bit-equal over three runs (a Q tile's dQ
    takes the K/V tiles' parts in K/V tile order), and within the tolerance of FP32 autograd."""
    _hopper()
    import torch

    from b200c.runtime.backward_launch import attention_backward

    torch.manual_seed(11 + d)
    b, h, hk, s = 2, 8, 2, 1000  # GQA 4:1, 8 K/V tiles per sequence: several CTAs add into every dQ row
    scale = 1.0 / math.sqrt(d)
    q = torch.randn(b, h, s, d, device="cuda").to(torch.bfloat16)
    k, v = (torch.randn(b, hk, s, d, device="cuda").to(torch.bfloat16) for _ in range(2))
    dout = torch.randn(b, h, s, d, device="cuda").to(torch.bfloat16)
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    out_f, lse = _attention(qf, kf, vf, True, scale)
    out_f.backward(dout.float())
    qb, kb, vb = (t.clone().requires_grad_() for t in (q, k, v))
    out_b, _ = _attention(qb, kb, vb, True, scale)
    out_b.backward(dout)
    out = out_f.detach().to(torch.bfloat16)
    runs = [attention_backward(q, k, v, out, dout, lse.detach(), causal=True, scale=scale, deterministic=True)
            for _ in range(3)]
    torch.cuda.synchronize()
    for other in runs[1:]:
        for name, a, c in zip(("dQ", "dK", "dV"), runs[0], other):
            assert torch.equal(a, c), f"{name} differs between runs"
    for name, got, r, rb in zip(("dQ", "dK", "dV"), runs[0], (qf.grad, kf.grad, vf.grad), (qb.grad, kb.grad, vb.grad)):
        err = float((got.float() - r).abs().max())
        tol = 2 * float((rb.float() - r).abs().max()) + 1e-3 * float(r.abs().max())
        assert err <= tol, f"{name}: max error {err:.4g} over the tolerance {tol:.4g}"


@pytest.mark.parametrize("d,causal", [(128, True), (64, False), (64, True), (256, True)])
def test_varlen_backward_matches_autograd_per_sequence(d, causal):
    """Varlen (packed (total, H, D) tensors, cu_seqlens): every sequence's dQ, dK, dV against FP32 autograd of
    that sequence alone, with FlashAttention's tolerance; an empty sequence, one very long among short ones,
    S_q != S_kv per sequence (bottom-right causal), GQA 2:1."""
    _hopper()
    import torch

    from b200c.runtime.backward_launch import attention_backward_varlen

    torch.manual_seed(17 + d + causal)
    lens_q, lens_k = [1, 0, 77, 1000, 64], [5, 9, 77, 1200, 64]
    h, hk = 4, 2
    scale = 1.0 / math.sqrt(d)
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    # 5 query rows and 7 key rows past the last sequence: no sequence covers them, their gradients are 0
    q = torch.randn(sum(lens_q) + 5, h, d, device="cuda").to(torch.bfloat16)
    k, v = (torch.randn(sum(lens_k) + 7, hk, d, device="cuda").to(torch.bfloat16) for _ in range(2))
    dout = torch.randn_like(q)
    out = torch.zeros_like(q)
    lse = torch.full((h, q.shape[0]), float("-inf"), device="cuda")
    refs = []
    for i in range(len(lens_q)):
        rq, rk = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        bhsd = lambda t: t.transpose(0, 1).unsqueeze(0)  # noqa: E731
        qf, kf, vf = (bhsd(t).float().requires_grad_() for t in (q[rq], k[rk], v[rk]))
        o, l = _attention(qf, kf, vf, causal, scale)
        if o.numel():
            o.backward(bhsd(dout[rq]).float())
        qb, kb, vb = (bhsd(t).clone().requires_grad_() for t in (q[rq], k[rk], v[rk]))
        ob, _ = _attention(qb, kb, vb, causal, scale)
        if ob.numel():
            ob.backward(bhsd(dout[rq]))
        out[rq] = o.detach()[0].transpose(0, 1).to(torch.bfloat16)
        lse[:, rq] = l.detach()[0]
        refs.append((rq, rk, qf, kf, vf, qb, kb, vb))
    dq, dk, dv = attention_backward_varlen(q, k, v, out, dout, lse, cu_q, cu_k, max(lens_q), max(lens_k),
                                           causal=causal, scale=scale)
    torch.cuda.synchronize()
    assert bool((dq[-5:] == 0).all()) and bool((dk[-7:] == 0).all()) and bool((dv[-7:] == 0).all())
    for rq, rk, qf, kf, vf, qb, kb, vb in refs:
        for name, got, r, rb in (("dQ", dq[rq], qf.grad, qb.grad), ("dK", dk[rk], kf.grad, kb.grad),
                                 ("dV", dv[rk], vf.grad, vb.grad)):
            if got.numel() == 0:
                continue
            got = got.transpose(0, 1).unsqueeze(0).float()
            r = torch.zeros_like(got) if r is None else r  # a sequence without queries: dK, dV are 0
            rb = torch.zeros_like(got) if rb is None else rb.float()
            assert bool(torch.isfinite(got).all()), name
            err = float((got - r).abs().max())
            tol = 2 * float((rb - r).abs().max()) + 1e-3 * float(r.abs().max())
            assert err <= tol, f"{name} rows {rq}: max error {err:.4g} over the tolerance {tol:.4g}"

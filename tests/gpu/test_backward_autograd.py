"""b200c.attention's backward on the GPU (issue 48 step 2): inputs that require grad get dQ, dK, dV from
the sm90a backward kernels through the op's autograd formula, against FP32 torch autograd with
FlashAttention's backward tolerance (twice the BF16 computation's max error plus 1e-3 of the gradient's
largest magnitude): dense and causal, BSHD and BHSD, S not a multiple of the tiles, S_q != S_kv with rows
that see no key (dQ exactly 0, nothing NaN), 1 to 16 heads, GQA, torch.compile."""
import math

import pytest

pytestmark = pytest.mark.gpu


def _hopper():
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90a backward kernels run on compute capability 9.0 (H100 / H200)")


def _ref(q, k, v, causal, dtype):
    """Attention in ``dtype`` with autograd (BHSD, GQA by repetition, bottom-right causal)."""
    import torch

    g = q.shape[1] // k.shape[1]
    qq, kk, vv = q.to(dtype), k.repeat_interleave(g, 1).to(dtype), v.repeat_interleave(g, 1).to(dtype)
    s = qq @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        keep = torch.arange(skv, device=q.device)[None, :] <= torch.arange(sq, device=q.device)[:, None] + skv - sq
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s.float(), -1).nan_to_num(0.0).to(dtype)
    return p @ vv


def _grads(fn, q, k, v, dout):
    xs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    fn(*xs).backward(dout)
    return [x.grad for x in xs]


@pytest.mark.parametrize("b,h,hk,sq,skv,causal,layout,d", [
    (2, 4, 4, 256, 256, False, "bhsd", 128),
    (1, 2, 2, 333, 333, True, "bhsd", 128),
    (1, 16, 16, 512, 512, True, "bshd", 128),
    (2, 8, 2, 300, 300, True, "bshd", 128),     # GQA
    (1, 2, 2, 400, 150, True, "bhsd", 128),     # S_q > S_kv: rows 0..249 see no key
    (1, 2, 2, 100, 700, True, "bhsd", 128),     # S_q < S_kv
    (1, 1, 1, 1000, 1000, False, "bshd", 128),
    (2, 4, 4, 256, 256, False, "bhsd", 64),
    (2, 8, 2, 300, 300, True, "bshd", 64),      # GQA
    (1, 2, 2, 400, 150, True, "bhsd", 64),
    (2, 4, 4, 256, 256, False, "bhsd", 256),
    (2, 8, 2, 300, 300, True, "bshd", 256),     # GQA
])
def test_attention_backward(b, h, hk, sq, skv, causal, layout, d):
    _hopper()
    import torch

    import b200c

    torch.manual_seed(sq + skv + h + d)
    q = torch.randn(b, h, sq, d, device="cuda").to(torch.bfloat16)
    k = torch.randn(b, hk, skv, d, device="cuda").to(torch.bfloat16)
    v = torch.randn(b, hk, skv, d, device="cuda").to(torch.bfloat16)
    dout = torch.randn(b, h, sq, d, device="cuda").to(torch.bfloat16)
    tr = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2).contiguous())
    back = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2))

    got = _grads(lambda q_, k_, v_: back(b200c.attention(q_, k_, v_, causal=causal, layout=layout)),
                 tr(q), tr(k), tr(v), dout)
    got = [back(g) for g in got]
    ref = _grads(lambda *x: _ref(*x, causal, torch.float32), q.float(), k.float(), v.float(), dout.float())
    bf = _grads(lambda *x: _ref(*x, causal, torch.bfloat16), q, k, v, dout)
    for name, g, r, rb in zip(("dQ", "dK", "dV"), got, ref, bf):
        assert bool(torch.isfinite(g).all()), f"{name}: non-finite values"
        err = float((g.float() - r).abs().max())
        tol = 2 * float((rb.float() - r).abs().max()) + 1e-3 * float(r.abs().max())
        assert err <= tol, f"{name}: max error {err:.4g} over the tolerance {tol:.4g}"
    if causal and sq > skv:
        assert bool((got[0][:, :, : sq - skv] == 0).all()), "dQ of rows that see no key is not exactly 0"


def test_compiled_training_step_matches_eager():
    _hopper()
    import torch

    import b200c

    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 256, 4, 128, device="cuda").to(torch.bfloat16) for _ in range(3))
    fn = lambda q, k, v: b200c.attention(q, k, v, causal=True, layout="bshd")  # noqa: E731
    eager = _grads(fn, q, k, v, torch.ones_like(q))
    torch._dynamo.reset()
    compiled = _grads(torch.compile(fn, fullgraph=True), q, k, v, torch.ones_like(q))
    for e, c in zip(eager[1:], compiled[1:]):
        assert torch.equal(e, c)
    assert float((eager[0].float() - compiled[0].float()).abs().max()) <= 1e-2 * float(eager[0].float().abs().max())


def test_sdpa_dropin_trains_through_b200c():
    """The drop-in with inputs that require grad (issue 48 step 4): b200c's forward and backward, no
    fallback warning, gradients within the tolerance (GQA, causal, head dim 64)."""
    _hopper()
    import warnings

    import torch

    import b200c
    from b200c.runtime import sdpa

    torch.manual_seed(5)
    q = torch.randn(2, 8, 300, 64, device="cuda").to(torch.bfloat16)
    k, v = (torch.randn(2, 2, 300, 64, device="cuda").to(torch.bfloat16) for _ in range(2))
    dout = torch.randn_like(q)
    before = sdpa.calls["b200c"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", b200c.FallbackWarning)
        got = _grads(lambda *x: b200c.scaled_dot_product_attention(*x, is_causal=True, enable_gqa=True), q, k, v, dout)
    assert sdpa.calls["b200c"] == before + 1
    ref = _grads(lambda *x: _ref(*x, True, torch.float32), q.float(), k.float(), v.float(), dout.float())
    bf = _grads(lambda *x: _ref(*x, True, torch.bfloat16), q, k, v, dout)
    for name, g, r, rb in zip(("dQ", "dK", "dV"), got, ref, bf):
        err = float((g.float() - r).abs().max())
        tol = 2 * float((rb.float() - r).abs().max()) + 1e-3 * float(r.abs().max())
        assert err <= tol, f"{name}: max error {err:.4g} over the tolerance {tol:.4g}"


def test_cuda_graph_captures_forward_and_backward():
    """Issue 48 step 4: one CUDA graph holds b200c.attention's forward and backward (torch's whole-network
    capture recipe: warm up on a side stream, capture, copy new data in, replay). With deterministic=True the
    replayed gradients equal an eager forward + backward on the same new data bit for bit."""
    _hopper()
    import torch

    import b200c

    torch.manual_seed(7)
    b, h, hk, s, d = 2, 8, 2, 384, 128
    q = torch.randn(b, h, s, d, device="cuda").to(torch.bfloat16).requires_grad_()
    k = torch.randn(b, hk, s, d, device="cuda").to(torch.bfloat16).requires_grad_()
    v = torch.randn(b, hk, s, d, device="cuda").to(torch.bfloat16).requires_grad_()
    dout = torch.randn(b, h, s, d, device="cuda").to(torch.bfloat16)

    def step():
        out = b200c.attention(q, k, v, causal=True, deterministic=True)
        out.backward(dout)
        return out

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # kernels loaded, allocator warmed, outside the capture
        for _ in range(2):
            q.grad = k.grad = v.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    q.grad = k.grad = v.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    new = [torch.randn_like(t, dtype=torch.float32).to(torch.bfloat16) for t in (q, k, v, dout)]
    with torch.no_grad():
        for t, n in zip((q, k, v, dout), new):
            t.copy_(n)
    g.replay()
    torch.cuda.synchronize()
    xs = [n.clone().requires_grad_() for n in new[:3]]
    ref_out = b200c.attention(*xs, causal=True, deterministic=True)
    ref_out.backward(new[3])
    assert torch.equal(out, ref_out)
    for name, got, want in zip(("dQ", "dK", "dV"), (q.grad, k.grad, v.grad), (x.grad for x in xs)):
        assert torch.equal(got, want), name
    assert bool(q.grad.abs().max() > 0)

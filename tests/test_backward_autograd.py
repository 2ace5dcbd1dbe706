"""The autograd formula of b200c.attention (issue 48 step 2), on the CPU: the fake driver runs the
forward's launches, and the backward kernels' launch layer is replaced by the FP64 host model
(b200c/codegen/backward_model.py), so these tests check the plumbing: which tensors, scale and mask the
formula hands to the backward, that dQ, dK, dV reach q.grad, k.grad, v.grad through the BSHD views,
GQA and torch.compile, and what is refused by name. The kernels themselves are checked on the GPU
(tests/gpu/test_backward_kernel.py, tests/gpu/test_backward_autograd.py)."""
from __future__ import annotations

import math

import pytest
import torch

import b200c
from b200c.errors import BackwardNotSupportedError
from b200c.runtime import backward_launch, fake_driver

BF16 = torch.bfloat16


def _reference_grads(q, k, v, dout, causal, scale):
    """FP64 torch autograd of attention on q, k, v (BHSD, GQA by repetition)."""
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    g = qd.shape[1] // kd.shape[1]
    s = qd @ kd.repeat_interleave(g, 1).transpose(-1, -2) * scale
    if causal:
        sq, skv = qd.shape[2], kd.shape[2]
        keep = torch.arange(skv)[None, :] <= torch.arange(sq)[:, None] + (skv - sq)
        s = s.masked_fill(~keep, float("-inf"))
    out = torch.softmax(s, -1).nan_to_num(0.0) @ vd.repeat_interleave(g, 1)
    out.backward(dout.double())
    return qd.grad, kd.grad, vd.grad


@pytest.fixture
def host_backward(monkeypatch):
    """Replace the kernels' launch layer by the host model; record each call's arguments."""
    from b200c.codegen.backward_model import attention_backward as model

    calls = []

    def fake(q, k, v, out, dout, lse, *, causal=False, scale=None, schedule=None, deterministic=None):
        calls.append(dict(q=q, k=k, v=v, out=out, dout=dout, lse=lse, causal=causal, scale=scale,
                          deterministic=deterministic))
        # the fake driver's forward wrote no real O / LSE: give the model its own (FP64 attention)
        qd, kd, vd = (x.double() for x in (q, k, v))
        g = q.shape[1] // k.shape[1]
        s = qd @ kd.repeat_interleave(g, 1).transpose(-1, -2) * scale
        if causal:
            sq, skv = q.shape[2], k.shape[2]
            keep = torch.arange(skv)[None, :] <= torch.arange(sq)[:, None] + (skv - sq)
            s = s.masked_fill(~keep, float("-inf"))
        lse_ref = torch.logsumexp(s, -1)
        o_ref = torch.softmax(s, -1).nan_to_num(0.0) @ vd.repeat_interleave(g, 1)
        dq, dk, dv = model(q, k, v, o_ref, lse_ref, dout, causal=causal, softmax_scale=scale)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)

    monkeypatch.setattr(backward_launch, "attention_backward", fake)
    return calls


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_reach_the_inputs(host_backward, layout, causal):
    torch.manual_seed(0)
    b, h, hk, sq, skv, d = 2, 4, 2, 96, 160, 128
    shape = (lambda n, s: (b, n, s, d)) if layout == "bhsd" else (lambda n, s: (b, s, n, d))
    q = torch.randn(shape(h, sq)).to(BF16).requires_grad_()
    k = torch.randn(shape(hk, skv)).to(BF16).requires_grad_()
    v = torch.randn(shape(hk, skv)).to(BF16).requires_grad_()
    dout = torch.randn(shape(h, sq)).to(BF16)
    with fake_driver.install():
        out = b200c.attention(q, k, v, causal=causal, softmax_scale=0.1, layout=layout,
                              schedule=b200c.Schedule())
        out.backward(dout)
    (call,) = host_backward
    assert call["causal"] is causal and call["scale"] == pytest.approx(0.1)
    assert call["q"].shape == (b, h, sq, d) and call["k"].shape == (b, hk, skv, d)  # BHSD views reach the kernel
    assert call["lse"].shape == (b, h, sq) and call["lse"].dtype == torch.float32  # saved from attention_lse
    tr = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2))
    ref = _reference_grads(tr(q), tr(k), tr(v), tr(dout), causal, 0.1)
    for name, got, r in (("dQ", q.grad, ref[0]), ("dK", k.grad, ref[1]), ("dV", v.grad, ref[2])):
        assert got is not None and tr(got).shape == r.shape, name
        err = float((tr(got).double() - r).abs().max())
        assert err <= 0.02 * float(r.abs().max()) + 1e-3, (name, err)


def test_only_the_inputs_that_require_grad_get_one(host_backward):
    q = torch.randn(1, 2, 64, 128).to(BF16).requires_grad_()
    k, v = torch.randn(1, 2, 64, 128).to(BF16), torch.randn(1, 2, 64, 128).to(BF16)
    with fake_driver.install():
        b200c.attention(q, k, v, schedule=b200c.Schedule()).float().sum().backward()
    assert q.grad is not None and k.grad is None and v.grad is None
    assert torch.equal(host_backward[0]["dout"], torch.ones_like(q))  # d(sum(out))/d(out)


def test_compile_traces_forward_and_backward(host_backward):
    torch._dynamo.reset()
    s = b200c.Schedule()
    fn = torch.compile(lambda q, k, v: b200c.attention(q, k, v, schedule=s, causal=True) * 2, fullgraph=True,
                       backend="aot_eager")
    try:
        q, k, v = (torch.randn(1, 2, 128, 128).to(BF16).requires_grad_() for _ in range(3))
        with fake_driver.install():
            fn(q, k, v).float().sum().backward()
        assert len(host_backward) == 1 and host_backward[0]["causal"] is True
        assert q.grad is not None and k.grad is not None and v.grad is not None
    finally:
        torch._dynamo.reset()


def test_lse_gradient_is_refused_by_name(host_backward):
    q = torch.randn(1, 2, 64, 128).to(BF16).requires_grad_()
    with fake_driver.install():
        out, lse = b200c.attention(q, q.detach(), q.detach(), schedule=b200c.Schedule(), return_lse=True)
        out.float().sum().backward(retain_graph=True)  # the output alone: fine
        assert q.grad is not None
        with pytest.raises(BackwardNotSupportedError, match="flows into the LSE"):
            (out.float().sum() + lse.sum()).backward()


def test_compiled_forward_never_raises_the_backwards_refusals(host_backward):
    """torch.compile traces the autograd formula while it compiles the forward: its refusals (an LSE the loss
    uses) are the backward op's, at run time, so the compiled forward runs and
    backward() raises (found by review: they were raised from the traced formula, failing the forward)."""
    s = b200c.Schedule()
    q = torch.randn(1, 2, 128, 128).to(BF16).requires_grad_()
    k, v = q.detach().clone(), q.detach().clone()
    torch._dynamo.reset()
    try:
        with fake_driver.install():
            fn = torch.compile(lambda q: b200c.attention(q, k, v, schedule=s, return_lse=True), fullgraph=True,
                               backend="aot_eager")
            out, lse = fn(q)
            out.float().sum().backward(retain_graph=True)  # an LSE the loss does not use: zeros, fine
            assert len(host_backward) == 1 and q.grad is not None
            with pytest.raises(BackwardNotSupportedError, match="flows into the LSE"):
                (out.float().sum() + lse.sum()).backward()
    finally:
        torch._dynamo.reset()
    assert len(host_backward) == 1


def test_the_launch_layer_refuses_other_devices():
    q = torch.randn(1, 2, 64, 128).to(BF16)
    with pytest.raises(BackwardNotSupportedError, match="run on sm_90a"):
        backward_launch.attention_backward(q, q, q, q, q, torch.zeros(1, 2, 64))


def test_without_the_host_model_the_cpu_backward_is_refused_by_name():
    q = torch.randn(1, 2, 64, 128).to(BF16).requires_grad_()
    with fake_driver.install():
        out = b200c.attention(q, q.detach(), q.detach(), schedule=b200c.Schedule())
        with pytest.raises(BackwardNotSupportedError, match="run on sm_90a"):
            out.float().sum().backward()


def test_scale_default_is_one_over_sqrt_d(host_backward):
    q = torch.randn(1, 1, 16, 128).to(BF16).requires_grad_()
    with fake_driver.install():
        b200c.attention(q, q.detach(), q.detach(), schedule=b200c.Schedule()).float().sum().backward()
    assert host_backward[0]["scale"] == pytest.approx(1 / math.sqrt(128))


# ---- the SDPA drop-in (issue 48 step 4): gradients through b200c where its backward kernels cover the call ----


@pytest.mark.parametrize("d", [64, 256])
def test_dropin_with_grad_runs_b200c_forward_and_backward(host_backward, d):
    torch.manual_seed(3)
    b, h, hk, s = 1, 4, 2, 80
    q = torch.randn(b, h, s, d).to(BF16).requires_grad_()
    k = torch.randn(b, hk, s, d).to(BF16).requires_grad_()
    v = torch.randn(b, hk, s, d).to(BF16).requires_grad_()
    dout = torch.randn(b, h, s, d).to(BF16)
    from b200c.runtime import sdpa

    before = sdpa.calls["b200c"]
    with fake_driver.install(target="sm90a") as fd:
        out = b200c.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, target="sm90a")
        out.backward(dout)
    assert len(fd.launches) == 1 and sdpa.calls["b200c"] == before + 1  # the forward: b200c, no fallback
    (call,) = host_backward  # the backward: b200c's (here the host model in the kernels' place)
    assert call["causal"] is True and call["scale"] == pytest.approx(1 / math.sqrt(d))
    ref = _reference_grads(q, k, v, dout, True, 1 / math.sqrt(d))
    for name, got, r in zip(("dQ", "dK", "dV"), (q.grad, k.grad, v.grad), ref):
        assert got is not None and got.shape == r.shape, name
        assert float((got.double() - r).abs().max()) <= 2e-2 * float(r.abs().max()) + 1e-3, name


@pytest.mark.parametrize("case,match", [
    ("mask", "with an attn_mask"),
    ("head_dim", "at head dim 256"),
    ("device", "on compute capability 10.0"),
])
def test_dropin_with_grad_falls_back_where_the_backward_does_not_cover(host_backward, monkeypatch, case, match):
    from b200c.errors import FallbackWarning

    d = 256 if case == "head_dim" else 128
    if case == "head_dim":  # every built-in head dim is covered now: a generator that covers fewer
        monkeypatch.setattr(backward_launch, "covered_head_dims", lambda: (64, 128))
    q = torch.randn(1, 2, 64, d).to(BF16).requires_grad_()
    k, v = torch.randn(1, 2, 64, d).to(BF16), torch.randn(1, 2, 64, d).to(BF16)
    mask = torch.ones(64, 64, dtype=torch.bool).tril() if case == "mask" else None
    with fake_driver.install(target="sm100a" if case == "device" else "sm90a") as fd:
        with pytest.warns(FallbackWarning, match=match):
            out = b200c.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.float().sum().backward()
    assert not fd.launches and not host_backward and q.grad is not None  # torch's SDPA, forward and backward


def test_varlen_autograd_hands_the_packed_tensors_to_the_varlen_backward(monkeypatch):
    """attention_varlen with inputs that require grad: the forward runs with return_lse=True (the LSE kept
    for the backward, the caller's result as asked), and backward() hands q, k, v, out, the (H, total_q) LSE,
    cu_seqlens, the longest lengths, scale and causal to attention_backward_varlen, whose dQ, dK, dV reach
    q.grad, k.grad, v.grad (a stub in the kernels' place: the plumbing only; the kernels' numbers are the
    GPU tests')."""
    calls = []

    def stub(q, k, v, out, dout, lse, cu_q, cu_k, max_q, max_k, *, causal=False, scale=None, deterministic=None,
             **_):
        calls.append(dict(lse=lse.shape, cu=(cu_q.tolist(), cu_k.tolist()), max=(max_q, max_k), causal=causal,
                          scale=scale, dout=dout.shape, deterministic=deterministic))
        return torch.full_like(q, 1.0), torch.full_like(k, 2.0), torch.full_like(v, 3.0)

    monkeypatch.setattr(backward_launch, "attention_backward_varlen", stub)
    cu_q = torch.tensor([0, 100, 300], dtype=torch.int32)
    cu_k = torch.tensor([0, 150, 300], dtype=torch.int32)
    q = torch.randn(300, 4, 128).to(BF16).requires_grad_()
    k = torch.randn(300, 2, 128).to(BF16).requires_grad_()
    v = torch.randn(300, 2, 128).to(BF16).requires_grad_()
    with fake_driver.install(target="sm90a") as fd:
        out = b200c.attention_varlen(q, k, v, cu_q, cu_k, 200, 150, causal=True, softmax_scale=0.2, target="sm90a")
        assert isinstance(out, torch.Tensor) and out.shape == q.shape  # return_lse=False: the output alone
        out.float().sum().backward()
    assert len(fd.launches) == 1 and fd.launches[0].lse_ptr != 0  # the forward wrote an LSE for the backward
    (call,) = calls
    assert call == dict(lse=(4, 300), cu=([0, 100, 300], [0, 150, 300]), max=(200, 150), causal=True,
                        scale=pytest.approx(0.2), dout=(300, 4, 128), deterministic=None)
    assert bool((q.grad == 1).all()) and bool((k.grad == 2).all()) and bool((v.grad == 3).all())


def test_deterministic_keyword_reaches_the_backward(host_backward, monkeypatch):
    """b200c.attention(deterministic=True) (flash_attn_func's keyword) asks the backward for the deterministic
    dQ reduction; without it the launch layer decides from torch's switch (None); torch.compile traces it;
    attention_varlen takes it too; a non-bool is refused by name."""
    q = torch.randn(1, 2, 64, 128).to(BF16).requires_grad_()
    k, v = torch.randn(1, 2, 64, 128).to(BF16), torch.randn(1, 2, 64, 128).to(BF16)
    with fake_driver.install(target="sm90a"):
        b200c.attention(q, k, v, target="sm90a", deterministic=True).float().sum().backward()
        b200c.attention(q, k, v, target="sm90a", return_lse=True, layout="bshd",
                        deterministic=True)[0].float().sum().backward()
        b200c.attention(q, k, v, target="sm90a").float().sum().backward()
        torch._dynamo.reset()
        try:
            f = torch.compile(lambda a, b, c: b200c.attention(a, b, c, target="sm90a", deterministic=True),
                              fullgraph=True, backend="aot_eager")
            f(q, k, v).float().sum().backward()
        finally:
            torch._dynamo.reset()
        with pytest.raises(b200c.LaunchError, match="deterministic='yes'"):
            b200c.attention(q, k, v, target="sm90a", deterministic="yes")
    assert [c["deterministic"] for c in host_backward] == [True, True, None, True]
    calls = []

    def stub(q, k, v, out, dout, lse, *rest, deterministic=None, **_):
        calls.append(deterministic)
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    monkeypatch.setattr(backward_launch, "attention_backward_varlen", stub)
    cu = torch.tensor([0, 40, 64], dtype=torch.int32)
    with fake_driver.install(target="sm90a"):
        qv = torch.randn(64, 2, 128).to(BF16).requires_grad_()
        kv = torch.randn(64, 2, 128).to(BF16)
        b200c.attention_varlen(qv, kv, kv, cu, cu, 40, 40, target="sm90a", deterministic=True).float().sum().backward()
    assert calls == [True]

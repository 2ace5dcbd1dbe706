"""b200c as torch's SDPA flash provider (torch.nn.attention.register_flash_attention_impl, torch >= 2.11):
registered under "b200c" without activating, activated and restored through torch's own API; while
active, aten::_scaled_dot_product_flash_attention runs b200c (here on the CPU with the stand-in driver,
registered for the CPU key), eagerly and under torch.compile(fullgraph=True), returning what torch's
flash kernel returns."""
import pytest
import torch

import b200c  # noqa: F401  (registers the provider: torch is imported first)
from b200c.runtime import fake_driver, torch_flash

tna = pytest.importorskip("torch.nn.attention")
pytestmark = pytest.mark.skipif(not torch_flash.available(), reason="this torch has no register_flash_attention_impl")
BF16 = torch.bfloat16
OP = torch.ops.aten._scaled_dot_product_flash_attention


def test_registered_not_active():
    import b200c.runtime.op  # noqa: F401

    assert "b200c" in tna.list_flash_attention_impls()
    assert tna.current_flash_attention_impl() != "b200c"


def test_activate_and_restore_through_torch():
    tna.activate_flash_attention_impl("b200c")
    try:
        assert tna.current_flash_attention_impl() == "b200c"
    finally:
        tna.restore_flash_attention_impl()
    assert tna.current_flash_attention_impl() is None


def _qkv(h=4, h_kv=2, s=256, d=128):
    return (torch.randn(1, h, s, d).to(BF16), torch.randn(1, h_kv, s, d).to(BF16), torch.randn(1, h_kv, s, d).to(BF16))


def test_active_op_runs_b200c_with_torchs_outputs():
    q, k, v = _qkv()
    with fake_driver.install() as fd:  # CPU tensors: the first native target's built-in schedule (sm100a)
        handle = torch_flash.activate("CPU")
        try:
            out, lse, cq, ck, mq, mk, rng, unused, dbg = OP(q, k, v, 0.0, True, False, scale=0.1)
            assert out.shape == q.shape and out.stride() == q.stride() and lse.shape == (1, 4, 256)
            assert lse.dtype == torch.float32 and (mq, mk) == (256, 256) and rng.shape == (2,)
            L = fd.launches[-1]
            assert L.params["causal"] == 1 and L.params["heads_kv"] == 2 and L.scale == pytest.approx(0.1)
            assert L.params["lse"] == lse.data_ptr()
            with pytest.raises(RuntimeError, match="no dropout"):
                OP(q, k, v, 0.1, False, False)

            def fn(q, k, v):
                return OP(q, k, v, 0.0, False, False)[0] * 2

            compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
            n = len(fd.launches)
            assert compiled(q, k, v).shape == q.shape and len(fd.launches) == n + 1
        finally:
            handle.remove()
    with pytest.raises(NotImplementedError):  # the CPU key had no kernel of this op: it is gone again
        OP(q, k, v, 0.0, False, False)


def test_calls_b200c_does_not_serve_are_named():
    q, k, v = _qkv()
    assert torch_flash._reason(q.half(), k.half(), v.half(), False).startswith("dtype")
    assert torch_flash._reason(q[..., :80], k[..., :80], v[..., :80], False) == "head dim 80"
    assert "S_q != S_kv" in torch_flash._reason(q[:, :, :100], k, v, True)
    assert torch_flash._reason(q, k, v, True) is None


def test_active_backward_op_runs_b200c_where_covered(monkeypatch):
    """Issue 48 step 4: while active, the flash backward op's kernel is b200c's where its sm90a backward
    kernels cover the call: q, k, v, out, dO, the LSE, causal
    and scale reach the launch layer (a stub here); a call they do not cover goes to torch's kernel (none
    on the CPU key: NotImplementedError naming why)."""
    from b200c.runtime import backward_launch

    calls = []

    def stub(q, k, v, out, dout, lse, *, causal=False, scale=None, **_):
        calls.append((q.shape, k.shape, out.shape, dout.shape, lse.shape, causal, scale))
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    monkeypatch.setattr(backward_launch, "attention_backward", stub)
    q, k, v = _qkv()
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_backward
    rng, unused, none = torch.zeros(2, dtype=torch.uint64), torch.empty((), dtype=torch.uint64), torch.empty(0)
    lse = torch.zeros(q.shape[:3])
    with fake_driver.install(target="sm90a"):
        handle = torch_flash.activate("CPU")
        try:
            dq, dk, dv = bwd(q, q, k, v, q, lse, none, none, 256, 256, 0.0, True, rng, unused, scale=0.1)
            assert calls == [(q.shape, k.shape, q.shape, q.shape, lse.shape, True, 0.1)]
            assert dq.shape == q.shape and dk.shape == k.shape
            with pytest.raises(NotImplementedError, match="dropout_p=0.1"):
                bwd(q, q, k, v, q, lse, none, none, 256, 256, 0.1, True, rng, unused, scale=0.1)
        finally:
            handle.remove()
    assert len(calls) == 1

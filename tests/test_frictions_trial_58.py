"""Findings of a new-user trial (2026-12-08, CPU, the stand-in driver): a softmax_scale tensor that requires
grad lost its gradient silently, numpy bools were refused by every flag, a failed backward launch was not a
DriverError, a backward schedule for another head dim was refused with a misleading budget message, and
errors that named a rule without the fix."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import b200c
from b200c.errors import BackwardNotSupportedError, DriverError, LaunchError, ResourceError, ScheduleError
from b200c.runtime import fake_driver

BF16 = torch.bfloat16


def _qkv(grad=False, d=128):
    return tuple(torch.randn(1, 2, 128, d).to(BF16).requires_grad_(grad) for _ in range(3))


def test_a_scale_tensor_that_requires_grad_is_refused():
    q, k, v = _qkv(grad=True)
    t = torch.tensor(0.1, requires_grad=True)
    with fake_driver.install(target="sm90a") as fd:
        with pytest.raises(BackwardNotSupportedError, match=r"softmax_scale is a tensor that requires grad.*detach"):
            b200c.attention(q, k, v, softmax_scale=t)
        qv = torch.randn(100, 2, 128).to(BF16)
        cu = torch.tensor([0, 100], dtype=torch.int32)
        with pytest.raises(BackwardNotSupportedError, match="softmax_scale is a tensor that requires grad"):
            b200c.attention_varlen(qv, qv, qv, cu, cu, 100, 100, softmax_scale=t)
        assert not fd.launches
        b200c.attention(q, k, v, softmax_scale=t.detach())  # a detached one, or no grad mode: runs
        with torch.no_grad():
            b200c.attention(q, k, v, softmax_scale=t)
        assert len(fd.launches) == 2


@pytest.mark.parametrize("value", [np.True_, np.False_])
def test_numpy_bools_are_flags(value):
    q, k, v = _qkv()
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention(q, k, v, causal=value)
        assert fd.launches[-1].params["causal"] == int(bool(value))
    with pytest.raises(LaunchError, match=r"causal=np.int64\(2\) \(numpy.int64\) must be True or False"):
        b200c.attention(q, k, v, causal=np.int64(2))


def test_a_failed_backward_launch_is_a_driver_error(monkeypatch):
    import types

    from cuda.bindings import driver as real

    from b200c.runtime import backward_launch as bl

    q, k, v = _qkv(grad=True)
    with fake_driver.install(target="sm90a"):
        loaded = bl._loaded

        def failing(gen, device):  # the module's driver calls, with cuLaunchKernel failing
            m = loaded(gen, device)
            cu = types.SimpleNamespace(**vars(m.cu))
            cu.cuLaunchKernel = lambda *a: (real.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)
            return types.SimpleNamespace(**{**vars(m), "cu": cu})

        monkeypatch.setattr(bl, "_loaded", failing)
        out = b200c.attention(q, k, v)
        with pytest.raises(DriverError, match=r"cuLaunchKernel \(backward preprocess.*CUDA_ERROR_ILLEGAL_ADDRESS"):
            out.float().sum().backward()


def test_a_backward_schedule_of_another_head_dim_names_the_cause():
    q, k, v = _qkv(grad=True, d=128)
    with fake_driver.install(target="sm90a"):
        with pytest.raises((ScheduleError, ResourceError), match=r"head_dim=64\) at the inputs' head dim D = 128: .*"
                                                                 r"default_backward_schedule\(128\)"):
            b200c.attention(q, k, v, backward_schedule=b200c.default_backward_schedule(64))


def test_errors_that_now_name_the_fix():
    with pytest.raises(ScheduleError, match=r"head dim 96; b200c supports 64, 128 and 256 \(zero-pad q, k and v "
                                            r"to head dim 128 with softmax_scale=96\*\*-0.5"):
        with fake_driver.install(target="sm90a"):
            q = torch.randn(1, 2, 16, 96).to(BF16)
            b200c.attention(q, q, q)
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match=r"q must be a 4-D tensor \(\(B, H, S, D\); layout='bshd'.*got shape \(\)"):
            x = torch.tensor(1.0).to(BF16)
            b200c.attention(x, x, x)
        h = torch.randn(1, 2, 16, 128).half()
        with pytest.raises(LaunchError, match=r"torch.bfloat16 \(q.to\(torch.bfloat16\)"):
            b200c.attention(h, h, h)


def test_a_second_order_gradient_is_refused():
    """A backward with create_graph=True runs (a penalty on other parameters' gradients still works); differentiating
    b200c's gradients again raises BackwardNotSupportedError naming the limit, instead of torch's 'no autograd
    formula' error."""
    q, k, v = _qkv(grad=True)
    w = torch.ones((), requires_grad=True)
    with fake_driver.install(target="sm90a"):
        out = b200c.attention(q, k, v)
        gw, gq = torch.autograd.grad(out.float().sum() * w, (w, q), create_graph=True)
        (gw * gw).backward(retain_graph=True)  # a penalty on w's gradient: first order through b200c (gw = sum(out))
        assert q.grad is not None and q.grad.shape == q.shape
        with pytest.raises(BackwardNotSupportedError, match="first-order gradients only"):
            gq.float().sum().backward()
        (g,) = torch.autograd.grad(b200c.attention(q, k, v).float().sum(), q)
        assert g.shape == q.shape and not g.requires_grad


def test_a_numpy_cache_length_is_named_as_such():
    q = torch.randn(2, 1, 8, 128).to(BF16)
    cache = torch.zeros(2, 64, 8, 128).to(BF16)
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match=r"got numpy.int32 np.int32\(5\) \(pass int\(...\) or a tensor\)"):
            b200c.attention_with_kvcache(q, cache, cache, cache_seqlens=np.int32(5))


def test_the_drop_in_refuses_a_scale_that_requires_grad_by_its_name():
    q, k, v = _qkv(grad=True)
    t = torch.tensor(0.1, requires_grad=True)
    with fake_driver.install(target="sm90a"):
        with pytest.raises(BackwardNotSupportedError, match=r"^scale is a tensor that requires grad"):
            b200c.scaled_dot_product_attention(q, k, v, scale=t)


def test_attention_backward_with_a_schedule_of_another_head_dim_names_the_cause():
    q, k, v = _qkv(d=128)
    out, lse = torch.empty_like(q), torch.zeros(1, 2, 128)
    with fake_driver.install(target="sm90a"):
        with pytest.raises((ScheduleError, ResourceError), match=r"head_dim=64\) at the inputs' head dim D = 128"):
            b200c.attention_backward(q, k, v, out, out, lse, schedule=b200c.default_backward_schedule(64))

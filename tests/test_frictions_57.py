"""Frictions a new-user trial of training and decoding found (2026-12-07), each with the call that showed it."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

import b200c
from b200c.errors import LaunchError
from b200c.runtime import fake_driver

BF16 = torch.bfloat16


def test_drop_in_fallback_from_python_c_warns_instead_of_raising_import_error():
    """The fallback's warning named the caller's module globals for its source line: in the REPL and under
    ``python -c`` that module has a built-in loader, and showing the warning raised ImportError."""
    code = ("import torch, b200c\nq = torch.randn(1, 2, 16, 64)\n"
            "print(tuple(b200c.scaled_dot_product_attention(q, q, q).shape))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "(1, 2, 16, 64)" in r.stdout and "FallbackWarning" in r.stderr and "ImportError" not in r.stderr
    r = subprocess.run([sys.executable, "-i"], input=code, capture_output=True, text=True, timeout=300)
    assert "(1, 2, 16, 64)" in r.stdout and "ImportError" not in r.stderr, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True, timeout=300)  # stdin
    assert r.returncode == 0 and "(1, 2, 16, 64)" in r.stdout and "ImportError" not in r.stderr, r.stderr[-2000:]


def _bwd_inputs(d=128, s=64, skv=None):
    q, out, dout = (torch.randn(1, 2, s, d).to(BF16) for _ in range(3))
    k, v = (torch.randn(1, 2, s if skv is None else skv, d).to(BF16) for _ in range(2))
    return q, k, v, out, dout, torch.randn(1, 2, s)


@pytest.mark.parametrize("kw, match", [(dict(causal="no"), "causal='no'"), (dict(causal=2), "causal=2"),
                                       (dict(scale=-1.0), "scale"), (dict(scale=math.nan), "scale"),
                                       (dict(scale="0.1"), "scale"), (dict(deterministic="yes"), "deterministic")])
def test_attention_backward_checks_its_scalars(kw, match):
    """attention_backward took causal="no" as causal (bool of a str) and any scale; b200c.attention refuses them."""
    with fake_driver.install(target="sm90a") as fd:
        with pytest.raises(LaunchError, match=match):
            b200c.attention_backward(*_bwd_inputs(), **kw)
        with pytest.raises(LaunchError, match=match):
            q, k, v, out, dout, lse = _bwd_inputs()
            cu = torch.tensor([0, 64], dtype=torch.int32)
            flat = [t[0].transpose(0, 1).contiguous() for t in (q, k, v, out, dout)]
            b200c.attention_backward_varlen(*flat, lse[0], cu, cu, 64, 64, **kw)
        assert not fd.launches


def test_attention_backward_sets_the_schedule_head_dim_to_the_inputs():
    """A BackwardSchedule written for another head dim (BackwardSchedule() is head_dim 128) was refused with
    'this module is built for 128'; the forward's schedules take the inputs' D, and so does the backward's."""
    with fake_driver.install(target="sm90a") as fd:
        mine = b200c.default_backward_schedule(64).replace(head_dim=128)
        dq, dk, dv = b200c.attention_backward(*_bwd_inputs(d=64), schedule=mine)
        assert dq.shape[-1] == 64 and len(fd.launches) == 3
    with pytest.raises(LaunchError, match="head dim 80"):
        with fake_driver.install(target="sm90a"):
            b200c.attention_backward(*_bwd_inputs(d=80))


def test_backward_of_a_call_without_keys_is_zero():
    """The forward of S_kv = 0 gives zeros; its backward raised 'S_kv = 0 must be >= 1'. The gradients of
    such a call are 0 (k and v are empty), and nothing launches."""
    with fake_driver.install(target="sm90a") as fd:
        q, k, v, out, dout, lse = _bwd_inputs(skv=0)
        dq, dk, dv = b200c.attention_backward(q, k, v, out, dout, lse)
        assert not fd.launches
        assert dq.shape == q.shape and not dq.any() and dk.shape == k.shape and dv.shape == v.shape
        q, k, v, out, dout, lse = _bwd_inputs(s=0)
        dq, dk, dv = b200c.attention_backward(q, k, v, out, dout, lse)
        assert dq.shape == q.shape and dk.shape == k.shape and not dk.any() and not dv.any() and not fd.launches


def _cache():
    q = torch.randn(1, 1, 8, 128).to(BF16)
    kc, vc = (torch.randn(1, 64, 2, 128).to(BF16) for _ in range(2))
    k1, v1 = (torch.randn(1, 1, 2, 128).to(BF16) for _ in range(2))
    return q, kc, vc, k1, v1, torch.full((1,), 10, dtype=torch.int32)


def test_kvcache_refuses_new_tokens_of_another_dtype_before_writing():
    """A float16 v for the append raised torch's index_put RuntimeError after k_cache was already written."""
    q, kc, vc, k1, v1, lens = _cache()
    before = kc.clone(), vc.clone()
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match=r"the new v is torch.float16 .* pass v.to\(k_cache\)"):
            b200c.attention_with_kvcache(q, kc, vc, k1, v1.half(), cache_seqlens=lens, target="sm90a")
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


@pytest.mark.parametrize("kw, match", [
    (dict(scale=0.1), "calls it softmax_scale="), (dict(page_table=None), "calls it block_table="),
    (dict(seqused_k=None), "calls it cache_seqlens="), (dict(is_causal=True), "calls it causal="),
    (dict(causal="yes"), "causal='yes'"), (dict(return_lse=2), "return_lse=2")])
def test_kvcache_keywords_of_other_libraries_and_flags(kw, match):
    q, kc, vc, k1, v1, lens = _cache()
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match=match):
            b200c.attention_with_kvcache(q, kc, vc, cache_seqlens=lens, target="sm90a", **kw)


def test_kvcache_without_cache_seqlens_and_with_a_float16_q():
    """A missing cache_seqlens (or cache_seqlen=, a typo) was a raw TypeError; a float16 q was told the caches
    must be float16 'like q', which b200c never runs."""
    q, kc, vc, k1, v1, lens = _cache()
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match="needs cache_seqlens="):
            b200c.attention_with_kvcache(q, kc, vc, target="sm90a")
        with pytest.raises(LaunchError, match="cache_seqlen=10: attention_with_kvcache calls it cache_seqlens="):
            b200c.attention_with_kvcache(q, kc, vc, cache_seqlen=10, target="sm90a")
        with pytest.raises(LaunchError, match="q is torch.float16; b200c kernels take torch.bfloat16"):
            b200c.attention_with_kvcache(q.half(), kc.half(), vc.half(), cache_seqlens=lens, target="sm90a")


def test_attention_backward_keywords_of_other_conventions():
    """softmax_scale= (b200c.attention's and flash_attn's name) was a raw TypeError."""
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match="softmax_scale=0.1: attention_backward calls it scale="):
            b200c.attention_backward(*_bwd_inputs(), softmax_scale=0.1)
        with pytest.raises(LaunchError, match="layout='bshd': attention_backward takes nothing: it takes BHSD"):
            b200c.attention_backward(*_bwd_inputs(), layout="bshd")
        with pytest.raises(LaunchError, match="determinstic=True.*deterministic"):
            b200c.attention_backward(*_bwd_inputs(), determinstic=True)
        q, k, v, out, dout, lse = _bwd_inputs()
        cu = torch.tensor([0, 64], dtype=torch.int32)
        flat = [t[0].transpose(0, 1).contiguous() for t in (q, k, v, out, dout)]
        with pytest.raises(LaunchError, match="attention_backward_varlen calls it causal="):
            b200c.attention_backward_varlen(*flat, lse[0], cu, cu, 64, 64, is_causal=True)


def test_backward_schedule_with_an_unknown_knob_is_a_schedule_error():
    """BackwardSchedule(foo=1) was dataclass __init__'s bare TypeError; Schedule(foo=1) is a ScheduleError."""
    with pytest.raises(b200c.ScheduleError, match="BackwardSchedule has no field 'blok_n'; did you mean 'block_n'"):
        b200c.BackwardSchedule(blok_n=64)
    assert b200c.BackwardSchedule(block_n=64).block_n == 64


def test_kvcache_shape_errors_name_the_cache_and_the_layout():
    """A (B, H, S_q, D) q was told 'q has H = 1 heads' and a mismatch named 'tensor k' and the (B, H, S_q, D)
    layout of b200c.attention, not k_cache and flash_attn_with_kvcache's (B, S_q, H, D)."""
    kc = torch.randn(2, 64, 2, 128).to(BF16)
    lens = torch.full((2,), 10, dtype=torch.int32)
    cases = ((torch.randn(2, 8, 1, 128), r"q looks like \(B, H, S_q, D\): pass q.transpose\(1, 2\)"),
             (torch.randn(2, 1, 8, 64), "q has head dim D = 64 but k_cache has 128"),
             (torch.randn(3, 1, 8, 128), "q has batch B = 3 but k_cache has 2 sequences"),
             (torch.randn(2, 1, 7, 128), r"H = 7 heads but k_cache has H_kv = 2; .* \(B, S_q, H, D\)"))
    with fake_driver.install(target="sm90a"):
        for q, match in cases:
            with pytest.raises(LaunchError, match=match):
                b200c.attention_with_kvcache(q.to(BF16), kc, kc, cache_seqlens=10, target="sm90a")
        b200c.attention_with_kvcache(torch.randn(2, 1, 8, 128).to(BF16), kc, kc, cache_seqlens=lens, target="sm90a")


def test_stand_in_driver_target_is_what_auto_picks():
    """fake_driver.install(target="sm90a") stood for an H100, yet b200c.attention(q, k, v) with target="auto"
    took sm100a's schedule and was refused with 'or a schedule for it (..., or schedule=None)', a fix the call
    already had (new-user trial): "auto" now takes the stand-in's native target."""
    q = torch.randn(1, 2, 128, 128).to(BF16)
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention(q, q, q)
        b200c.scaled_dot_product_attention(q, q, q)
        b200c.attention_with_kvcache(q.transpose(1, 2)[:, :1], q.transpose(1, 2), q.transpose(1, 2), cache_seqlens=64)
        assert len(fd.launches) >= 3 and fd.loads == 2
    with fake_driver.install() as fd:  # sm100a, a B200
        b200c.attention(q, q, q)
        assert fd.loads == 1


def test_zero_size_backward_through_autograd_and_the_flash_provider_scale():
    """Review of 4fbc8de: the zero-size early return came after the stride check, and out.sum()'s gradient of an
    empty output has stride 0, so backward() at S_q = 0 still raised; and a negative scale, which the forward
    runs through torch, reached the backward kernels' new scale check through the flash provider."""
    from b200c.runtime import torch_flash

    with fake_driver.install(target="sm90a") as fd:
        for s_q in (0, 64):
            q = torch.randn(1, 2, s_q, 128).to(BF16).requires_grad_()
            k = torch.randn(1, 2, 64, 128).to(BF16).requires_grad_()
            b200c.attention(q, k, k, causal=False).float().sum().backward()
            assert q.grad.shape == q.shape and k.grad.shape == k.shape
            if s_q == 0:
                assert not k.grad.any() and not fd.launches
    q = torch.randn(1, 2, 64, 128).to(BF16)
    assert torch_flash._backward_reason(q, q, 0.0, False, -0.1) == "scale=-0.1"
    assert "scale" not in (torch_flash._backward_reason(q, q, 0.0, False, 0.1) or "")
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match=r"attention_backward: scale=-1.0: the backward takes the scales"):
            b200c.attention_backward(*_bwd_inputs(), scale=-1.0)
        with pytest.raises(LaunchError, match="q must be a 4-D"):
            b200c.attention_backward(None, None, None, None, None, None)
    kc = torch.randn(1, 64, 0, 128).to(BF16)
    with fake_driver.install(target="sm90a"):
        with pytest.raises(LaunchError, match="H_kv = 0"):
            b200c.attention_with_kvcache(torch.randn(1, 1, 8, 128).to(BF16), kc, kc, cache_seqlens=3, target="sm90a")


def test_a_backward_schedule_through_autograd(tmp_path, monkeypatch):
    """A new-user trial: a BackwardSchedule of one's own ran only through attention_backward in a hand-written
    autograd.Function; b200c.attention, attention_varlen and the drop-in take backward_schedule= (an object or a
    file) and their backward() runs it."""
    from b200c.runtime import backward_launch

    built = []
    real = backward_launch._generated
    monkeypatch.setattr(backward_launch, "_generated", lambda js: built.append(js) or real(js))
    mine = b200c.default_backward_schedule(128).replace(name="mine", dq_reduction="deterministic")
    f = tmp_path / "mine_file.py"
    f.write_text("import b200c\nschedule = b200c.default_backward_schedule(128).replace(name='mine_file')\n")
    with fake_driver.install(target="sm90a") as fd:
        for how in (mine, str(f), None):
            q, k, v = (torch.randn(1, 2, 64, 128).to(BF16).requires_grad_() for _ in range(3))
            b200c.attention(q, k, v, backward_schedule=how).float().sum().backward()
            want = "mine" if how is mine else "mine_file" if how is not None else "hopper_backward_d128"
            assert f'"name": "{want}"' in built[-1] and q.grad is not None, (how, built[-1][:80])
        q, k, v = (torch.randn(1, 2, 64, 128).to(BF16).requires_grad_() for _ in range(3))
        b200c.scaled_dot_product_attention(q, k, v, backward_schedule=mine).float().sum().backward()
        assert '"name": "mine"' in built[-1] and '"dq_reduction": "deterministic"' in built[-1]
        qv, kv, vv = (torch.randn(64, 2, 128).to(BF16).requires_grad_() for _ in range(3))
        cu = torch.tensor([0, 64], dtype=torch.int32)
        n = len(built)
        b200c.attention_varlen(qv, kv, vv, cu, cu, 64, 64, backward_schedule=str(f)).float().sum().backward()
        assert len(built) > n and '"name": "mine_file"' in built[-1] and qv.grad is not None
        with pytest.raises(b200c.ScheduleError, match="backward_schedule must be a b200c.BackwardSchedule"):
            b200c.attention(q, k, v, backward_schedule=b200c.default_schedule(128, target="sm90a"))
        g = torch.compile(lambda q, k, v: b200c.attention(q, k, v, backward_schedule=mine), fullgraph=True,
                          backend="aot_eager")
        with pytest.raises(Exception, match="not supported under torch.compile yet"):
            g(q, k, v)
        # the drop-in checks it on every call, as b200c.attention does: without grad, and on a call torch runs
        with torch.no_grad(), pytest.raises(b200c.ScheduleError, match="backward_schedule must be"):
            b200c.scaled_dot_product_attention(q, k, v, backward_schedule=3)
        with pytest.raises(b200c.ScheduleError, match="'not a file.py' does not exist"):
            b200c.scaled_dot_product_attention(q.float(), k.float(), v.float(), backward_schedule="not a file.py")
        assert fd.launches

"""Findings of a new-user trial (2026-12-07, CPU, the stand-in driver): KV-cache inputs the kernel would
read wrongly without an error, a gradient into the returned LSE alone that was dropped, the drop-in's
training step under torch.compile(fullgraph=True), and the append into a paged cache that is one half of
a (num_blocks, 2, page, H_kv, D) K/V tensor."""
from __future__ import annotations

import pytest
import torch

import b200c
from b200c.errors import BackwardNotSupportedError, LaunchError
from b200c.runtime import fake_driver

BF16 = torch.bfloat16


def _q(b=2):
    return torch.randn(b, 1, 32, 128).to(BF16)


def test_kvcache_refuses_tables_and_lengths_the_kernel_would_read_as_contiguous():
    with fake_driver.install(target="sm90a") as fd:
        pk = torch.zeros(40, 64, 8, 128, dtype=BF16)
        table = torch.arange(32, dtype=torch.int32).reshape(2, 16)[:, :8]  # a slice: row stride 16, not 8
        with pytest.raises(LaunchError, match=r"block_table has strides \(16, 1\).*block_table.contiguous\(\)"):
            b200c.attention_with_kvcache(_q(), pk, pk, cache_seqlens=torch.tensor([100, 300], dtype=torch.int32),
                                         block_table=table)
        lens = torch.tensor([[100, 0], [30, 0]], dtype=torch.int32)[:, 0]  # stride 2
        with pytest.raises(LaunchError, match=r"cache_seqlens has stride 2.*cache_seqlens.contiguous\(\)"):
            b200c.attention_with_kvcache(_q(), pk[:2], pk[:2], cache_seqlens=lens)
        assert not fd.launches
        b200c.attention_with_kvcache(_q(), pk, pk, cache_seqlens=lens.contiguous() * 0 + 5,
                                     block_table=table.contiguous())
        assert fd.launches


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_checks_the_caches_own_layout_by_name(paged):
    with fake_driver.install(target="sm90a") as fd:
        if paged:
            cache = torch.zeros(20, 64, 8, 256, dtype=BF16)[..., ::2]  # head dim stride 2
            table = torch.arange(16, dtype=torch.int32).reshape(2, 8)
        else:
            cache, table = torch.zeros(2, 1024, 8, 256, dtype=BF16)[..., ::2], None
        with pytest.raises(LaunchError, match="tensor k_cache has last-dim stride 2"):
            b200c.attention_with_kvcache(_q(), cache, cache, cache_seqlens=10, block_table=table)
        assert not fd.launches


def test_kvcache_appends_into_half_of_a_combined_kv_tensor():
    with fake_driver.install(target="sm90a"):
        kv = torch.zeros(20, 2, 64, 8, 128, dtype=BF16)  # FlashInfer's (num_blocks, 2, page, H_kv, D)
        k_new, v_new = torch.randn(2, 1, 8, 128).to(BF16), torch.randn(2, 1, 8, 128).to(BF16)
        table = torch.arange(16, dtype=torch.int32).reshape(2, 8)
        b200c.attention_with_kvcache(_q(), kv[:, 0], kv[:, 1], k_new, v_new, cache_seqlens=70, block_table=table)
        # token 70 of sequence b: page 1 of its table (block 8 b + 1), row 6
        assert torch.equal(kv[1, 0, 6], k_new[0, 0]) and torch.equal(kv[1, 1, 6], v_new[0, 0])
        assert torch.equal(kv[9, 0, 6], k_new[1, 0]) and torch.equal(kv[9, 1, 6], v_new[1, 0])
        rest = kv.clone()
        rest[[1, 1, 9, 9], [0, 1, 0, 1], 6] = 0
        assert not rest.any()  # nothing else written


def test_a_gradient_into_the_lse_alone_is_refused_not_dropped():
    with fake_driver.install(target="sm90a"):
        q, k, v = (torch.randn(1, 4, 64, 128).to(BF16).requires_grad_() for _ in range(3))
        out, lse = b200c.attention(q, k, v, return_lse=True)
        with pytest.raises(BackwardNotSupportedError, match="detach the LSE"):
            lse.sum().backward()
        out, lse = b200c.attention(q, k, v, return_lse=True)
        with pytest.raises(BackwardNotSupportedError, match="detach the LSE"):
            torch.autograd.grad(lse.sum(), (q, k), allow_unused=True)
        qv, kv, vv = (torch.randn(64, 4, 128).to(BF16).requires_grad_() for _ in range(3))
        cu = torch.tensor([0, 64], dtype=torch.int32)
        out, lse = b200c.attention_varlen(qv, kv, vv, cu, cu, 64, 64, return_lse=True)
        with pytest.raises(BackwardNotSupportedError, match="detach the LSE"):
            lse.sum().backward()
        out, lse = b200c.attention(q, k, v, return_lse=True)
        out.float().sum().backward()  # the output's gradient alone still runs
        assert q.grad is not None


def test_the_drop_in_training_step_compiles_with_fullgraph():
    with fake_driver.install(target="sm90a") as fd:
        q = torch.randn(1, 32, 128, 128).to(BF16).requires_grad_()
        k, v = (torch.randn(1, 8, 128, 128).to(BF16).requires_grad_() for _ in range(2))
        step = torch.compile(lambda q, k, v: b200c.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                                enable_gqa=True),
                             fullgraph=True, backend="aot_eager")
        step(q, k, v).float().sum().backward()
        assert q.grad is not None and k.grad.shape == k.shape
        assert any(launch.kernel.name.startswith("hopper_backward") for launch in fd.launches
                   if hasattr(launch.kernel, "name"))


def test_a_backward_schedule_backward_would_refuse_is_refused_at_the_call():
    """Its refusals came only in backward(), after the forward had run (a new-user trial)."""
    from b200c.errors import ResourceError

    bs = b200c.default_backward_schedule(128)
    with fake_driver.install(target="sm90a") as fd:
        q, k, v = (torch.randn(1, 4, 64, 128).to(BF16).requires_grad_() for _ in range(3))
        for change, error in ((dict(persistent=True), BackwardNotSupportedError),
                              (dict(block_n=96), BackwardNotSupportedError), (dict(block_m=128), ResourceError)):
            with pytest.raises(error):
                b200c.attention(q, k, v, causal=True, backward_schedule=bs.replace(**change))
            with pytest.raises(error):
                b200c.scaled_dot_product_attention(q, k, v, backward_schedule=bs.replace(**change))
        assert not fd.launches  # refused before the forward
        qv, kv, vv = (torch.randn(64, 4, 128).to(BF16).requires_grad_() for _ in range(3))
        cu = torch.tensor([0, 64], dtype=torch.int32)
        with pytest.raises(BackwardNotSupportedError):
            b200c.attention_varlen(qv, kv, vv, cu, cu, 64, 64, backward_schedule=bs.replace(persistent=True))
        b200c.attention(q, k, v, backward_schedule=bs.replace(name="fine")).float().sum().backward()
        assert q.grad is not None


def test_a_bhsd_cache_is_told_to_transpose():
    with fake_driver.install(target="sm90a"):
        cache = torch.zeros(2, 8, 1024, 128, dtype=BF16)  # (B, H_kv, S_max, D)
        with pytest.raises(LaunchError, match=r"k_cache looks like \(B, H_kv, S_max, D\): pass k_cache.transpose"):
            b200c.attention_with_kvcache(_q(), cache, cache, cache_seqlens=5)


def test_the_drop_in_names_the_forward_head_dim_rule_first_with_grad():
    """At head dim 96 with grad the fallback said the backward kernels cover 64, 128 and 256, as if the
    forward ran there; it does not either."""
    import warnings

    with fake_driver.install(target="sm90a"):
        q, k, v = (torch.randn(1, 4, 64, 96).to(BF16).requires_grad_() for _ in range(3))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            b200c.scaled_dot_product_attention(q, k, v)
        text = " ".join(str(w.message) for w in seen)
        assert "head dim 96 (b200c kernels support 64, 128 and 256)" in text and "require grad" not in text


def test_the_backward_module_is_generated_once_per_schedule(monkeypatch):
    """15cf337 put check_call_schedule between _generated and its lru_cache: every backward call generated
    and verified its kernel source again (a review found it)."""
    from b200c.codegen.sm90 import backward as gen_mod

    calls = []
    real = gen_mod.generate_backward
    monkeypatch.setattr(gen_mod, "generate_backward", lambda s: calls.append(s.name) or real(s))
    with fake_driver.install(target="sm90a"):
        mine = b200c.default_backward_schedule(128).replace(name="generated_once")
        for _ in range(3):
            q, k, v = (torch.randn(1, 2, 64, 128).to(BF16).requires_grad_() for _ in range(3))
            b200c.attention(q, k, v, backward_schedule=mine).float().sum().backward()
    assert calls.count("generated_once") == 1


def test_the_paged_check_reads_the_device_once():
    """The first bad entry's value was read by indexing with a tensor (a host read of the index: a second
    synchronization on a GPU); torch.take keeps it on the device."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from b200c.runtime.kvcache import check_values

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    q, kc = torch.zeros(3, 1, 4, 64), torch.zeros(10, 16, 2, 64)
    lens, table = torch.tensor([5, 20, 0], dtype=torch.int32), torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=torch.int32)
    with Ops() as ops:
        check_values(q, lens, 1, kc, table)
    assert "_local_scalar_dense" not in ops.names and ops.names[-1] == "stack"
    contiguous = torch.zeros(3, 64, 2, 64)
    with Ops() as ops:
        check_values(q, lens, 1, contiguous, None)
    assert ops.names == ["aminmax", "stack"]
    check_values(q, torch.zeros(3, dtype=torch.int32), 0, kc, torch.zeros(3, 0, dtype=torch.int32))  # no pages

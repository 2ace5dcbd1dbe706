"""Calls with mods on the host path, the CUDA driver stubbed (b200c.runtime.fake_driver): what each
launch receives (captured tensors, sinks, the block mask), what compiles a new kernel and what does
not, the SDPA drop-in's attn_mask, window_size, varlen, and the errors. Plus the generated kernels'
text for mods (named device functions, the traced expression, the block mask's visit order) and,
with nvcc, the Hopper mod presets compiled spill-free."""
from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

import b200c
import b200c.mods as mods
from b200c.codegen.work import WorkDecomposition
from b200c.errors import BackwardNotSupportedError, LaunchError, ScheduleError
from b200c.runtime import block_mask, fake_driver, sdpa

SCHED = b200c.Schedule(name="mods_runtime_test")
HOPPER = b200c.default_schedule(128, target="sm90a")


def _tested_nvcc() -> bool:
    """Whether the nvcc b200c compiles with is the release the SASS counts below are pinned for."""
    from b200c.toolchain import find_nvcc, nvcc_release, tested

    return tested(nvcc_release(find_nvcc()))


def t(b=2, h=4, s=300, d=128):
    return torch.randn(b, h, s, d).to(torch.bfloat16)


@pytest.fixture
def fd():
    with fake_driver.install(target="sm90a") as f:
        yield f


def _ranges_at(ptr: int, n: int) -> torch.Tensor:
    """The (n, 4) int32 block mask a launch points at (CPU memory under the stand-in driver)."""
    buf = (ctypes.c_int32 * (4 * n)).from_address(ptr)
    return torch.tensor(list(buf), dtype=torch.int32).reshape(n, 4)


def test_launch_receives_captured_tensors_and_the_block_mask(fd):
    q, k = t(), t(h=2)
    docs = (torch.arange(300) // 100).int()
    b200c.attention(q, k, k, schedule=HOPPER, score_mod=mods.softcap(30.0), mask_mod=mods.document(docs))
    (L,) = fd.launches
    assert L.params["cap0"] == docs.data_ptr() and L.params["cap0_stride0"] == 1
    info = L.kernel
    work = WorkDecomposition(info.block_m, info.block_n, info.q_stages)
    pack = bool(L.params["pack_heads"])
    n = work.num_work(2, 4, 300, pack)
    got = _ranges_at(L.params["kv_ranges"], n)
    want = block_mask.kv_ranges(mods.document(docs), work, batch=2, heads=4, heads_kv=2, seq_q=300, seq_kv=300,
                                pack_heads=pack)
    assert torch.equal(got, want)
    # document d's rows see keys [100 d, 100 d + 100) only: a Q tile of 64 rows visits at most 2 K/V tiles of 128
    assert int((got[:, 3] - got[:, 0]).max()) <= 2


def test_new_values_reuse_the_kernel_and_equal_functions_share_it(fd):
    q = t()
    for lengths in ([300, 10], [5, 299]):
        b200c.attention(q, q, q, schedule=HOPPER, mask_mod=mods.key_padding(torch.tensor(lengths).int()))
    assert fd.loads == 1 and len(fd.launches) == 2
    assert fd.launches[0].params["cap0"] != fd.launches[1].params["cap0"]
    r0 = _ranges_at(fd.launches[0].params["kv_ranges"], 4)
    r1 = _ranges_at(fd.launches[1].params["kv_ranges"], 4)
    assert not torch.equal(r0, r1)  # the block mask follows the new lengths

    def cap_a(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / 25.0) * 25.0

    def cap_b(s, bb, hh, qq, kk):
        return torch.tanh(s / 25.0) * 25.0

    b200c.attention(q, q, q, schedule=HOPPER, score_mod=cap_a)
    b200c.attention(q, q, q, schedule=HOPPER, score_mod=cap_b)
    assert fd.loads == 2
    b200c.attention(q, q, q, schedule=HOPPER, score_mod=mods.softcap(24.0))  # another constant: another kernel
    assert fd.loads == 3


def test_sinks_window_and_varlen(fd):
    q = t()
    sinks = torch.tensor([0.0, 1.0, 2.0, 3.0])
    b200c.attention(q, q, q, schedule=HOPPER, sinks=sinks)
    assert fd.launches[-1].params["sinks"] != 0 and "kv_ranges" not in fd.launches[-1].params
    b200c.attention(q, q, q, schedule=HOPPER, window_size=(64, 0))
    L = fd.launches[-1]
    bounds = (ctypes.c_int32 * 4).from_address(L.params["cap0"])
    assert list(bounds) == [-64, 0, -64, 0]  # per sequence: S_kv - S_q - left, S_kv - S_q + right
    b200c.attention(q, t(s=310), t(s=310), schedule=HOPPER, window_size=(64, 0))
    assert fd.loads == 2  # the sinks kernel, then one window kernel for both (S_q, S_kv)
    bounds = (ctypes.c_int32 * 4).from_address(fd.launches[-1].params["cap0"])
    assert list(bounds) == [-54, 10, -54, 10]
    with pytest.raises(LaunchError, match="window_size left"):
        b200c.attention(q, q, q, schedule=HOPPER, window_size=(-2, 0))
    with pytest.raises(LaunchError, match="sinks has shape"):
        b200c.attention(q, q, q, schedule=HOPPER, sinks=torch.zeros(3))
    # varlen: q_idx / kv_idx within each sequence
    x = torch.randn(350, 4, 128).bfloat16()
    cu = torch.tensor([0, 50, 50, 350]).int()
    b200c.attention_varlen(x, x, x, cu, cu, 300, 300, schedule=HOPPER, mask_mod=mods.sliding_window(32))
    L = fd.launches[-1]
    assert L.params["cu_seqlens_q"] == cu.data_ptr() and L.params["kv_ranges"] != 0


def test_sdpa_attn_mask_runs_on_b200c(fd):
    q = t(s=256)
    pad = torch.arange(256)[None, :] < torch.tensor([256, 100])[:, None]
    sdpa.calls.clear()
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=pad[:, None, None, :], schedule=HOPPER)
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=torch.randn(2, 4, 1, 256).bfloat16(), schedule=HOPPER)
    assert sdpa.calls["b200c"] == 2 and len(fd.launches) == 2
    bool_launch, bias_launch = fd.launches
    assert "kv_ranges" in bool_launch.params and bool_launch.params["cap0_stride3"] == 1
    # an additive mask is a bias on every score (a score_mod only, as torch adds it): no block mask to compute
    assert "kv_ranges" not in bias_launch.params and bias_launch.params["cap0_stride3"] == 1


def test_key_stride_of_one_is_its_own_kernel(fd):
    """A captured tensor read by key with a key stride of 1 compiles the unit-stride loads (one kernel per
    stride pattern, reused by every tensor with it), another stride the general ones: the results differ
    only in speed, so both run and new tensors never recompile."""
    q = t(s=256)
    contiguous = [torch.randn(2, 4, 1, 256).bfloat16() for _ in range(2)]
    strided = [torch.randn(2, 256, 4, 1).bfloat16().permute(0, 2, 3, 1) for _ in range(2)]
    for m in contiguous + strided:
        b200c.scaled_dot_product_attention(q, q, q, attn_mask=m, schedule=HOPPER)
    assert fd.loads == 2 and len(fd.launches) == 4
    assert [L.params["cap0_stride3"] for L in fd.launches] == [1, 1, 4, 4]


def test_block_mask_cache_does_not_keep_masks_alive(fd, monkeypatch):
    """The block-mask cache keeps weak references to the tensors a block mask was computed from: a model's
    mask is freed when the model drops it (strong references kept the last 64 masks alive: 2.1 GB for a
    (2, 1, 4096, 4096) decoder mask). The same tensor still hits; a new tensor at the freed address, with
    the same version, is computed afresh."""
    import gc
    import weakref

    from b200c.runtime import block_mask

    block_mask._CACHE.clear()
    computed = []  # block masks computed (a cache hit computes none; the cache's own count also counts a
    real = block_mask.tensor_ranges  # key hit whose tensors turned out to be others)
    monkeypatch.setattr(block_mask, "tensor_ranges", lambda *a, **kw: computed.append(1) or real(*a, **kw))
    q = t(s=256)
    m = torch.ones(2, 1, 256, 256, dtype=torch.bool).tril()
    alive = weakref.ref(m)
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=m, schedule=HOPPER)
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=m, schedule=HOPPER)
    assert len(computed) == 1
    flat = m[0, 0].clone()  # a 2-D mask (S_q, S_kv): reshaped to 4-D per call, the view's base is the mask
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=flat, schedule=HOPPER)
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=flat, schedule=HOPPER)
    assert len(computed) == 2
    del m
    gc.collect()
    assert alive() is None
    # a new tensor on the same memory with the same version (a freed block the allocator hands out again)
    buf = torch.ones(2 * 256 * 256, dtype=torch.bool)

    def on_buf():
        return torch.empty(0, dtype=torch.bool).set_(buf.untyped_storage(), 0, (2, 1, 256, 256))

    buf.view(2, 1, 256, 256).copy_(torch.ones(256, 256, dtype=torch.bool).tril())
    first = on_buf()
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=first, schedule=HOPPER)
    ranges_first = fd.launches[-1].params["kv_ranges"]
    version = first._version
    del first
    gc.collect()
    buf.fill_(True)  # new values: every key visible (the buffer's own version counter, not the views')
    second = on_buf()
    assert second._version == version
    n = len(computed)
    b200c.scaled_dot_product_attention(q, q, q, attn_mask=second, schedule=HOPPER)
    assert len(computed) == n + 1  # computed afresh, not the stale entry
    assert fd.launches[-1].params["kv_ranges"] != ranges_first


def test_for_sizes_specialises_once_per_pattern():
    """ModCall.for_sizes makes its ModSet and JSON once per (ModSet, small_indices, unit_dims), not per
    call; the cached JSON is the ModSet's own, and a larger size or another stride is another entry."""
    from b200c.runtime.sdpa_mask import mod_call_of_mask

    m = torch.zeros(1, 4, 1, 256).bfloat16()
    a, b = (mod_call_of_mask(m.clone()).for_sizes(1, 4, 300, 256) for _ in range(2))
    assert a.mods is b.mods and a.mods_json == a.mods.to_json()
    assert a.mods.small_indices and a.mods.captured[0].unit_dims == (3,)
    big = mod_call_of_mask(m).for_sizes(1, 4, 1 << 22, 256)
    assert not big.mods.small_indices and big.mods.captured[0].unit_dims == (3,) and big.mods_json == big.mods.to_json()
    strided = mod_call_of_mask(torch.zeros(1, 256, 4, 1).bfloat16().permute(0, 2, 3, 1)).for_sizes(1, 4, 300, 256)
    assert strided.mods.captured[0].unit_dims == () and strided.mods_json == strided.mods.to_json()
    assert len({a.mods_json, big.mods_json, strided.mods_json}) == 3


def test_sdpa_masks_trace_once_per_pattern(fd, monkeypatch):
    """A model makes a new mask tensor per forward: its functions are traced once per mask pattern, not per
    tensor (tracing per call made LTX-2's forward 2.4x slower on the H200)."""
    import b200c.dsl.mods as dsl_mods
    from b200c.runtime import sdpa_mask

    traced = []
    real = dsl_mods.trace_mods
    monkeypatch.setattr(dsl_mods, "trace_mods", lambda **kw: traced.append(1) or real(**kw))
    monkeypatch.setattr(sdpa_mask, "_patterns", {})
    q = t(s=256)
    for n in (256, 100, 7):
        m = torch.zeros(2, 1, 1, 256).bfloat16()
        m[1, ..., n:] = float("-inf")
        b200c.scaled_dot_product_attention(q, q, q, attn_mask=m, schedule=HOPPER)
        assert fd.launches[-1].params["cap0"] == m.data_ptr()
    assert len(traced) == 1 and fd.loads == 1 and len(fd.launches) == 3


def test_sdpa_masks_of_one_element_stay_kernel_inputs(fd):
    """A mask of one element ((1, 1, 1, 1), (1,)) is read by the kernel, not compiled into it: two values,
    one kernel, each call's own pointer (the H200-less trial found it traced as a constant: every such call
    fell back with 'the kernel has no parameter cap0', and a second value would have reused the first)."""
    from b200c.runtime import block_mask

    q = t(s=256)
    sdpa.calls.clear()
    for m in (torch.ones(1, 1, 1, 1, dtype=torch.bool), torch.zeros(1, dtype=torch.bool),
              torch.full((1, 1, 1, 1), 3.0).bfloat16(), torch.full((1,), float("-inf"))):
        b200c.scaled_dot_product_attention(q, q, q, attn_mask=m, schedule=HOPPER)
        L = fd.launches[-1]
        assert L.params["cap0"] == m.data_ptr()
        if m.dtype != torch.bool:  # an additive mask: a score_mod, no block mask
            assert "kv_ranges" not in L.params
            continue
        visible = bool(m.item())
        info = L.kernel
        n = WorkDecomposition(info.block_m, info.block_n, info.q_stages).num_work(2, 4, 256, False)
        got = _ranges_at(L.params["kv_ranges"], n)
        n_kv, n_full = -(-256 // info.block_n), 256 // info.block_n  # every key of every row, or none
        want = (0, 0, n_full, n_kv) if visible else block_mask.EMPTY_RANGE
        assert all(tuple(int(x) for x in row) == want for row in got), (m, got)
    # one kernel per mask pattern (bool, additive bf16, additive fp32): the two bool masks share one
    assert sdpa.calls["b200c"] == 4 and fd.loads == 3


def test_captured_tensors_indexed_with_constants_are_refused():
    """``t[0]`` on a captured tensor would be read once while tracing and compiled into the kernel, and
    ``t.float()[h]`` would pass the kernel a trace-time copy (a later value written in place would not be
    seen: a silent wrong answer); the tracer refuses both and says how to keep the tensor a kernel input
    (``t[b * 0]``, converting outside the function), which works."""
    lim = torch.tensor([100])
    with pytest.raises(ScheduleError, match=r"indexed with constants only.*t\[b \* 0\]"):
        b200c.attention(t(), t(), t(), schedule=HOPPER, mask_mod=lambda b, h, q, k: k < lim[0])
    from b200c.dsl.mods import trace_mods

    ms, caps = trace_mods(mask_mod=lambda b, h, q, k: k < lim[b * 0])
    assert ms.mask_mod.expression == "kv_idx < cap0[b * 0]" and caps[0] is lim
    # the same for any op on a captured tensor alone: the kernel would read a trace-time copy
    table = torch.randn(4).bfloat16()
    with pytest.raises(ScheduleError, match=r"used in float with no argument of the mod.*t = t.float\(\)"):
        trace_mods(score_mod=lambda s, b, h, q, k: s + table.float()[h])
    ms, caps = trace_mods(score_mod=lambda s, b, h, q, k: s + table[h].float())  # a load, then the cast
    assert ms.score_mod.expression == "score + cap0[h]" and caps[0] is table


def test_tensors_the_mods_read_that_require_grad(fd):
    """Calls with mods are forward-only: a learned table (an nn.Parameter, a tensor requiring grad) or
    sinks requiring grad, with grad mode on, raise BackwardNotSupportedError (the result carried no
    gradient for them, silently); under torch.no_grad the same calls run. An SDPA attn_mask requiring
    grad goes to torch's SDPA, which computes its gradient."""
    q = t(s=64)
    emb = torch.nn.Embedding(64, 4)

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + emb.weight[torch.clamp(q_idx - kv_idx, 0, 63), h]

    table = torch.randn(4, requires_grad=True)
    sinks = torch.zeros(4, requires_grad=True)
    calls = (dict(score_mod=rel_bias), dict(score_mod=lambda s, b, h, i, j: s + table[h]),
             dict(mask_mod=lambda b, h, i, j: table[h] > 0), dict(sinks=sinks))
    for kw in calls:
        with pytest.raises(BackwardNotSupportedError, match="no gradient"):
            b200c.attention(q, q, q, schedule=HOPPER, **kw)
        with torch.no_grad():
            b200c.attention(q, q, q, schedule=HOPPER, **kw)
    assert len(fd.launches) == len(calls)
    m = torch.zeros(1, 1, 1, 64, requires_grad=True)
    sdpa.calls.clear()
    with pytest.warns(b200c.FallbackWarning):
        out = b200c.scaled_dot_product_attention(q, q, q, attn_mask=m, schedule=HOPPER)
    assert sdpa.calls["grad:attn_mask"] == 1 and out.requires_grad


def test_masked_calls_under_inference_mode(fd):
    """Masks, windows and cu_seqlens made under torch.inference_mode (as in a model's forward) have no
    version counter: the calls run (twice, and once more outside the mode) instead of raising."""
    from b200c.runtime import mod_call

    q = t(s=256)
    x = torch.randn(300, 4, 128).bfloat16()
    kept = len(mod_call._uncached)
    with torch.inference_mode():
        m = torch.arange(256)[None, None, None, :] < 200
        cu = torch.tensor([0, 100, 300], dtype=torch.int32)
        for _ in range(2):
            b200c.scaled_dot_product_attention(q, q, q, attn_mask=m, schedule=HOPPER)
            b200c.attention(q, q, q, window_size=(16, 0), schedule=HOPPER)
            b200c.attention_varlen(x, x, x, cu, cu, 200, 200, window_size=(16, 0), schedule=HOPPER)
    b200c.attention(q, q, q, window_size=(16, 0), schedule=HOPPER)
    assert len(fd.launches) == 7
    from b200c.runtime import mod_window

    assert not any(t.is_inference() for _, t in mod_window._bounds.values())  # cached bounds serve any mode
    assert len(mod_call._uncached) == min(64, kept + 4)  # the 4 uncached block masks, alive past their launch


def test_errors():
    q = t()
    with pytest.raises(ScheduleError, match="torch.erf"):
        b200c.attention(q, q, q, schedule=HOPPER, score_mod=lambda s, b, h, i, j: torch.erf(s))
    with pytest.raises(LaunchError, match="with a score_mod"):
        b200c.attention(q, q, q, schedule=HOPPER, score_mod=mods.softcap(30.0), softmax_scale=0.0)
    g = q.clone().requires_grad_()
    with pytest.raises(BackwardNotSupportedError, match="forward-only"):
        b200c.attention(g, q, q, schedule=HOPPER, mask_mod=mods.causal())


def test_generated_kernel_shows_the_mods():
    docs = torch.zeros(10, dtype=torch.int32)
    from b200c.dsl.mods import trace_mods

    ms, _ = trace_mods(score_mod=mods.softcap(30.0), mask_mod=mods.document(docs))
    for target in ("sm90a", "sm100a"):
        s = b200c.default_schedule(128, target=target)
        src = b200c.codegen.generate(s, target, mods=ms).source
        assert "// score_mod, traced with torch.fx: 30.0 * tanh(score / 30.0)" in src
        assert "// mask_mod, traced with torch.fx: cap0[q_idx] == cap0[kv_idx]" in src
        assert "__device__ __forceinline__ float score_mod(const Ctx& c" in src
        assert "const int4 r = c.kv_ranges[rest * c.q_groups() + group];" in src
        assert "kv_tile(w, " in src and "mod_entry(" in src
        assert "const void* __restrict__ cap0" in src
        plain = b200c.codegen.generate(s, target).source
        assert "kv_tile" not in plain and "mod_entry" not in plain


def test_block_sparse_visit_order_is_a_bijection():
    from hypothesis import given, strategies as st

    @given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20), st.integers(0, 20))
    def check(lo, a, b, c):
        kv_lo, full_lo, full_hi, kv_hi = lo, lo + a, lo + a + b, lo + a + b + c
        n_full, n = full_hi - full_lo, kv_hi - kv_lo
        tiles = [WorkDecomposition.kv_tile(kv_lo, full_lo, n_full, v) for v in range(n)]
        assert sorted(tiles) == list(range(kv_lo, kv_hi))
        assert tiles[:n_full] == list(range(full_lo, full_hi))  # the full run first

    check()


@pytest.mark.nvcc
@pytest.mark.parametrize("d", [64, 128, 256])
def test_hopper_mod_presets_compile_without_spills(d, tmp_path):
    """Issue 33 item 7: 0 spill bytes (stores and loads) for the mods presets with a score_mod, a mask_mod
    (block-sparse visit order) and both. At head dim 256 softcap + document spilled 36 B until the visit
    order's kv_tile used one live value less (the load warp's 24 registers: 16 B) and the consumers re-read
    their index for the turn barriers (20 B); see b200c/codegen/sm90/roles/consumer.py."""
    from b200c.dsl.mods import trace_mods
    from b200c.dsl.presets import default_schedule
    from b200c.dsl.split_build import split_build
    from b200c.nvcc import compile_cuda

    docs = torch.zeros(10, dtype=torch.int32)
    s = default_schedule(d, "hopper", mods=True)
    for name, kw in (("softcap + document", dict(score_mod=mods.softcap(30.0), mask_mod=mods.document(docs))),
                     ("document", dict(mask_mod=mods.document(docs))),
                     ("sliding window", dict(mask_mod=mods.sliding_window(256))),
                     ("softcap", dict(score_mod=mods.softcap(30.0)))):
        ms, _ = trace_mods(**kw)
        src = b200c.codegen.generate(s, "sm90a", mods=ms).source
        res = compile_cuda(src, tmp_path / "k.cubin", "cubin", "sm_90a")
        assert res.resources()["spill_bytes"] == 0, (name, res.log)
        assert ("consumer_index()" in src) == (d == 256 and "mask_mod" in kw), name  # the re-read only there
        # issue 47 item 3: the split-KV build the runtime runs for it (masked decoding) too; the preset with
        # kv_splits=0 spilled 20 B at head dim 64 and 48 B at 256 with a mask
        split = b200c.codegen.generate(split_build(s), "sm90a", mods=ms)
        assert split.launch.split_kv
        res = compile_cuda(split.source, tmp_path / "k.cubin", "cubin", "sm_90a")
        assert res.resources()["spill_bytes"] == 0, (name, "split build", res.log)
        assert res.resources("b200c_attention_combine")["spill_bytes"] == 0, (name, "combine", res.log)


def test_tracing_after_the_one_line_swap_with_a_partial(monkeypatch):
    """The capstone swaps F.scaled_dot_product_attention for a functools.partial: torch.overrides' table
    (built on first use by torch.fx, from every function's __name__) must still build (measured on the H200:
    AttributeError 'functools.partial' object has no attribute '__name__' on LTX-2's masked calls)."""
    import functools

    import torch.nn.functional as F

    from b200c.dsl.mods import trace_mods
    from b200c.runtime.sdpa_mask import _functions

    monkeypatch.setattr(F, "scaled_dot_product_attention", functools.partial(b200c.scaled_dot_product_attention))
    torch.overrides._get_overridable_functions.cache_clear()
    try:
        score_mod, mask_mod = _functions(torch.zeros(2, 1, 1, 10).bfloat16(), (2, 1, 1, 10))
        ms, tensors = trace_mods(score_mod=score_mod, mask_mod=mask_mod)
        assert ms.score_mod.expression == "score + cap0[b, 0, 0, kv_idx]" and len(tensors) == 1
    finally:
        torch.overrides._get_overridable_functions.cache_clear()


def test_block_mask_cache_is_not_fooled_by_a_reused_address(fd):
    """Two cu_seqlens tensors at one address with the same version (a freed block reused by the allocator)
    get their own block masks (found by review: the cache keyed by pointer and version alone returned the
    first batch's tiles)."""
    import numpy as np

    x = torch.randn(1280, 4, 128).bfloat16()
    buf = np.array([0, 1024, 1280], dtype=np.int32)
    window = mods.sliding_window(100)
    ranges = []
    for values in ([0, 1024, 1280], [0, 256, 1280]):
        buf[:] = values
        cu = torch.from_numpy(buf)  # a new tensor over the same memory, version 0
        b200c.attention_varlen(x, x, x, cu, cu, 1024, 1024, schedule=HOPPER, mask_mod=window)
        L = fd.launches[-1]
        info = L.kernel
        work = WorkDecomposition(info.block_m, info.block_n, info.q_stages)
        n = work.num_work(2, 4, 1024, bool(L.params["pack_heads"]))
        got = _ranges_at(L.params["kv_ranges"], n)
        want = block_mask.kv_ranges(window, work, batch=2, heads=4, heads_kv=4, seq_q=1024, seq_kv=1024,
                                    pack_heads=bool(L.params["pack_heads"]), cu_seqlens_q=cu, cu_seqlens_k=cu)
        assert torch.equal(got, want), values
        ranges.append(got)
    assert not torch.equal(ranges[0], ranges[1])


CAP = 30.0


def test_trace_cache_sees_rebound_globals_and_attributes(fd):
    global CAP
    q = t()

    def capped(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / CAP) * CAP

    class Scaled:
        def __init__(self):
            self.alpha = 1.0

        def mod(self, score, b, h, q_idx, kv_idx):
            return score * self.alpha

    s = Scaled()
    try:
        b200c.attention(q, q, q, schedule=HOPPER, score_mod=capped)
        CAP = 20.0
        b200c.attention(q, q, q, schedule=HOPPER, score_mod=capped)
        assert fd.loads == 2  # the new constant traced again: another kernel
        b200c.attention(q, q, q, schedule=HOPPER, score_mod=s.mod)
        b200c.attention(q, q, q, schedule=HOPPER, score_mod=s.mod)  # a new bound-method object, same state
        assert fd.loads == 3
        s.alpha = 5.0
        b200c.attention(q, q, q, schedule=HOPPER, score_mod=s.mod)
        assert fd.loads == 4
    finally:
        CAP = 30.0


def test_fresh_user_frictions():
    """Found by a fresh-user trial: a learned table (nn.Parameter) in a mod, recipes given numpy scalars,
    a recipe factory passed uncalled to and_masks, float64 slopes, an FP32-overflowing cap, and the
    facade's generate / default_schedule for mods."""
    import numpy as np

    from b200c.dsl.mods import trace_mods

    emb = torch.nn.Embedding(64, 4)

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + emb.weight[torch.clamp(q_idx - kv_idx, 0, 63), h]

    ms, tensors = trace_mods(score_mod=rel_bias)
    assert ms.score_mod.expression == "score + cap0[clamp(q_idx - kv_idx, 0, 63), h]"
    assert tensors[0].data_ptr() == emb.weight.data_ptr() and not tensors[0].requires_grad
    assert float(mods.softcap(np.float32(30.0))(torch.tensor(3.0), 0, 0, 0, 0)) == pytest.approx(30 * np.tanh(0.1))
    assert mods.alibi_slopes(np.int64(4)).shape == (4,)
    with pytest.raises(ScheduleError, match=r"causal\(\), called"):
        mods.and_masks(mods.causal)
    with pytest.raises(ScheduleError, match="float32 tensor"):
        mods.alibi(torch.ones(4, dtype=torch.float64))
    with pytest.raises(ScheduleError, match="<= 1e30"):
        mods.softcap(1e39)
    s = b200c.default_schedule(128, target="sm90a", mods=True)
    assert s.name == "hopper_mods_d128" and s.block_n == 128
    assert "// score_mod, traced with torch.fx" in b200c.generate(s, "sm90a", mods=ms).source


def test_light_mods_keep_the_dense_tiles():
    """ALiBi and a per-head or per-row bias add at most one FMA per score on Hopper (their bias splits
    per row and per key): the Hopper presets keep the dense K/V tiles for them. Softcap (a tanh per
    score), an additive bias read per key, index arithmetic that is not split (ALiBi without
    small_indices, a product of indices), other arithmetic on the score, and every mask_mod take the
    mods' smaller tiles (b200c.codegen.mods.light, Target.default_schedule)."""
    import msgspec

    from b200c.codegen.mods import light
    from b200c.dsl.mods import trace_mods
    from b200c.dsl.presets import HOPPER_MOD_PRESETS, HOPPER_PRESETS, PRESETS

    slopes, bias, rows = mods.alibi_slopes(4), torch.zeros(4, 64), torch.zeros(64)
    light_ones = [dict(score_mod=mods.alibi(slopes)), dict(score_mod=lambda s, b, h, q, kv: s + slopes[h]),
                  dict(score_mod=lambda s, b, h, q, kv: rows[q] + s - slopes[h]),
                  dict(score_mod=lambda s, b, h, q, kv: s + (kv - q)), {}]
    heavy = [dict(score_mod=mods.softcap(30.0)), dict(score_mod=lambda s, b, h, q, kv: s + bias[h, kv]),
             dict(score_mod=lambda s, b, h, q, kv: s / (kv + 1)), dict(mask_mod=mods.causal()),
             dict(score_mod=lambda s, b, h, q, kv: s * 2 - (q - kv) * 0.5),
             dict(score_mod=lambda s, b, h, q, kv: s + (kv * q) * 1e-6),
             dict(score_mod=mods.alibi(slopes), mask_mod=mods.causal())]
    for kw in light_ones + heavy:
        ms = msgspec.structs.replace(trace_mods(**kw)[0], small_indices=True)
        assert light(ms) == (kw in light_ones), kw
        for d in (64, 128, 256):
            want = (HOPPER_PRESETS if kw in light_ones else HOPPER_MOD_PRESETS)[d]
            assert b200c.default_schedule(d, target="sm90a", mods=ms) == want
            assert b200c.default_schedule(d, target="sm100a", mods=ms) == PRESETS[d]  # one B200 preset per head dim
    alibi, _ = trace_mods(**light_ones[0])
    assert not light(alibi)  # without small_indices the index arithmetic is not split
    for flag in (None, 0, False):
        assert b200c.default_schedule(128, target="sm90a", mods=flag) == HOPPER_PRESETS[128]
    assert b200c.default_schedule(128, target="sm90a", mods=True) == HOPPER_MOD_PRESETS[128]


def test_alibi_call_takes_the_dense_preset(fd):
    """A call with ALiBi and no schedule runs the dense preset's kernel (with the mods compiled in)."""
    q = torch.randn(1, 2, 64, 128).bfloat16()
    b200c.attention(q, q, q, score_mod=mods.alibi(mods.alibi_slopes(2)), target="sm90a")
    info = fd.launches[-1].kernel
    assert (info.name, info.block_n) == ("hopper_default_d128", 176)
    b200c.attention(q, q, q, score_mod=mods.softcap(30.0), target="sm90a")
    info = fd.launches[-1].kernel
    assert (info.name, info.block_n) == ("hopper_mods_d128", 128)


@pytest.mark.nvcc
@pytest.mark.parametrize("d", [64, 128, 256])
def test_alibi_on_the_dense_tiles_compiles_without_spills(d, tmp_path):
    """ALiBi at the dense presets' K/V tiles (224 / 176 / 80 rows): no spills, and its steady K/V loop is
    the dense one plus one FFMA per score (slope * k, k the key's column in the thread's fragment; the
    bias at the fragment's first column is a per-row offset of the softmax: softmax_tile_biased) and a
    fixed few per tile: the two rows' offsets (an FFMA each from the tile's distance to the work item's
    reference key: row_bias_item, evaluated before the loop), the top P's exponent. Head dim 64's 224
    columns evaluate the bias per tile (the slope's load and the index arithmetic in the loop: held
    across it, ptxas spilled 84 B). Exact counts, nvcc 13.0 (evaluated per tile, 128 / 256 had 25 / 12
    instructions more)."""
    import msgspec

    from b200c.dsl.mods import trace_mods
    from b200c.dsl.presets import HOPPER_PRESETS
    from b200c.nvcc import compile_cuda
    from b200c.sass.disasm import disassemble
    from b200c.sass.hopper import hot_loop

    ms, _ = trace_mods(score_mod=mods.alibi(mods.alibi_slopes(4)))
    ms = msgspec.structs.replace(ms, small_indices=True)  # as the runtime compiles calls below 2^21 per index
    s = HOPPER_PRESETS[d]
    loops = {}
    for name, m in (("dense", None), ("alibi", ms)):
        res = compile_cuda(b200c.codegen.generate(s, "sm90a", mods=m).source, tmp_path / f"{name}.cubin", "cubin",
                           "sm_90a")
        # the strided mask's per-key addresses spilled 16 B at head dim 128 outside the steady loop (nvcc 13.0)
        # until P's exponent took a per-row scale (softmax_rules.huge_lines), which changed the allocation: 0 now
        assert res.resources()["spill_bytes"] == 0, res.log
        loops[name] = hot_loop(disassemble(tmp_path / f"{name}.cubin"))
        assert not [x for x in loops[name]["body"] if "LDL" in x or "STL" in x]
    s_regs = s.block_n // 2  # S registers per thread: 64 rows x block_n over 128 threads
    # + per row: the tile's offset and the top P's exponent
    assert loops["alibi"]["ffma"] - loops["dense"]["ffma"] == s_regs + 4
    assert loops["alibi"]["mufu_ex2"] == loops["dense"]["mufu_ex2"]
    # the slope is read once per work item, except on head dim 64's 224-column tiles (evaluated per tile there)
    assert bool([x for x in loops["alibi"]["body"] if "LDG" in x]) == (d == 64)
    if _tested_nvcc():  # exact counts for the tested release only (nvcc 13.5.37 allocates differently)
        assert loops["alibi"]["instructions"] - loops["dense"]["instructions"] == s_regs + {64: 41, 128: 21, 256: 18}[d]


@pytest.mark.nvcc
def test_alibi_compiles_on_the_one_warpgroup_schedule(tmp_path):
    """The non-warp-specialized sm90a role (examples/hopper/h01_baseline.py: one warpgroup issues TMA, wgmma
    and the softmax) declares the work item's row bias as the consumers do: a split bias compiles there
    (it did not: ``rbias`` undeclared) without spills."""
    import msgspec

    from b200c.dsl.loader import load_schedule_file
    from b200c.dsl.mods import trace_mods
    from b200c.nvcc import compile_cuda

    s = load_schedule_file(Path(__file__).parents[1] / "examples" / "hopper" / "h01_baseline.py")
    assert not s.warp_specialized
    ms, _ = trace_mods(score_mod=mods.alibi(mods.alibi_slopes(4)))
    ms = msgspec.structs.replace(ms, small_indices=True)
    src = b200c.codegen.generate(s, "sm90a", mods=ms).source
    assert "const RowBias rbias = row_bias_item(" in src
    res = compile_cuda(src, tmp_path / "k.cubin", "cubin", "sm_90a")
    assert res.resources()["spill_bytes"] == 0, res.log


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH")
def test_row_bias_offsets_are_exact_where_the_bias_is_small(tmp_path):
    """The whole tiles' bias offsets as the kernel computes them (``row_bias_item`` once per work item at
    the key where the first row's bias crosses zero, ``apply_score_bias`` per tile: the slope times the
    tile's distance from there), the generated C compiled by g++ and run for rows up to 2^21: for ALiBi
    near the diagonal and for a bias on the absolute key near key 0, both rows of the thread are within a
    few FP32 ulps of the bias itself plus one reference's (at most 16 keys' slope). From a fixed key the
    offsets cancelled two values of size slope * distance: ALiBi from key 0 was 3.6e-2 logits off near
    q_idx = 2^21, the absolute bias from the row's own index as much near key 0."""
    import types

    import msgspec

    from b200c.codegen.mods import ctx_fields, device_functions
    from b200c.codegen.sm90.softmax import apply_score_bias_lines
    from b200c.dsl.mods import trace_mods
    from b200c.dsl.presets import HOPPER_PRESETS
    from test_mods_codegen import _HOST_PRELUDE, run_on_host

    slope = torch.tensor([0.5])
    cases = {"alibi": (mods.alibi(slope), lambda q, k: (k - q) * 0.5),
             "absolute": (lambda score, b, h, q_idx, kv_idx: score - slope[h] * kv_idx, lambda q, k: -0.5 * k)}
    inv_scale, block_n, n = 128 ** 0.5, HOPPER_PRESETS[128].block_n, 2 ** 21
    rows = (1000, 131077, 1048579, n - 16)
    for name, (fn, exact_of) in cases.items():
        ms, _ = trace_mods(score_mod=fn)
        ms = msgspec.structs.replace(ms, small_indices=True)
        src = b200c.codegen.generate(HOPPER_PRESETS[128], "sm90a", mods=ms).source
        # the kernel's calls, as the program below makes them
        assert "const RowBias rbias = row_bias_item(c, w, q_head_of(c, w, q), row_in_seq);" in src
        assert "apply_score_bias(s, rbias, (i + 1) * BLOCK_N, rb);" in src
        near = "row / BN" if name == "alibi" else "0"  # the tiles where the bias is small
        prog = [_HOST_PRELUDE, "struct { unsigned x; } threadIdx;", "#define S_REGS 4", f"#define BN {block_n}",
                "static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }",
                "struct Ctx {", *ctx_fields(ms), "  float inv_scale;", "};",
                "struct WorkItem { int b; int len_q; int len_kv; };",
                *device_functions(ms), *apply_score_bias_lines(types.SimpleNamespace(mods=ms)),
                "int main() {",
                "  static const float slope = 0.5f;",
                f"  Ctx c{{}}; c.cap0 = &slope; c.cap0_stride[0] = 1; c.inv_scale = {inv_scale!r}f;",
                f"  const WorkItem w{{0, {n}, {n}}};",
                f"  const int rows[] = {{{', '.join(map(str, rows))}}};",
                "  for (int row : rows)",
                "    for (unsigned lane = 0; lane < 4; ++lane) {",
                "      threadIdx.x = lane;",
                "      const RowBias b = row_bias_item(c, w, 0, row);",
                f"      for (int t = {near}; t <= {near} + 24; ++t) {{",
                "        float s[S_REGS] = {0, 0, 0, 0}, rb[2];",
                "        apply_score_bias(s, b, (t - 12) * BN, rb);",
                "        for (int r = 0; r < 2; ++r)",
                '          printf("%d %d %a\\n", row + 8 * r, (t - 12) * BN + 2 * (int)lane, (double)rb[r]);',
                "      }",
                "    }",
                "}"]
        out = run_on_host(tmp_path, f"row_bias_{name}", "\n".join(prog) + "\n")
        count = 0
        for line in out.splitlines():
            row, col, v = (int(x) if i < 2 else float.fromhex(x) for i, x in enumerate(line.split()))
            exact = exact_of(row, col)  # logits
            err = abs(v / inv_scale - exact)
            assert err <= 2 ** -21 * (abs(exact) + 0.5 * 16), (name, row, col, err)
            count += 1
        assert count == len(rows) * 4 * 25 * 2


@pytest.mark.nvcc
@pytest.mark.parametrize("d", [64, 128, 256])
def test_unit_stride_key_bias_loop(d, tmp_path):
    """An SDPA additive key-padding mask (B, H, 1, S_kv) with a contiguous last dimension, as the runtime
    compiles it (a score_mod; ModCall.for_sizes flags the key dimension's stride of 1): each key of the
    thread's fragment is read at a constant offset from one address per K/V tile. The steady K/V loop has
    one load per key column of the thread (block_n / 4) and 318 / 258 / 123 fewer instructions than the
    same mask with a key stride of 32 (one 64-bit multiply and address per key). Exact counts,
    nvcc 13.0, the mods presets' tiles (160 / 128 / 64 rows). At D 128 the strided loop took 2 more (939 -> 941)
    when the work decomposition gained its varlen item order (b200c_work_order): a register allocation change."""
    from b200c.dsl.presets import HOPPER_MOD_PRESETS
    from b200c.nvcc import compile_cuda
    from b200c.runtime.sdpa_mask import mod_call_of_mask
    from b200c.sass.disasm import disassemble
    from b200c.sass.hopper import hot_loop

    contiguous = torch.zeros(1, 32, 1, 1024).bfloat16()
    strided = torch.zeros(1, 1024, 32, 1).bfloat16().permute(0, 2, 3, 1)  # (1, 32, 1, 1024), key stride 32
    s = HOPPER_MOD_PRESETS[d]
    loops = {}
    for name, m in (("unit", contiguous), ("strided", strided)):
        mc = mod_call_of_mask(m).for_sizes(1, 32, 4096, 1024)
        assert mc.mods.mask_mod is None and mc.mods.small_indices
        assert mc.mods.captured[0].unit_dims == ((3,) if name == "unit" else ())
        res = compile_cuda(b200c.codegen.generate(s, "sm90a", mods=mc.mods).source, tmp_path / f"{name}.cubin",
                           "cubin", "sm_90a")
        # the strided mask's per-key addresses spilled 16 B at head dim 128 outside the steady loop (nvcc 13.0)
        # until P's exponent took a per-row scale (softmax_rules.huge_lines), which changed the allocation: 0 now
        assert res.resources()["spill_bytes"] == 0, res.log
        loops[name] = hot_loop(disassemble(tmp_path / f"{name}.cubin"))
        assert not [x for x in loops[name]["body"] if "LDL" in x or "STL" in x]
        assert sum("LDG" in x for x in loops[name]["body"]) == s.block_n // 4
    if _tested_nvcc():  # exact counts for the tested release only (nvcc 13.5.37 allocates differently)
        assert loops["unit"]["instructions"] == {64: 732, 128: 683, 256: 567}[d]
        assert loops["strided"]["instructions"] - loops["unit"]["instructions"] == {64: 318, 128: 258, 256: 123}[d]
    assert loops["unit"]["ffma"] == loops["strided"]["ffma"]


def test_varlen_block_mask_trusts_cu_seqlens_with_check_seqlens_false(fd, monkeypatch):
    """attention_varlen(check_seqlens=False) reaches the block mask: it does not read the lengths back
    from the device to check them (a sync per call); with the default it does."""
    from b200c.runtime import block_mask

    checks = []
    orig = block_mask._lengths

    def spy(*args):
        checks.append(args[-1])
        return orig(*args)

    monkeypatch.setattr(block_mask, "_lengths", spy)
    q = torch.randn(300, 4, 128).bfloat16()
    cu = torch.tensor([0, 100, 300], dtype=torch.int32)
    b200c.attention_varlen(q, q, q, cu, cu, 200, 200, mask_mod=mods.sliding_window(16), target="sm90a",
                           check_seqlens=False)
    assert checks == [False, False]
    b200c.attention_varlen(q, q, q, cu, cu, 200, 200, mask_mod=mods.sliding_window(17), target="sm90a")
    assert checks == [False, False, True, True] and len(fd.launches) == 2


def test_a_causal_lambda_runs_the_causal_kernel(fd):
    """Issue 36 item 2: ``mask_mod=lambda b, h, q, k: q >= k`` (FlexAttention's causal mask, top-left) is the
    causal knob's mask when S_q == S_kv: recognised from the traced graph, the call runs the plain causal
    kernel (no mods, no block mask); other spellings of other masks, or S_q != S_kv, keep the masked kernel."""
    q = torch.randn(1, 2, 256, 128, dtype=torch.bfloat16)
    for f in (lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, lambda b, h, qi, ki: ki <= qi):
        n = len(fd.launches)
        b200c.attention(q, q, q, mask_mod=f, target="sm90a")
        (L,) = fd.launches[n:]
        assert L.params["causal"] == 1 and "kv_ranges" not in L.params and not L.kernel.name.startswith("hopper_mods")
    for f, kv in ((lambda b, h, qi, ki: qi > ki, 256), (lambda b, h, qi, ki: qi >= ki, 384),
                  (lambda b, h, qi, ki: (qi >= ki) & (qi - ki <= 64), 384)):
        n = len(fd.launches)
        k = torch.randn(1, 2, kv, 128, dtype=torch.bfloat16)
        b200c.attention(q, k, k, mask_mod=f, target="sm90a")
        L = fd.launches[-1]
        assert L.params["causal"] == 0 and "kv_ranges" in L.params and L.kernel.name == "hopper_mods_d128"


def test_a_sliding_window_lambda_runs_the_window_recipe(fd):
    """Issue 50 step 5: a mask_mod that is a sliding window (b200c.mods.sliding_window, or the same band spelt
    otherwise) with S_q == S_kv runs what ``window_size=(left, right)`` runs (``causal=True`` with it when
    right = 0): the same kernel with the same parameters, no kernel of its own."""
    q = torch.randn(1, 2, 256, 128, dtype=torch.bfloat16)

    def last(**kw):
        n = len(fd.launches)
        b200c.attention(q, q, q, target="sm90a", **kw)
        return fd.launches[n:]

    for f, band in ((mods.sliding_window(64), (64, 0)), (lambda b, h, qi, ki: (qi - ki < 65) & (ki <= qi), (64, 0)),
                    (lambda b, h, qi, ki: (ki >= qi - 30) & (ki <= qi + 20), (30, 20))):
        want = last(window_size=band, causal=band[1] == 0)
        loads = fd.loads
        got = last(mask_mod=f)
        assert fd.loads == loads and len(got) == len(want)  # no kernel of its own
        for g, w in zip(got, want):
            assert g.kernel == w.kernel and g.grid == w.grid
            per_call = ("out", "lse")  # this call's own output buffers

            def same(p):
                return {k: v for k, v in p.items() if not k.startswith("tmap") and k not in per_call}

            assert same(g.params) == same(w.params)
    # not a band of q_idx - kv_idx containing the diagonal, or S_q != S_kv: the lambda's own masked kernel
    k = torch.randn(1, 2, 384, 128, dtype=torch.bfloat16)
    for f, kv in ((lambda b, h, qi, ki: (qi - ki <= 5) & (ki <= qi - 1), q), (mods.sliding_window(64), k),
                  (lambda b, h, qi, ki: (qi - ki <= 5) & (ki <= qi) & (h == 0), q)):
        n = len(fd.launches)
        b200c.attention(q, kv, kv, mask_mod=f, target="sm90a")
        assert fd.launches[-1].params["causal"] == 0 and fd.launches[-1].kernel.name == "hopper_mods_d128"


def test_the_band_reader_covers_the_spellings_and_refuses_the_rest():
    from b200c.codegen.mods import band_top_left
    from b200c.dsl.mods import trace_mods

    def band(f):
        return band_top_left(trace_mods(mask_mod=f)[0])

    assert band(mods.sliding_window(256)) == (256, 0) and band(mods.sliding_window(256, 16)) == (256, 16)
    assert band(lambda b, h, q, k: (q - k < 8) & (k < q + 1)) == (7, 0)
    assert band(lambda b, h, q, k: (k >= q - 7) & (q >= k)) == (7, 0)
    for f in (lambda b, h, q, k: q >= k, lambda b, h, q, k: q - k <= 5,  # unbounded on one side
              lambda b, h, q, k: (2 * q - k <= 5) & (k <= q),  # not q - k alone
              lambda b, h, q, k: (q - k <= 5) | (k <= q),  # not a conjunction
              lambda b, h, q, k: (q - k <= 5) & (k <= q - 1)):  # the diagonal outside
        assert band(f) is None

"""A varlen call's item order, longest first (b200c.codegen.work.longest_first, b200c_work_order,
b200c.runtime.work_order): the model's order, every item exactly once through it, the balance of the
persistent CTAs it buys, the generated kernel, and what a call launches (the stand-in driver)."""
from __future__ import annotations

import itertools
import random

import pytest
import torch

import b200c
from b200c.codegen.work import (ORDER_MAX_KEY, WORK_ORDER_KERNEL_NAME, WorkDecomposition, longest_first)
from b200c.runtime import fake_driver

BF16 = torch.bfloat16
# FlashAttention-4's varlen row (issue 50): 24 causal sequences of 256 to 8192 tokens
FA4_VARLEN = (8192, 256, 4096, 512, 6144, 1024, 2048, 768, 8192, 3072, 384, 5120, 1536, 256, 7168, 640, 2560, 896,
              4608, 1280, 3584, 320, 8192, 1792)
H11 = WorkDecomposition(64, 176, 2, serpentine=True, item_order=True)  # the sm90a D128 preset's tiles


def prefix(lengths):
    return [0, *itertools.accumulate(lengths)]


def test_longest_first_sorts_by_visits_then_entry():
    """Entries by K/V tiles (most first), equal counts in entry order, then -1 per entry with no row;
    the counts here are worked out by hand: 128-row groups against 176-key tiles, causal."""
    d = WorkDecomposition(64, 176, 2, item_order=True)
    lengths = (300, 128, 0)  # groups of 128 rows: 3, 1, 0 -> 3 sequences x 3 groups = 9 entries
    cu = prefix(lengths)
    got = longest_first(d, batch=3, seq_q=300, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True, pack_heads=False)
    # sequence 0: group 0 rows 0-127 see keys < 128 (1 tile), group 1 rows 128-255 (2 tiles), group 2 rows
    # 256-299 (2 tiles: keys < 300); sequence 1: group 0 (1 tile); sequence 2: nothing
    assert got == [1, 2, 0, 3, -1, -1, -1, -1, -1]
    dense = longest_first(d, batch=3, seq_q=300, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=False, pack_heads=False)
    assert dense == [0, 1, 2, 3, -1, -1, -1, -1, -1]  # every row of sequence 0 sees 2 tiles, of sequence 1 one


@pytest.mark.parametrize("causal,pack,heads,heads_kv,splits", [
    (True, False, 4, 4, 1), (False, False, 3, 1, 1), (True, True, 8, 2, 1), (False, True, 4, 2, 1),
    (True, False, 2, 2, 3)])
def test_every_item_once_through_the_order(causal, pack, heads, heads_kv, splits):
    """Over a persistent grid (serpentine rounds), the ordered numbering gives every valid (sequence, head,
    Q tile, split) exactly once, the same items the numbering without an order gives, and invalid numbers
    only for the entries of no row."""
    rng = random.Random(7)
    d = WorkDecomposition(64, 176, 2, serpentine=True, split_kv=splits > 1, item_order=True)
    lengths = [rng.choice((0, 1, 63, 64, 200, 511, 700, 1300)) for _ in range(9)]
    cu, seq = prefix(lengths), max(lengths)
    kw = dict(batch=len(lengths), heads=heads, heads_kv=heads_kv, seq_q=seq, seq_kv=seq, causal=causal,
              pack_heads=pack, cu_seqlens_q=cu, cu_seqlens_k=cu, num_splits=splits)
    order = longest_first(d, batch=len(lengths), seq_q=seq, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=causal,
                          pack_heads=pack)
    n = d.num_work(len(lengths), heads, seq, pack, splits)

    def key(it):
        return (it.b, it.h, it.q_tile, it.split, it.n_kv, it.n_full, it.v0)

    plain = sorted(key(it) for w in range(n) if (it := d.item(w, **kw)).valid)
    ordered = [d.item(w, grid=5, order=order, **kw) for w in range(n)]
    assert sorted(key(it) for it in ordered if it.valid) == plain and len(set(plain)) == len(plain)
    no_row = order.count(-1) * (heads // d.q_stages if pack else heads) * splits
    assert sum(not it.valid for it in ordered) == no_row


def _cta_loads(d, lengths, heads, causal, grid, order):
    """K/V tiles each persistent CTA visits (+1 per item for its prologue and epilogue), grid-stride."""
    cu, seq = prefix(lengths), max(lengths)
    n = d.num_work(len(lengths), heads, seq)
    loads = [0] * grid
    for w in range(n):
        it = d.item(w, batch=len(lengths), heads=heads, heads_kv=heads, seq_q=seq, seq_kv=seq, causal=causal,
                    cu_seqlens_q=cu, cu_seqlens_k=cu, grid=grid, order=order)
        if it.valid:
            loads[w % grid] += it.n_kv + 1
    return max(loads) / (sum(loads) / grid)


@pytest.mark.parametrize("causal,without,with_order", [(True, 1.0832, 1.0039), (False, 1.1002, 1.0027)])
def test_the_order_balances_the_fa4_varlen_row(causal, without, with_order):
    """The most loaded of 132 persistent CTAs against the mean on FlashAttention-4's varlen row, 16 heads, the
    sm90a preset's tiles: the numbering without an order leaves it 8.3 % (causal) / 10.0 % above the mean,
    longest first 0.4 % / 0.3 % (the host model's figures, not a GPU's)."""
    cu = prefix(FA4_VARLEN)
    order = longest_first(H11, batch=len(FA4_VARLEN), seq_q=max(FA4_VARLEN), cu_seqlens_q=cu, cu_seqlens_k=cu,
                          causal=causal, pack_heads=False)
    assert _cta_loads(H11, FA4_VARLEN, 16, causal, 132, None) == pytest.approx(without, abs=1e-4)
    assert _cta_loads(H11, FA4_VARLEN, 16, causal, 132, order) == pytest.approx(with_order, abs=1e-4)


def test_the_count_is_capped():
    """A K/V tile count above max_key sorts as max_key (the kernel's shared memory holds max_key + 2 counts)."""
    d = WorkDecomposition(64, 176, 1, item_order=True)
    cu = prefix((64, 4000))
    got = longest_first(d, batch=2, seq_q=4000, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=False, pack_heads=False,
                        max_key=3)
    groups = d.q_groups(4000, False)
    assert got[:groups] == [groups + g for g in range(groups)]  # sequence 1's 23 tiles count as 3: entry order
    assert got[groups] == 0 and got[groups + 1:] == [-1] * (groups - 1)


# ---- the generated kernel ----------------------------------------------------------------------------------


def test_builds_without_a_block_mask_hold_the_order_kernel():
    h11 = b200c.load_schedule_file("examples/hopper/h11_persistent.py")
    g = b200c.generate(h11, "sm90a")
    assert f"extern \"C\" __global__ void __launch_bounds__(1024)\n{WORK_ORDER_KERNEL_NAME}(" in g.source
    assert ("item_order", "i32_ptr") in g.launch.params and g.launch.work().item_order
    g100 = b200c.generate(b200c.load_schedule_file("examples/18_tma_l2_promotion.py"), "sm100a")
    assert WORK_ORDER_KERNEL_NAME in g100.source and ("item_order", "i32_ptr") in g100.launch.params
    masked = b200c.kernel_source(128, "sm90a", mask_mod=lambda b, h, q, kv: (q - kv) % 3 == 0)
    assert WORK_ORDER_KERNEL_NAME not in masked and "item_order" not in masked  # a block mask: no order


@pytest.mark.parametrize("path,target,arch", [("examples/hopper/h11_persistent.py", "sm90a", "sm_90a"),
                                              ("examples/18_tma_l2_promotion.py", "sm100a", "sm_100a")])
def test_the_order_kernel_compiles_without_spills(tmp_path, path, target, arch):
    """Both kernels of the module compile without spills (the order kernel's shared memory: 48 KB static)."""
    from b200c.nvcc import compile_cuda

    g = b200c.generate(b200c.load_schedule_file(path), target)
    res = compile_cuda(g.source, tmp_path / "k.cubin", "cubin", arch)
    assert res.resources(WORK_ORDER_KERNEL_NAME)["spill_bytes"] == 0, res.log
    assert res.resources()["spill_bytes"] == 0, res.log


# ---- what a call launches (the stand-in driver) --------------------------------------------------------------


def _packed(total, h, d=128):
    return torch.randn(total, h, d).to(BF16)


@pytest.fixture
def order_on(monkeypatch):
    monkeypatch.setenv("B200C_VARLEN_ORDER", "1")


@pytest.mark.parametrize("causal", [True, False])
def test_a_varlen_call_of_more_items_than_sms_orders_them_first(order_on, causal):
    h11 = b200c.load_schedule_file("examples/hopper/h11_persistent.py")
    lengths = (2048, 300, 1000, 0, 4096)
    cu = torch.tensor(prefix(lengths), dtype=torch.int32)
    q, k = _packed(sum(lengths), 16), _packed(sum(lengths), 16)
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention_varlen(q, k, k, cu, cu, 4096, 4096, schedule=h11, causal=causal)
        order, main = fd.launches
    groups = -(-4096 // 128)
    assert (order.grid, order.block, order.smem) == (1, 1024, 0)
    p = order.params
    assert (p["cu_seqlens_q"], p["cu_seqlens_k"]) == (cu.data_ptr(), cu.data_ptr())
    assert (p["batch"], p["seq_q"], p["causal"], p["pack_heads"], p["max_key"]) == (5, 4096, int(causal), 0,
                                                                                     -(-4096 // 176))
    assert p["order"] != 0 and main.params["item_order"] == p["order"]
    assert main.grid == 132 and main.params["cu_seqlens_q"] == cu.data_ptr()
    assert order.stream == main.stream
    assert groups * 5 * 16 > 132  # more items than SMs: ordered


def test_the_order_is_off_by_default(monkeypatch):
    """Until a GPU run has checked it, a varlen call launches unordered unless B200C_VARLEN_ORDER=1."""
    monkeypatch.delenv("B200C_VARLEN_ORDER", raising=False)
    h11 = b200c.load_schedule_file("examples/hopper/h11_persistent.py")
    lengths = (2048, 300, 1000, 0, 4096)
    cu = torch.tensor(prefix(lengths), dtype=torch.int32)
    q = _packed(sum(lengths), 16)
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention_varlen(q, q, q, cu, cu, 4096, 4096, schedule=h11, causal=True)
        (main,) = fd.launches
    assert main.params["item_order"] == 0


def test_a_call_of_one_wave_or_a_dense_call_takes_no_order(order_on):
    h11 = b200c.load_schedule_file("examples/hopper/h11_persistent.py")
    lengths = (300, 200)
    cu = torch.tensor(prefix(lengths), dtype=torch.int32)
    q = _packed(500, 16)
    with fake_driver.install(target="sm90a") as fd:
        b200c.attention_varlen(q, q, q, cu, cu, 300, 300, schedule=h11, causal=True)  # 2 x 16 x 3 = 96 items
        (main,) = fd.launches
        assert main.params["item_order"] == 0
        fd.launches.clear()
        x = torch.randn(4, 16, 4096, 128).to(BF16)
        b200c.attention(x, x, x, schedule=h11, causal=True)
        (dense,) = fd.launches
        assert dense.params["item_order"] == 0


def test_when_a_call_takes_no_order(order_on):
    """Past the kernel's shared memory (entries B * q_groups) or in one wave the call runs unordered; so does a
    persistent kernel without serpentine rounds (the sm100a plans: CTA i would take the i-th longest item of
    every round); K/V tile counts past ORDER_MAX_KEY sort as that count."""
    import types

    from b200c.codegen.work import ORDER_MAX_ENTRIES
    from b200c.runtime.inputs import Problem
    from b200c.runtime.work_order import order_for

    lk = types.SimpleNamespace(work_order=object(), num_sms=132)
    info = types.SimpleNamespace(work=lambda: H11, persistent=True)
    ok = Problem(batch=8, heads=16, heads_kv=16, seq_q=4096, seq_kv=4096, head_dim=128)
    assert order_for(lk, info, ok, False, True, 10_000, (1, 2)) is not None
    many = Problem(batch=ORDER_MAX_ENTRIES // 32 + 1, heads=16, heads_kv=16, seq_q=4096, seq_kv=4096, head_dim=128)
    assert order_for(lk, info, many, False, True, 10_000, (1, 2)) is None
    long_k = Problem(batch=8, heads=16, heads_kv=16, seq_q=4096, seq_kv=176 * ORDER_MAX_KEY + 1, head_dim=128)
    assert order_for(lk, info, long_k, False, True, 10_000, (1, 2)).block.slot("max_key").value == ORDER_MAX_KEY
    assert order_for(lk, info, ok, False, True, 132, (1, 2)) is None  # one wave
    plain = WorkDecomposition(64, 176, 2, serpentine=False, item_order=True)
    assert order_for(lk, types.SimpleNamespace(work=lambda: plain, persistent=True), ok, False, True, 10_000,
                     (1, 2)) is None
    assert order_for(lk, types.SimpleNamespace(work=lambda: plain, persistent=False), ok, False, True, 10_000,
                     (1, 2)) is not None  # one CTA per item: the hardware dispatches them in order

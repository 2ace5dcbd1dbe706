"""Split-KV (flash-decoding) in the shared work decomposition, on the CPU: the splits of every work
item visit its K/V tiles exactly once with the same whole/masked split, an empty split sees nothing,
the split count rule, and the merge by log-sum-exp in a host model of the kernels (each split's
softmax computed from the decomposition's own masks with torch in FP64, merged as the combine kernel
does) against attention computed directly."""
import math
import random

import pytest
import torch

from b200c.codegen.work import MAX_SPLITS, WorkDecomposition, choose_splits

BLOCK_M, BLOCK_N = 64, 128


def _items(d, batch, heads, heads_kv, seq_q, seq_kv, causal, pack, num_splits, cu_q=None, cu_k=None, ranges=None):
    n = d.num_work(batch, heads, seq_q, pack, num_splits)
    return [d.item(w, batch=batch, heads=heads, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv, causal=causal,
                   pack_heads=pack, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, num_splits=num_splits, ranges=ranges)
            for w in range(n)]


CASES = [
    # batch, heads, heads_kv, seq_q, seq_kv, causal, pack, q_stages
    (1, 32, 8, 1, 32768, False, False, 1),
    (2, 8, 8, 4, 1000, True, False, 1),
    (3, 4, 2, 130, 777, True, False, 2),
    (2, 8, 2, 64, 4096, True, True, 2),
    (1, 2, 1, 300, 129, True, False, 1),  # S_q > S_kv: the first rows see no key
    (2, 2, 2, 1, 1, False, False, 1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + ("c" if c[5] else ""))
@pytest.mark.parametrize("num_splits", [1, 2, 3, 5, 16])
def test_splits_visit_every_tile_once_with_the_same_masks(case, num_splits):
    batch, heads, heads_kv, seq_q, seq_kv, causal, pack, q_stages = case
    plain = WorkDecomposition(BLOCK_M, BLOCK_N, q_stages)
    split = WorkDecomposition(BLOCK_M, BLOCK_N, q_stages, split_kv=True)
    base = _items(plain, batch, heads, heads_kv, seq_q, seq_kv, causal, pack, 1)
    parts = _items(split, batch, heads, heads_kv, seq_q, seq_kv, causal, pack, num_splits)
    assert len(parts) == len(base) * num_splits
    for i, item in enumerate(base):
        want = {v: (v < item.n_full) for v in range(item.n_kv)}  # visit -> whole?
        got = {}
        rows = range(item.q_tile * BLOCK_M, min(item.len_q, (item.q_tile + (1 if pack else q_stages)) * BLOCK_M))
        for s in range(num_splits):
            p = parts[i * num_splits + s]
            assert (p.b, p.h, p.q_tile, p.split) == (item.b, item.h, item.q_tile, s)
            per = -(-item.n_kv // num_splits)
            if p.v0 >= item.n_kv:  # an empty split: one tile that no row of the item sees
                assert p.n_kv == 1 and p.n_full == 0
                assert all(split.col_limit(p, r, 0, causal) <= 0 for r in rows)
                continue
            assert p.n_kv == min(per, item.n_kv - p.v0)
            for v in range(p.n_kv):
                tile = split.tile_of_visit(p, v)
                assert tile not in got, f"tile {tile} visited twice"
                got[tile] = v < p.n_full
                for r in rows:  # the mask of every row is the unsplit item's
                    assert split.col_limit(p, r, v, causal) == plain.col_limit(item, r, tile, causal)
        assert got == want


def test_block_sparse_splits_follow_the_visit_order():
    """With a block mask the full run is visited first: each split takes a range of that order."""
    plain = WorkDecomposition(BLOCK_M, BLOCK_N, 1, block_sparse=True)
    split = WorkDecomposition(BLOCK_M, BLOCK_N, 1, block_sparse=True, split_kv=True)
    rng = random.Random(3)
    ranges = []
    for _ in range(2 * 4):  # batch 2 x heads 4 x one Q group
        lo = rng.randrange(0, 10)
        full_lo = lo + rng.randrange(0, 3)
        full_hi = full_lo + rng.randrange(0, 6)
        hi = full_hi + rng.randrange(0, 3)
        ranges.append((lo, full_lo, full_hi, max(hi, lo + 1)))
    kw = dict(batch=2, heads=4, heads_kv=4, seq_q=64, seq_kv=4096, ranges=ranges)
    for n in (1, 2, 3, 7):
        for w in range(plain.num_work(2, 4, 64)):
            item = plain.item(w, **kw)
            order = [plain.kv_tile(item.kv_lo, item.full_lo, item.n_full, v) for v in range(item.n_kv)]
            got = []
            for s in range(n):
                p = split.item(w * n + s, num_splits=n, **kw)
                if p.v0 >= item.n_kv:
                    continue
                got += [(split.tile_of_visit(p, v), v < p.n_full) for v in range(p.n_kv)]
            assert got == [(t, v < item.n_full) for v, t in enumerate(order)]


def test_choose_splits_rule():
    # items that fill the SMs never split; one item against a long cache fills the GPU
    assert choose_splits(132, 256, 132) == 1
    assert choose_splits(8, 256, 132) == 16  # 128 CTAs of 132
    assert choose_splits(1, 2048, 132) <= MAX_SPLITS
    assert choose_splits(1, 1, 132) == 1  # one tile: nothing to split
    assert choose_splits(4, 64, 132) == 4  # each split keeps at least MIN_SPLIT_TILES (16) tiles
    assert choose_splits(4, 31, 132) == 1
    assert choose_splits(8, 256, 132, fixed=4) == 4
    assert choose_splits(8, 3, 132, fixed=16) == 3  # capped at the tiles
    for items in (1, 2, 8, 32, 64, 100):
        for tiles in (2, 8, 64, 256, 1024):
            n = choose_splits(items, tiles, 132)
            assert 1 <= n <= max(1, tiles // 16)
            assert items * n <= max(2 * 132, items)  # at most two waves


def _host_split_attention(q, k, v, scale, causal, num_splits, block_n=BLOCK_N):
    """Host model of a split-KV launch for one (sequence, head): each split's O / l and LSE over its
    tiles (masks from the decomposition's col_limit), then the combine kernel's merge."""
    s_q, s_kv = q.shape[0], k.shape[0]
    d = WorkDecomposition(s_q if s_q > 0 else 1, block_n, 1, split_kv=True)
    parts = []
    for s in range(num_splits):
        item = d.item(s, batch=1, heads=1, heads_kv=1, seq_q=s_q, seq_kv=s_kv, causal=causal, num_splits=num_splits)
        cols, mask = [], []
        for vv in range(item.n_kv):
            tile = d.tile_of_visit(item, vv)
            for c in range(block_n):
                key = tile * block_n + c
                cols.append(min(key, s_kv - 1))
                mask.append([c < d.col_limit(item, r, vv, causal) for r in range(s_q)])
        idx = torch.tensor(cols)
        m = torch.tensor(mask).T  # (s_q, keys)
        sc = (q @ k[idx].T) * scale
        sc = sc.masked_fill(~m, -math.inf)
        lse = torch.logsumexp(sc, dim=-1)
        p = torch.exp(sc - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[:, None])
        o = p @ v[idx]
        parts.append((torch.where(torch.isinf(lse)[:, None], torch.zeros_like(o), o), lse))
    lses = torch.stack([p[1] for p in parts])
    mx = lses.max(dim=0).values
    base = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
    w = torch.exp(lses - base)
    total = w.sum(0)
    out = sum(w[i][:, None] * parts[i][0] for i in range(num_splits))
    out = torch.where(total[:, None] == 0, torch.zeros_like(out), out / total[:, None])
    lse = torch.where(total == 0, torch.full_like(total, -math.inf), base + torch.log(total))
    return out, lse


@pytest.mark.parametrize("s_q,s_kv,causal", [(1, 1000, False), (4, 777, True), (3, 2, True), (2, 300, False)])
def test_merge_is_exact_in_the_host_model(s_q, s_kv, causal):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(s_q, 64, generator=g, dtype=torch.float64)
    k = torch.randn(s_kv, 64, generator=g, dtype=torch.float64) * 2
    v = torch.randn(s_kv, 64, generator=g, dtype=torch.float64)
    scale = 0.125
    sc = (q @ k.T) * scale
    if causal:  # bottom-right aligned
        r = torch.arange(s_q)[:, None]
        c = torch.arange(s_kv)[None, :]
        sc = sc.masked_fill(c > r + s_kv - s_q, -math.inf)
    ref_lse = torch.logsumexp(sc, -1)
    ref = torch.softmax(sc, -1).nan_to_num(0.0) @ v
    for n in (1, 2, 3, 8, 16):
        out, lse = _host_split_attention(q, k, v, scale, causal, n)
        assert torch.allclose(out, ref, atol=1e-12, rtol=1e-12), n
        assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
        fin = ~torch.isinf(ref_lse)
        assert torch.allclose(lse[fin], ref_lse[fin], atol=1e-12), n


def test_rows_that_see_no_key_give_zero_and_minus_inf():
    q = torch.randn(4, 64, dtype=torch.float64)
    k = torch.randn(2, 64, dtype=torch.float64)
    out, lse = _host_split_attention(q, k, k, 0.1, True, 4)  # rows 0, 1 see no key (S_q > S_kv, causal)
    assert torch.equal(out[:2], torch.zeros(2, 64, dtype=torch.float64))
    assert lse[:2].tolist() == [-math.inf, -math.inf]
    assert torch.isfinite(lse[2:]).all()


def test_split_build_only_where_asked(tmp_path):
    import b200c
    from b200c.codegen import generate

    for target in ("sm90a", "sm100a"):
        s = b200c.default_schedule(128, target=target)
        plain = generate(s, target).source
        assert "b200c_attention_combine" not in plain and "num_splits" not in plain
        split = generate(s.replace(kv_splits=0), target)
        assert "b200c_attention_combine" in split.source and "c.num_splits" in split.source
        assert split.launch.split_kv and [p[0] for p in split.launch.params][-9:] == [
            "num_splits", "part_rows", "o_part", "lse_part", "seqused_k", "block_table", "max_blocks", "page_size",
            "page_box"]
        assert "c.block_table != nullptr" in split.source  # the K/V loads read a paged cache through the table
        assert "split-KV build" in str(b200c.plan(s.replace(kv_splits=4), target))
        assert "split-KV: never" in str(b200c.plan(s.replace(kv_splits=1), target))


def test_kv_splits_validation():
    import b200c
    from b200c.errors import ScheduleError

    for bad in (-1, 129, 2.5, True):
        with pytest.raises(ScheduleError, match="kv_splits"):
            b200c.Schedule(kv_splits=bad).validate()


@pytest.mark.nvcc
@pytest.mark.parametrize("target,arch,d", [
    ("sm90a", "sm_90a", 64), ("sm90a", "sm_90a", 128), ("sm90a", "sm_90a", 256),
    # the stage-18 preset's softmax warps sit at their 192-register budget: the split build spilled 20 B at
    # D 64/128 while P's addend was recomputed per tile; carried across tiles (exp_neg) it fits (nvcc 13.0)
    ("sm100a", "sm_100a", 64), ("sm100a", "sm_100a", 128), ("sm100a", "sm_100a", 256),
])
def test_split_builds_compile_without_spills(tmp_path, target, arch, d):
    """Split-KV builds of the built-in presets: both kernels of the module compile without spills."""
    import b200c
    from b200c.codegen import generate
    from b200c.nvcc import compile_cuda

    g = generate(b200c.default_schedule(d, target=target).replace(kv_splits=0), target)
    res = compile_cuda(g.source, tmp_path / "k.cubin", "cubin", arch)
    assert res.resources("b200c_attention_combine")["spill_bytes"] == 0, res.log
    assert res.resources()["spill_bytes"] == 0, res.log

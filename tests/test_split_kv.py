"""Split-KV (flash-decoding) in the shared work decomposition, on the CPU: the splits of every work
item visit its K/V tiles exactly once with the same whole/masked split, an empty split sees nothing,
the split count rule, and the host model of a split launch (b200c/codegen/split_model.py: each split's
softmax from the decomposition's own masks in FP64, merged by its copy of the combine kernel's rule)
against attention over the unsplit keys computed directly here."""
import math
import random

import pytest
import torch

from b200c.codegen.split_model import merge, split_partials
from b200c.dsl.split_build import split_build
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
    """The host model of a split-KV launch (b200c/codegen/split_model.py): the splits' partials, then the
    combine kernel's merge."""
    o_part, lse_part = split_partials(q, k, v, scale, causal, num_splits, block_n)
    return merge(o_part, lse_part)


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


def test_merge_with_a_sink_is_attention_with_one_more_logit():
    """A sink joins the merge as one more logit whose value is 0: FP64 attention over [keys, sink]."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 64, generator=g, dtype=torch.float64)
    k = torch.randn(500, 64, generator=g, dtype=torch.float64)
    v = torch.randn(500, 64, generator=g, dtype=torch.float64)
    sink = torch.tensor(1.5, dtype=torch.float64)
    sc = torch.cat([(q @ k.T) * 0.125, sink.expand(3, 1)], 1)
    ref = torch.softmax(sc, -1)[:, :-1] @ v
    o_part, lse_part = split_partials(q, k, v, 0.125, False, 3)
    out, lse = merge(o_part, lse_part, sink.expand(3))
    assert torch.allclose(out, ref, atol=1e-12) and torch.allclose(lse, torch.logsumexp(sc, -1), atol=1e-12)


def test_merge_drops_empty_splits_and_keeps_nan():
    o = torch.tensor([[[1.0, 2.0]], [[float("nan"), 7.0]], [[3.0, 4.0]]], dtype=torch.float64)
    lse = torch.tensor([[0.0], [-math.inf], [math.log(3.0)]], dtype=torch.float64)
    out, l = merge(o, lse)  # the empty split's NaN O is not read; weights 1 and 3
    assert out.tolist() == [[(1 + 9) / 4, (2 + 12) / 4]] and abs(l.item() - math.log(4.0)) < 1e-15
    out, l = merge(o, torch.tensor([[0.0], [float("nan")], [0.0]], dtype=torch.float64))
    assert torch.isnan(out).all() and torch.isnan(l).all()
    out, l = merge(o, torch.full((3, 1), -math.inf, dtype=torch.float64))
    assert out.tolist() == [[0.0, 0.0]] and l.tolist() == [-math.inf]


def test_split_build_only_where_asked(tmp_path):
    import b200c
    from b200c.codegen import generate

    for target in ("sm90a", "sm100a"):
        s = b200c.default_schedule(128, target=target)
        plain = generate(s, target).source
        assert "b200c_attention_combine" not in plain and "num_splits" not in plain
        split = generate(split_build(s), target)
        assert "b200c_attention_combine" in split.source and "c.num_splits" in split.source
        # programmatic dependent launch: the split kernel lets the combine be scheduled, the combine waits for it
        assert split.source.count("griddepcontrol.launch_dependents;") == 1
        assert split.source.count("griddepcontrol.wait;") == 1
        assert "griddepcontrol" not in plain
        assert split.launch.split_kv and [p[0] for p in split.launch.params][-9:] == [
            "num_splits", "part_rows", "o_part", "lse_part", "seqused_k", "block_table", "max_blocks", "page_size",
            "page_box"]
        assert "c.block_table != nullptr" in split.source  # the K/V loads read a paged cache through the table
        assert "split-KV build" in str(b200c.plan(split_build(s).replace(kv_splits=4), target))
        assert "split-KV: never" in str(b200c.plan(s.replace(kv_splits=1), target))


def test_split_build_caps_the_register_cache_where_the_budget_is_tight():
    """The split build of a schedule: kv_splits=0, at most 64 cached S columns at softmax budgets of 192 or less
    (validation refuses more in a split build); the runtime's split token is that build."""
    import b200c
    from b200c.dsl.split_build import SPLIT_S_CACHE_COLS
    from b200c.errors import ScheduleError
    from b200c.runtime.split_kv import split_token

    s18 = b200c.default_schedule(128, target="sm100a")  # 192 registers, 96 cached columns
    assert (s18.softmax_regs, s18.s_cache_cols) == (192, 96)
    sb = split_build(s18)
    assert (sb.kv_splits, sb.s_cache_cols) == (0, SPLIT_S_CACHE_COLS) == (0, 64)
    assert sb.replace(name=s18.name, blog_stage=s18.blog_stage, kv_splits=None, s_cache_cols=96) == s18
    assert split_build(sb) is sb
    assert b200c.Schedule.from_json(split_token(s18.to_json())) == sb
    wide = b200c.default_schedule(256, target="sm100a")  # 224 registers: keeps its 96
    assert (split_build(wide).s_cache_cols, split_build(wide).kv_splits) == (96, 0)
    hopper = b200c.default_schedule(128, target="sm90a")
    assert split_build(hopper) == hopper.replace(kv_splits=0)
    from b200c.dsl.presets import HOPPER_MOD_PRESETS, HOPPER_MOD_SPLIT_BUILDS

    for d, preset in HOPPER_MOD_PRESETS.items():  # the sm90a mods presets take their own split builds
        assert split_build(preset) is HOPPER_MOD_SPLIT_BUILDS[d] and HOPPER_MOD_SPLIT_BUILDS[d].kv_splits == 0
        assert b200c.Schedule.from_json(split_token((preset.to_json(), "mods"))[0]) == HOPPER_MOD_SPLIT_BUILDS[d]
    assert not HOPPER_MOD_SPLIT_BUILDS[64].persistent and HOPPER_MOD_SPLIT_BUILDS[256].other_regs == 40
    with pytest.raises(ScheduleError, match=r"split_kv_registers|s_cache_cols <= 64"):
        b200c.plan(s18.replace(kv_splits=0), "sm100a")
    with pytest.raises(ScheduleError, match="s_cache_cols <= 64"):
        b200c.plan(s18.replace(kv_splits=4), "sm100a")
    b200c.plan(s18.replace(kv_splits=4, s_cache_cols=64), "sm100a")


def test_kv_splits_validation():
    import b200c
    from b200c.errors import ScheduleError

    for bad in (-1, 129, 2.5, True):
        with pytest.raises(ScheduleError, match="kv_splits"):
            b200c.Schedule(kv_splits=bad).validate()


@pytest.mark.nvcc
@pytest.mark.parametrize("target,arch,d", [
    ("sm90a", "sm_90a", 64), ("sm90a", "sm_90a", 128), ("sm90a", "sm_90a", 256),
    # the stage-18 preset's softmax warps sit at their 192-register budget: its split build (96 cached S columns)
    # spilled 20 B at D 64/128 (nvcc 13.0); b200c.dsl.split_build caches 64 there
    ("sm100a", "sm_100a", 64), ("sm100a", "sm_100a", 128), ("sm100a", "sm_100a", 256),
])
def test_split_builds_compile_without_spills(tmp_path, target, arch, d):
    """Split-KV builds of the built-in presets, as the runtime derives them (b200c.dsl.split_build): both
    kernels of the module compile without spills."""
    import b200c
    from b200c.codegen import generate
    from b200c.nvcc import compile_cuda

    g = generate(split_build(b200c.default_schedule(d, target=target)), target)
    res = compile_cuda(g.source, tmp_path / "k.cubin", "cubin", arch)
    assert res.resources("b200c_attention_combine")["spill_bytes"] == 0, res.log
    assert res.resources()["spill_bytes"] == 0, res.log


@pytest.mark.parametrize("target", ["sm90a", "sm100a"])
@pytest.mark.parametrize("sinks", [False, True])
def test_one_split_stores_as_the_unsplit_kernel(target, sinks):
    """Issue 49: a call of one split on a split-KV build (a KV-cache call that does not split) launches no
    combine kernel; the kernel's ``c.num_splits == 1`` branch stores BF16 O and the LSE with the unsplit
    kernel's own store code (the sink included), which the GPU tests check against torch."""
    import b200c
    from b200c.codegen import generate
    from b200c.dsl.mods import trace_mods
    from b200c.dsl.presets import default_schedule

    s = default_schedule(128, "hopper" if target == "sm90a" else "b200", mods=True)
    ms = trace_mods(sinks=torch.zeros(4))[0] if sinks else None
    plain = generate(s.replace(kv_splits=1), target, mods=ms).source
    split = generate(split_build(s), target, mods=ms).source
    if target == "sm90a":
        def store(src):
            return src[src.index("void store_o("):src.index("\n}\n", src.index("void store_o("))]

        direct = store(split)
        direct = direct[direct.index("if (c.num_splits == 1) {"):direct.index("    return;\n  }")]
        unsplit = store(plain)
        unsplit = unsplit[unsplit.index("  float inv[2];"):]
        # the branch is the unsplit body, two spaces deeper (pragmas stay at column 0)
        body = [ln[2:] if ln.startswith("  ") else ln for ln in direct.splitlines()[1:]]
        assert "\n".join(body).strip() == unsplit.strip()
        assert ("c.sinks[head]" in direct) == sinks
    else:
        marker = "if (c.num_splits == 1)"
        assert split.count(marker) == 2  # the epilogue of each Q stage
        i, first = 0, 0
        for _ in range(2):
            i = split.index(marker, i) + 1
            direct = split[split.index("\n", i) + 1:split.index("\n    else\n", i)]
            first = plain.index("{  // epilogue (blog ch.1)", first) + 1
            unsplit = plain[first - 1:plain.index("\n    }\n", first) + 6]
            assert direct.strip() == unsplit.strip()
            assert ("c.sinks[q_head_of" in direct) == sinks
    assert "b200c_attention_combine" in split

"""b200c.runtime.block_mask.kv_ranges against a brute-force reference written from the definition: per
work item (WorkDecomposition.item), per K/V tile, every (row < len_q, head) of the item and every key
of the tile; a key is visible iff it is < len_kv, (causal) <= r + len_kv - len_q, and the mask says so.
Tile empty / full / partial; (kv_lo, full_lo, full_hi, kv_hi) = first and one past the last non-empty
tile, the first longest run of full tiles (kv_lo twice if none), (0, 0, 0, 1) for an item that sees
nothing. Plus: chunking and `uses` do not change the result, errors, the cache and block_counts."""
import itertools
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from b200c.codegen.work import WorkDecomposition
from b200c.errors import LaunchError
from b200c.runtime import block_mask
from b200c.runtime.block_mask import BlockMaskCache, block_counts, cached_kv_ranges, kv_ranges

ALL = frozenset({"b", "h", "q_idx", "kv_idx"})
SHAPES = (WorkDecomposition(128, 128, 2), WorkDecomposition(64, 176, 2))


def dense_mask(mask_fn, batch, heads, seq_q, seq_kv):
    """The mask on the whole (B, H, S_q, S_kv) index grid, as a numpy bool array."""
    b = torch.arange(batch).view(-1, 1, 1, 1)
    h = torch.arange(heads).view(1, -1, 1, 1)
    q = torch.arange(seq_q).view(1, 1, -1, 1)
    k = torch.arange(seq_kv).view(1, 1, 1, -1)
    return torch.broadcast_to(mask_fn(b, h, q, k), (batch, heads, seq_q, seq_kv)).numpy()


def reference(mask_fn, d: WorkDecomposition, *, batch, heads, heads_kv, seq_q, seq_kv, causal=False,
              pack_heads=False, cu_seqlens_q=None, cu_seqlens_k=None):
    mask = dense_mask(mask_fn, batch, heads, seq_q, seq_kv) if seq_q and seq_kv else None
    n_tiles = -(-seq_kv // d.block_n)
    num_work, groups = d.num_work(batch, heads, seq_q, pack_heads), d.q_groups(seq_q, pack_heads)
    rows_out = [None] * num_work
    for w in range(num_work):
        it = d.item(w, batch=batch, heads=heads, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv, causal=causal,
                    pack_heads=pack_heads, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
        # the item id: (sequence, head or head group) major, the actual Q group minor (not the causal order)
        if pack_heads:
            hs, q_tiles = range(it.h, it.h + d.q_stages), [it.q_tile]
            item_id = (it.b * (heads // d.q_stages) + it.h // d.q_stages) * groups + it.q_tile
        else:
            hs, q_tiles = [it.h], range(it.q_tile, it.q_tile + d.q_stages)
            item_id = (it.b * heads + it.h) * groups + it.q_tile // d.q_stages
        assert rows_out[item_id] is None
        rows = [r for t in q_tiles for r in range(t * d.block_m, (t + 1) * d.block_m) if r < it.len_q]
        kinds = []  # per tile: "empty", "full" or "partial"
        for j in range(n_tiles):
            cols = range(j * d.block_n, (j + 1) * d.block_n)
            seen = [[c < it.len_kv and (not causal or c <= r + it.len_kv - it.len_q) and bool(mask[it.b, h, r, c])
                     for c in cols] for h in hs for r in rows]
            if not any(any(s) for s in seen):
                kinds.append("empty")
            elif all(all(s) for s in seen):
                kinds.append("full")
            else:
                kinds.append("partial")
        nonempty = [j for j, k in enumerate(kinds) if k != "empty"]
        if not it.valid or not nonempty:
            rows_out[item_id] = (0, 0, 0, 1)
            continue
        kv_lo, kv_hi = nonempty[0], nonempty[-1] + 1
        best = (0, kv_lo)  # (length, start) of the first longest full run
        j = 0
        while j < n_tiles:
            if kinds[j] == "full":
                s = j
                while j < n_tiles and kinds[j] == "full":
                    j += 1
                if j - s > best[0]:
                    best = (j - s, s)
            else:
                j += 1
        rows_out[item_id] = (kv_lo, best[1], best[1] + best[0], kv_hi)
    return np.array(rows_out, dtype=np.int32).reshape(-1, 4)


def check(mask_fn, d, uses=ALL, **kw):
    got = kv_ranges(mask_fn, d, uses=uses, **kw)
    assert got.dtype == torch.int32 and got.is_contiguous()
    assert got.shape == (d.num_work(kw["batch"], kw["heads"], kw["seq_q"], kw.get("pack_heads", False)), 4)
    want = reference(mask_fn, d, **kw)
    np.testing.assert_array_equal(got.numpy(), want)
    # a tiny chunk budget (one item's rows x one tile per chunk) gives the same
    np.testing.assert_array_equal(kv_ranges(mask_fn, d, uses=uses, chunk_elems=1, **kw).numpy(), want)
    return got


def every(b, h, q, k):
    return torch.ones((), dtype=torch.bool)


def sliding(window):
    return lambda b, h, q, k: (q - k < window) & (k - q < window)


ODD = (1, 77, 130, 257)


@pytest.mark.parametrize("d", SHAPES)
@pytest.mark.parametrize("seq_q,seq_kv", [(s, s) for s in ODD] + [(77, 257), (257, 130), (1, 257)])
def test_dense_visits_every_tile_and_the_whole_ones_are_full(d, seq_q, seq_kv):
    got = check(every, d, batch=2, heads=2, heads_kv=1, seq_q=seq_q, seq_kv=seq_kv)
    whole = seq_kv // d.block_n
    want = (0, 0, whole, -(-seq_kv // d.block_n))
    assert (got == torch.tensor(want, dtype=torch.int32)).all()


@pytest.mark.parametrize("d", SHAPES + (WorkDecomposition(128, 128, 1),))
@pytest.mark.parametrize("seq_q,seq_kv", [(77, 257), (257, 77), (130, 130), (257, 1), (1, 257), (300, 520)])
def test_causal_matches_the_work_decomposition(d, seq_q, seq_kv):
    kw = dict(batch=1, heads=3, heads_kv=1, seq_q=seq_q, seq_kv=seq_kv, causal=True)
    got = check(every, d, **kw)
    # the plain causal mask: tiles [0, n_kv) visited, [0, n_full) whole (the decomposition's own numbers)
    groups = d.q_groups(seq_q, False)
    for w in range(d.num_work(1, 3, seq_q)):
        it = d.item(w, **{k: v for k, v in kw.items()})
        item_id = (w // groups) * groups + (groups - 1 - w % groups)
        assert tuple(got[item_id].tolist()) == (0, 0, it.n_full, it.n_kv)


@pytest.mark.parametrize("d", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 64, 200])
def test_sliding_window(d, causal, window):
    check(sliding(window), d, batch=1, heads=2, heads_kv=2, seq_q=257, seq_kv=520, causal=causal,
          uses={"q_idx", "kv_idx"})


@pytest.mark.parametrize("d", SHAPES)
def test_document_mask_and_uses_dropping_b_h(d):
    gen = torch.Generator().manual_seed(0)
    cuts = torch.sort(torch.randint(0, 600, (5,), generator=gen)).values
    doc = torch.bucketize(torch.arange(600), cuts)  # document id of each position

    def mask(b, h, q, k):
        return doc[q] == doc[k]

    kw = dict(batch=2, heads=2, heads_kv=1, seq_q=600, seq_kv=600)
    full = check(mask, d, **kw)
    assert torch.equal(kv_ranges(mask, d, uses={"q_idx", "kv_idx"}, **kw), full)
    assert torch.equal(kv_ranges(mask, d, uses={"q_idx", "kv_idx"}, chunk_elems=1, **kw), full)
    check(mask, d, uses={"q_idx", "kv_idx"}, causal=True, **kw)


@pytest.mark.parametrize("d", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_key_padding_per_batch(d, causal):
    kv_len = torch.tensor([257, 0, 100, 176])

    def mask(b, h, q, k):
        return k < kv_len[b]

    got = check(mask, d, uses={"b", "kv_idx"}, batch=4, heads=2, heads_kv=1, seq_q=130, seq_kv=257, causal=causal)
    per_b = got.view(4, -1, 4)
    assert (per_b[1] == torch.tensor((0, 0, 0, 1), dtype=torch.int32)).all()  # sees nothing


def test_key_padding_reuses_what_only_the_sizes_decide(monkeypatch):
    """A new key-padding mask per call (what models pass SDPA) with the same sizes: the second call makes
    none of the index tensors and row bounds again (each is a kernel launch on the GPU) and is still
    right; a mask_fn that writes into its arguments gets fresh ones the next time."""
    d = SHAPES[0]
    kw = dict(batch=3, heads=2, heads_kv=2, seq_q=300, seq_kv=257)
    for causal in (False, True):
        kv_len = torch.tensor([257, 3, 130])
        check(lambda b, h, q, k: k < kv_len[b], d, uses={"b", "kv_idx"}, causal=causal, **kw)
        kv_len = torch.tensor([1, 256, 0])  # a new mask, the same sizes
        made = []
        for name in ("arange", "zeros", "full", "tensor"):
            fn = getattr(torch, name)
            monkeypatch.setattr(torch, name, lambda *a, _fn=fn, _n=name, **k: made.append(_n) or _fn(*a, **k))
        got = kv_ranges(lambda b, h, q, k: k < kv_len[b], d, uses={"b", "kv_idx"}, causal=causal, **kw)
        assert made == []
        monkeypatch.undo()
        np.testing.assert_array_equal(got.numpy(), reference(lambda b, h, q, k: k < kv_len[b], d, causal=causal, **kw))

    def writes(b, h, q, k):
        k.add_(1)  # shifts every later key index by one: the cached arguments must not keep that
        return k < 258

    kv_ranges(writes, d, uses={"kv_idx"}, **kw)
    check(lambda b, h, q, k: k < 128, d, uses={"kv_idx"}, **kw)  # tile 0 full, not partial


def test_masks_without_kv_idx_and_inference_mode():
    """A mask that reads neither q_idx nor kv_idx (SDPA's (B, 1, 1, 1) mask, ``h < 1``) covers every key of
    its rows; the sizes' tensors made under torch.inference_mode serve a later call outside it."""
    d = SHAPES[1]
    kw = dict(batch=2, heads=4, heads_kv=2, seq_q=70, seq_kv=300)
    with torch.inference_mode():
        check(lambda b, h, q, k: h < 1, d, uses={"h"}, **kw)
    check(lambda b, h, q, k: h < 1, d, uses={"h"}, **kw)
    keep = torch.tensor([True, False])
    check(lambda b, h, q, k: keep[b], d, uses={"b"}, causal=True, **kw)


@pytest.mark.parametrize("d", SHAPES)
def test_head_dependent_mask(d):
    window = torch.tensor([1, 130, 400, 0])  # head 3 sees nothing

    def mask(b, h, q, k):
        return (q - k).abs() < window[h]

    got = check(mask, d, uses={"h", "q_idx", "kv_idx"}, batch=2, heads=4, heads_kv=2, seq_q=257, seq_kv=300)
    per_h = got.view(2, 4, -1, 4)
    assert (per_h[:, 3] == torch.tensor((0, 0, 0, 1), dtype=torch.int32)).all()


@pytest.mark.parametrize("d", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_packed_heads_gqa(d, causal):
    window = torch.tensor([3, 500, 64, 64, 0, 200, 10, 10])  # query heads 0-7, two K/V heads

    def mask(b, h, q, k):
        return (q - k).abs() < window[h]

    got = check(mask, d, pack_heads=True, batch=2, heads=8, heads_kv=2, seq_q=257, seq_kv=400, causal=causal)
    assert got.shape[0] == 2 * 4 * -(-257 // d.block_m)
    check(every, d, pack_heads=True, batch=1, heads=4, heads_kv=1, seq_q=130, seq_kv=77, causal=causal)


@pytest.mark.parametrize("d", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pack", [False, True])
def test_varlen_with_an_empty_and_a_short_sequence(d, causal, pack):
    lens_q, lens_k = [0, 77, 300, 5, 130], [10, 0, 257, 1, 300]
    cu_q, cu_k = [0, *itertools.accumulate(lens_q)], [0, *itertools.accumulate(lens_k)]

    def mask(b, h, q, k):
        return ((q + k + b) % 3 != 0) | (h == 1)

    kw = dict(batch=5, heads=2, heads_kv=1, seq_q=300, seq_kv=300, causal=causal, pack_heads=pack)
    got = check(mask, d, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw)
    empty = torch.tensor((0, 0, 0, 1), dtype=torch.int32)
    per_b = got.view(5, -1, 4)
    assert (per_b[0] == empty).all() and (per_b[1] == empty).all()  # no rows; no keys
    # tensors for the prefix sums give the same; dropping b/h where the mask does not use them too
    assert torch.equal(kv_ranges(mask, d, cu_seqlens_q=torch.tensor(cu_q, dtype=torch.int32),
                                 cu_seqlens_k=torch.tensor(cu_k, dtype=torch.int32), **kw), got)
    doc = lambda b, h, q, k: (q // 50) == (k // 50)  # noqa: E731
    ref = check(doc, d, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw)
    assert torch.equal(kv_ranges(doc, d, uses={"q_idx", "kv_idx"}, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw), ref)
    assert torch.equal(kv_ranges(doc, d, uses={"q_idx", "kv_idx"}, chunk_elems=1, cu_seqlens_q=cu_q,
                                 cu_seqlens_k=cu_k, **kw), ref)
    # check_seqlens=False (flash_attn's contract: the caller vouches for the values) gives the same ranges
    # without reading the lengths back (a device sync); a length past seq_q then goes unchecked
    assert torch.equal(kv_ranges(mask, d, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, check_seqlens=False, **kw), got)
    too_long = dict(kw, seq_q=299)
    with pytest.raises(LaunchError, match="longer than seq_q=299"):
        kv_ranges(mask, d, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **too_long)
    kv_ranges(mask, d, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, check_seqlens=False, **too_long)


@pytest.mark.parametrize("d", SHAPES)
def test_fully_masked_items(d):
    nothing = lambda b, h, q, k: k < 0  # noqa: E731
    got = check(nothing, d, batch=2, heads=2, heads_kv=1, seq_q=257, seq_kv=130)
    assert (got == torch.tensor((0, 0, 0, 1), dtype=torch.int32)).all()
    # causal with S_q > S_kv: the first rows see no key; an item of only such rows visits nothing
    got = check(every, d, batch=1, heads=1, heads_kv=1, seq_q=600, seq_kv=10, causal=True)
    assert (got[0] == torch.tensor((0, 0, 0, 1), dtype=torch.int32)).all()


def test_longest_full_run_and_first_on_ties():
    d = WorkDecomposition(64, 64, 1)
    # keys 0-63 and 128-191 and 256-319 visible to every row, the rest to none but row 0 (partial)
    mask = lambda b, h, q, k: ((k // 64) % 2 == 0) | (q == 0)  # noqa: E731
    got = check(mask, d, batch=1, heads=1, heads_kv=1, seq_q=64, seq_kv=320)
    assert got.tolist() == [[0, 0, 1, 5]]
    mask = lambda b, h, q, k: (k < 64) | ((k >= 192) & (k < 320)) | (q == 0)  # noqa: E731
    got = check(mask, d, batch=1, heads=1, heads_kv=1, seq_q=64, seq_kv=384)
    assert got.tolist() == [[0, 3, 5, 6]]


@st.composite
def problems(draw):
    d = WorkDecomposition(draw(st.sampled_from((16, 32))), draw(st.sampled_from((16, 24, 32))),
                          draw(st.sampled_from((1, 2))))
    heads_kv = draw(st.integers(1, 2))
    group = draw(st.sampled_from((1, 2, 4)))
    heads, batch = heads_kv * group, draw(st.integers(1, 3))
    kw = dict(batch=batch, heads=heads, heads_kv=heads_kv, causal=draw(st.booleans()),
              pack_heads=d.q_stages > 1 and group % d.q_stages == 0 and draw(st.booleans()))
    if draw(st.booleans()):
        lens_q = draw(st.lists(st.integers(0, 90), min_size=batch, max_size=batch))
        lens_k = draw(st.lists(st.integers(0, 90), min_size=batch, max_size=batch))
        kw.update(seq_q=max(lens_q), seq_kv=max(lens_k), cu_seqlens_q=[0, *itertools.accumulate(lens_q)],
                  cu_seqlens_k=[0, *itertools.accumulate(lens_k)])
    else:
        kw.update(seq_q=draw(st.integers(1, 90)), seq_kv=draw(st.integers(1, 90)))
    # a random mask: a random table over (b, h, q // rq, k // rk) plus a band
    rq, rk = draw(st.sampled_from((1, 8, 16))), draw(st.sampled_from((1, 8, 16)))
    density = draw(st.sampled_from((0.0, 0.3, 0.9, 1.0)))
    seed = draw(st.integers(0, 2 ** 16))
    band = draw(st.integers(-1, 40))
    return d, kw, (rq, rk, density, seed, band)


@settings(max_examples=60, deadline=None)
@given(problems())
def test_random_problems_match_the_reference(p):
    d, kw, (rq, rk, density, seed, band) = p
    gen = torch.Generator().manual_seed(seed)
    table = torch.rand((kw["batch"], kw["heads"], 90 // rq + 1, 90 // rk + 1), generator=gen) < density

    def mask(b, h, q, k):
        return table[b, h, q // rq, k // rk] | ((q - k).abs() <= band)

    got = check(mask, d, **kw)
    assert ((got[:, 0] <= got[:, 1]) & (got[:, 1] <= got[:, 2]) & (got[:, 2] <= got[:, 3])
            & (got[:, 0] < got[:, 3])).all()


def test_memory_chunking_is_bounded(monkeypatch):
    """No evaluated chunk exceeds the budget when one item's rows x one tile fit in it."""
    seen = []

    def mask(b, h, q, k):
        out = (q >= k) | (h == 0)
        seen.append(torch.broadcast_shapes(b.shape, h.shape, q.shape, k.shape).numel())
        return out

    d = WorkDecomposition(64, 64, 2)
    kw = dict(batch=3, heads=4, heads_kv=1, seq_q=1000, seq_kv=1000)
    ref = kv_ranges(mask, d, **kw)
    assert len(seen) == 1  # everything in one chunk by default
    seen.clear()
    budget = 2 * 64 * 64 * 3
    got = kv_ranges(mask, d, chunk_elems=budget, **kw)
    assert torch.equal(got, ref) and len(seen) > 1 and max(seen) <= budget


def test_captured_tensor_too_short_is_a_launch_error():
    doc = torch.zeros(100, dtype=torch.long)
    with pytest.raises(LaunchError, match=r"out of range.*size 100.*kv_idx.*must cover.*S_kv=130"):
        kv_ranges(lambda b, h, q, k: doc[q] == doc[k], SHAPES[0], batch=1, heads=1, heads_kv=1, seq_q=64,
                  seq_kv=130)


@pytest.mark.parametrize("fn,match", [
    (lambda b, h, q, k: q - k, "must return a bool tensor.*int64"),
    (lambda b, h, q, k: True, "must return a bool tensor.*bool"),
    (lambda b, h, q, k: torch.ones((7, 1, 1, 1), dtype=torch.bool), "broadcastable.*\\(7, 1, 1, 1\\)"),
    (lambda b, h, q, k: 1 / 0, "ZeroDivisionError"),
])
def test_bad_masks_are_launch_errors(fn, match):
    with pytest.raises(LaunchError, match=match):
        kv_ranges(fn, SHAPES[0], batch=2, heads=1, heads_kv=1, seq_q=64, seq_kv=64)


def test_bad_arguments_are_launch_errors():
    kw = dict(batch=2, heads=1, heads_kv=1, seq_q=64, seq_kv=64)
    with pytest.raises(LaunchError, match="subset"):
        kv_ranges(every, SHAPES[0], uses={"q"}, **kw)
    with pytest.raises(LaunchError, match="longer than seq_q"):
        kv_ranges(every, SHAPES[0], cu_seqlens_q=[0, 10, 100], cu_seqlens_k=[0, 5, 10], **kw)
    with pytest.raises(LaunchError, match="both"):
        kv_ranges(every, SHAPES[0], cu_seqlens_q=[0, 10, 20], **kw)


def test_empty_problems():
    d = SHAPES[0]
    assert kv_ranges(every, d, batch=2, heads=1, heads_kv=1, seq_q=0, seq_kv=64).shape == (0, 4)
    got = kv_ranges(every, d, batch=2, heads=1, heads_kv=1, seq_q=64, seq_kv=0)
    assert got.tolist() == [[0, 0, 0, 1]] * 2


def test_block_counts():
    ranges = torch.tensor([[0, 1, 3, 4], [0, 0, 0, 1], [2, 2, 2, 5]], dtype=torch.int32)
    assert block_counts(ranges) == {"items": 3, "visited": 8, "full": 2, "partial": 6}
    got = kv_ranges(every, SHAPES[0], batch=1, heads=1, heads_kv=1, seq_q=128, seq_kv=300)
    assert block_counts(got) == {"items": 1, "visited": 3, "full": 2, "partial": 1}


def test_cache_is_an_lru_and_thread_safe():
    cache = BlockMaskCache(maxsize=2)
    calls = []

    def compute(v):
        return lambda: calls.append(v) or torch.tensor([v])

    assert cache.get("a", compute(1)).item() == 1
    assert cache.get("a", compute(9)).item() == 1 and calls == [1]
    cache.get("b", compute(2))
    cache.get("a", compute(9))  # a is now the most recent
    cache.get("c", compute(3))  # evicts b
    assert len(cache) == 2 and cache.get("b", compute(4)).item() == 4 and calls == [1, 2, 3, 4]
    cache.clear()
    assert len(cache) == 0

    keys = [i % 5 for i in range(200)]
    threads = [threading.Thread(target=lambda k=k: cache.get(k, compute(k))) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 2

    key = ("every", 1, 1, 1, 128, 300, SHAPES[0], False, False, "cpu")
    make = lambda: kv_ranges(every, SHAPES[0], batch=1, heads=1, heads_kv=1, seq_q=128, seq_kv=300)  # noqa: E731
    assert cached_kv_ranges(key, make) is cached_kv_ranges(key, make)
    block_mask._CACHE.clear()


@st.composite
def tensor_problems(draw):
    d = WorkDecomposition(draw(st.sampled_from((16, 32))), draw(st.sampled_from((16, 24, 32))),
                          draw(st.sampled_from((1, 2, 3))))
    heads_kv = draw(st.integers(1, 2))
    group = draw(st.sampled_from((1, 2, 3, 4)))
    heads, batch = heads_kv * group, draw(st.integers(1, 3))
    seq_q, seq_kv = draw(st.integers(1, 90)), draw(st.integers(1, 90))
    pack = d.q_stages > 1 and group % d.q_stages == 0 and draw(st.booleans())
    broadcast = [draw(st.booleans()) for _ in range(4)]  # which dimensions the mask has as size 1
    shape = tuple(1 if one else n for one, n in zip(broadcast, (batch, heads, seq_q, seq_kv)))
    density = draw(st.sampled_from((0.0, 0.3, 0.9, 1.0)))
    band = draw(st.integers(-1, 40))
    return d, dict(batch=batch, heads=heads, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv, pack_heads=pack), \
        shape, density, band, draw(st.integers(0, 2 ** 16)), draw(st.sampled_from(("plain", "strided", "expanded")))


@settings(max_examples=150, deadline=None)
@given(tensor_problems())
def test_tensor_masks_match_the_reference(p):
    """tensor_ranges (an SDPA boolean attn_mask given as the tensor) against the reference from the
    definition, for masks broadcast over any dimensions, strided views, partial Q and K/V tiles, packed
    heads and items that see nothing."""
    d, kw, shape, density, band, seed, layout = p
    gen = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=gen) < density
    if shape[2] > 1 and shape[3] > 1:
        q, k = torch.arange(shape[2]).view(-1, 1), torch.arange(shape[3]).view(1, -1)
        m = m | ((q - k).abs() <= band)
    if layout == "strided":  # the same values in a transposed layout
        m = m.transpose(2, 3).contiguous().transpose(2, 3)
    elif layout == "expanded":  # broadcast dimensions expanded to full size with stride 0 (transformers' masks)
        m = m.expand(kw["batch"], kw["heads"], kw["seq_q"] if shape[2] > 1 else 1, kw["seq_kv"])
    full = m.expand(kw["batch"], kw["heads"], kw["seq_q"], kw["seq_kv"])
    got = block_mask.tensor_ranges(m, d, **{k: v for k, v in kw.items() if k != "heads_kv"})
    assert got.dtype == torch.int32 and got.is_contiguous()
    np.testing.assert_array_equal(got.numpy(), reference(lambda b, h, q, k: full[b, h, q, k], d, **kw))


def test_tensor_ranges_refuses_what_it_does_not_take():
    d = WorkDecomposition(32, 32, 2)
    for m in (torch.ones(1, 1, 8, 8), torch.ones(8, 8, dtype=torch.bool), torch.ones(1, 1, 3, 8, dtype=torch.bool)):
        with pytest.raises(LaunchError, match="4-D bool tensor broadcastable"):
            block_mask.tensor_ranges(m, d, batch=1, heads=1, seq_q=8, seq_kv=8)
    assert block_mask.tensor_ranges(torch.ones(1, 1, 1, 1, dtype=torch.bool), d, batch=1, heads=2, seq_q=0,
                                    seq_kv=8).shape == (0, 4)

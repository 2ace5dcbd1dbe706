"""The shared work decomposition's Python model (b200c/codegen/work.py) against brute force (query row r
sees key c iff c < S_kv and, causal, c <= r + S_kv - S_q: FlashAttention >= 2.1's bottom-right alignment): every
query tile is covered by exactly one valid work item, each item visits every K/V tile one of its
rows sees and no tile past them, the first ``n_full`` tiles are whole for every row, and
``col_limit`` is the bottom-right aligned causal / key-length mask; plus the rendered device code
is the shared template for every backend that includes it."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from b200c.codegen.work import WorkDecomposition


@st.composite
def problems(draw):
    q_stages = draw(st.sampled_from((1, 2)))
    block_m = draw(st.sampled_from((64, 128)))
    block_n = draw(st.sampled_from((64, 128, 176)))
    heads_kv = draw(st.integers(1, 3))
    group = draw(st.sampled_from((1, 2, 4)))
    heads = heads_kv * group
    batch = draw(st.integers(1, 3))
    causal = draw(st.booleans())
    varlen = draw(st.booleans())
    if varlen:
        lens_q = draw(st.lists(st.integers(0, 700), min_size=batch, max_size=batch))
        lens_k = draw(st.lists(st.integers(0, 700), min_size=batch, max_size=batch))
        cu_q = [0, *itertools.accumulate(lens_q)]
        cu_k = [0, *itertools.accumulate(lens_k)]
        seq_q, seq_kv = max(lens_q), max(lens_k)
    else:
        seq_q, seq_kv = draw(st.integers(1, 700)), draw(st.integers(1, 700))
        cu_q = cu_k = None
    pack = q_stages > 1 and group % q_stages == 0 and draw(st.booleans())
    return dict(d=WorkDecomposition(block_m, block_n, q_stages), batch=batch, heads=heads, heads_kv=heads_kv,
                seq_q=seq_q, seq_kv=seq_kv, causal=causal, pack=pack, cu_q=cu_q, cu_k=cu_k)


def _items(p):
    d = p["d"]
    n = d.num_work(p["batch"], p["heads"], p["seq_q"], p["pack"])
    return [d.item(w, batch=p["batch"], heads=p["heads"], heads_kv=p["heads_kv"], seq_q=p["seq_q"],
                   seq_kv=p["seq_kv"], causal=p["causal"], pack_heads=p["pack"], cu_seqlens_q=p["cu_q"],
                   cu_seqlens_k=p["cu_k"]) for w in range(n)]


def _stages(d, it, pack):
    """(query head, Q tile) of each Q stage of an item."""
    return [(it.h + q, it.q_tile) if pack else (it.h, it.q_tile + q) for q in range(d.q_stages)]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(problems())
def test_every_query_tile_in_exactly_one_valid_item(p):
    d = p["d"]
    seen = []
    for it in _items(p):
        if not it.valid:
            continue
        for h, t in _stages(d, it, p["pack"]):
            if t * d.block_m < it.len_q:
                seen.append((it.b, h, t))
    want = []
    for b in range(p["batch"]):
        len_q = p["cu_q"][b + 1] - p["cu_q"][b] if p["cu_q"] else p["seq_q"]
        want += [(b, h, t) for h in range(p["heads"]) for t in range(-(-len_q // d.block_m))]
    assert sorted(seen) == sorted(want)
    assert len(seen) == len(set(seen))


@settings(max_examples=200, derandomize=True, deadline=None)
@given(problems())
def test_tiles_visited_and_masked_match_brute_force(p):
    d, causal = p["d"], p["causal"]
    for it in _items(p):
        if not it.valid:
            continue
        assert it.h_kv == it.h // (p["heads"] // p["heads_kv"])
        rows = np.array([t * d.block_m + r for _, t in _stages(d, it, p["pack"]) for r in range(d.block_m)
                         if t * d.block_m + r < it.len_q])
        tiles = max(-(-it.len_kv // d.block_n), 1)
        keys = np.arange(tiles * d.block_n)
        sees = np.repeat((keys < it.len_kv)[None, :], len(rows), axis=0)  # brute force: [row, key]
        if causal:
            sees = sees & (keys[None, :] <= rows[:, None] + it.len_kv - it.len_q)
        seen_tiles = np.nonzero(sees.reshape(len(rows), tiles, d.block_n).any(axis=(0, 2)))[0]
        assert 1 <= it.n_kv <= tiles
        assert all(j < it.n_kv for j in seen_tiles)  # no seen tile is skipped
        assert not len(seen_tiles) or seen_tiles.max() == it.n_kv - 1  # none past the last seen one visited
        for j in range(it.n_kv):
            lim = np.array([d.col_limit(it, int(r), j, causal) for r in rows])
            masked = np.arange(d.block_n)[None, :] < lim[:, None]
            assert (masked == sees[:, j * d.block_n:(j + 1) * d.block_n]).all(), j
            if j < it.n_full:
                assert (lim >= d.block_n).all()  # whole for every row: the unmasked steady state


def test_causal_items_of_a_head_run_longest_first():
    d = WorkDecomposition(128, 128, 2)
    items = [d.item(w, batch=1, heads=1, heads_kv=1, seq_q=4096, seq_kv=4096, causal=True) for w in range(16)]
    assert [it.n_kv for it in items] == sorted((it.n_kv for it in items), reverse=True)
    assert items[0].q_tile == 30 and items[-1].q_tile == 0


@given(n=st.integers(1, 3000), grid=st.integers(1, 300), causal=st.booleans(), serpentine=st.booleans())
@settings(max_examples=300, deadline=None, derandomize=True)
def test_position_is_a_bijection_within_each_round(n, grid, causal, serpentine):
    """The grid-stride remap hands every item to exactly one CTA, within the round it was in."""
    d = WorkDecomposition(64, 128, 2, serpentine=serpentine)
    pos = [d.position(w, n, grid, causal) for w in range(n)]
    assert sorted(pos) == list(range(n))
    assert all(p // grid == w // grid for w, p in enumerate(pos))
    if not (serpentine and causal):
        assert pos == list(range(n))


def _max_over_mean_tiles(d, batch, heads, seq, grid=132):
    n = d.num_work(batch, heads, seq)
    loads = [sum(d.item(w, batch=batch, heads=heads, heads_kv=heads, seq_q=seq, seq_kv=seq, causal=True,
                        grid=grid).n_kv for w in range(cta, n, grid)) for cta in range(grid)]
    return max(loads) / (sum(loads) / grid)


@pytest.mark.parametrize("shape, per_head, serpentine", [((8, 16, 4096), 1.117, 1.034),
                                                           ((4, 16, 8192), 1.075, 1.033),
                                                           ((2, 16, 16384), 1.055, 1.031)])
def test_serpentine_rounds_balance_causal_ctas(shape, per_head, serpentine):
    """The numbers of work.py's docstring: K/V tiles of the most loaded of 132 CTAs over the mean."""
    assert round(_max_over_mean_tiles(WorkDecomposition(64, 176, 2), *shape), 3) == per_head
    assert round(_max_over_mean_tiles(WorkDecomposition(64, 176, 2, serpentine=True), *shape), 3) == serpentine


def test_persistent_sm90a_kernels_print_the_serpentine_remap():
    """The sm_90a backend's persistent plans take the serpentine rounds (device code and the launch
    record's model); one-item-per-CTA kernels and the tcgen05 backend (its pinned SASS loops) do not."""
    import b200c

    cases = [("examples/hopper/h11_persistent.py", "sm90a", True), ("examples/hopper/h10_block_n_176.py", "sm90a", False),
             ("examples/18_tma_l2_promotion.py", "sm100a", False)]
    for path, target, expected in cases:
        g = b200c.generate(b200c.load_schedule_file(path), target)
        assert ("odd rounds of the grid-stride loop run right to left" in g.source) is expected, path
        assert g.launch.serpentine is expected and g.launch.work().serpentine is expected, path


@pytest.mark.parametrize("schedule", ["examples/18_tma_l2_promotion.py", "examples/14_persistent.py"])
def test_kernels_print_the_shared_work_code(schedule):
    """The decode_work / col_limit of a generated kernel is the shared template's text."""
    import jinja2

    import b200c
    from b200c.codegen.render import _HERE

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_HERE / "templates")), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    wk = env.get_template("work.cuh.j2").module
    src = b200c.generate(b200c.load_schedule_file(schedule)).source
    work = {"order": "longest_first_per_head", "serpentine": False, "block_sparse": False, "split_kv": False,
            "item_order": True, "order_max_entries": 16384, "order_max_key": 4000}
    for part in (wk.ctx_fields(work), wk.ctx_methods(work), wk.items(work), wk.work_order(work)):
        assert str(part) in src

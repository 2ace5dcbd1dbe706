"""The backward's K/V-stationary decomposition (b200c/codegen/backward_work.py) and its FP64 host model
(b200c/codegen/backward_model.py): the decomposition visits exactly the (Q tile, K/V tile) pairs with a
visible (row, key), masks exactly those with a hidden one, agrees with the forward's
WorkDecomposition, and the host model's dQ, dK, dV equal torch autograd through FP64 attention."""
import itertools

import pytest
import torch

from b200c.codegen.backward_model import attention_backward
from b200c.codegen.backward_work import BackwardDecomposition
from b200c.codegen.work import WorkDecomposition


def _visible(r: int, c: int, len_q: int, len_kv: int, causal: bool) -> bool:
    return r < len_q and c < len_kv and (not causal or c <= r + len_kv - len_q)


def _brute(bm, bn, len_q, len_kv, causal):
    """{(i, j): masked} of every (Q tile, K/V tile) pair with a visible (row, key): from the mask alone."""
    out = {}
    for i in range(-(-len_q // bm)):
        rows = range(i * bm, min((i + 1) * bm, len_q))
        for j in range(-(-len_kv // bn)):
            keys = range(j * bn, (j + 1) * bn)  # the whole tile: keys past len_kv are hidden
            vis = [_visible(r, c, len_q, len_kv, causal) for r in rows for c in keys]
            if any(vis):
                out[(i, j)] = not all(vis)
    return out


SHAPES = [(bm, bn, sq, skv, causal) for (bm, bn), (sq, skv), causal in itertools.product(
    [(64, 128), (64, 176), (128, 64), (16, 48), (64, 16)],
    [(1, 1), (1, 300), (70, 150), (150, 70), (128, 128), (257, 511), (300, 64), (64, 300), (5, 4096), (100, 100)],
    [False, True])]


@pytest.mark.parametrize("bm,bn,sq,skv,causal", SHAPES)
def test_visits_are_the_masks_tiles(bm, bn, sq, skv, causal):
    dec = BackwardDecomposition(bm, bn)
    heads, heads_kv = 6, 2
    got = {}
    for w in range(dec.num_work(1, heads_kv, skv)):
        it = dec.item(w, batch=1, heads=heads, heads_kv=heads_kv, seq_q=sq, seq_kv=skv, causal=causal)
        assert it.valid and it.kv_tile == w % dec.kv_tiles(skv) and it.heads_per_kv == 3
        for h, i, masked in dec.visits(it):
            assert it.h0 <= h < it.h0 + 3 and h // 3 == it.h_kv
            got.setdefault((h, i, it.kv_tile), masked)
            # a masked visit's column limits are the forward's col_limit for the same tile
            for r in range(i * bm, min((i + 1) * bm, sq)):
                lim = dec.col_limit(it, r, causal)
                vis = [_visible(r, c, sq, skv, causal) for c in range(it.kv_tile * bn, (it.kv_tile + 1) * bn)]
                assert vis == [c < lim for c in range(bn)]
                if not masked:
                    assert all(vis)
    want = {(h, i, j): m for h in range(heads) for (i, j), m in _brute(bm, bn, sq, skv, causal).items()}
    assert got == want
    assert sum(it.n_visits for it in (dec.item(w, batch=1, heads=heads, heads_kv=heads_kv, seq_q=sq, seq_kv=skv,
                                               causal=causal) for w in range(dec.num_work(1, heads_kv, skv)))) == len(want)


@pytest.mark.parametrize("bm,bn,sq,skv,causal", SHAPES)
def test_the_forward_visits_the_same_pairs(bm, bn, sq, skv, causal):
    """The forward's Python model (q_stages 1), its dummy fully-masked visit of a row set that sees no key left
    out: the same pairs, masked alike (the forward's n_full .. n_kv - 1 are its masked visits)."""
    fwd = WorkDecomposition(bm, bn, 1)
    pairs = {}
    for w in range(fwd.num_work(1, 1, sq)):
        it = fwd.item(w, batch=1, heads=1, heads_kv=1, seq_q=sq, seq_kv=skv, causal=causal)
        for j in range(it.n_kv):
            rows = range(it.q_tile * bm, min((it.q_tile + 1) * bm, sq))
            if any(_visible(r, c, sq, skv, causal) for r in rows for c in range(j * bn, (j + 1) * bn)):
                pairs[(it.q_tile, j)] = j >= it.n_full
    bwd = BackwardDecomposition(bm, bn)
    got = {}
    for w in range(bwd.num_work(1, 1, skv)):
        it = bwd.item(w, batch=1, heads=1, heads_kv=1, seq_q=sq, seq_kv=skv, causal=causal)
        for _, i, masked in bwd.visits(it):
            got[(i, it.kv_tile)] = masked
    assert got == pairs


def test_varlen_items_follow_each_sequence():
    cu_q, cu_k = [0, 100, 100, 400], [0, 37, 500, 500]  # an empty query sequence, an empty key sequence
    dec = BackwardDecomposition(64, 128)
    seq_q, seq_kv = 300, 463
    seen = set()
    for w in range(dec.num_work(3, 2, seq_kv)):
        it = dec.item(w, batch=3, heads=4, heads_kv=2, seq_q=seq_q, seq_kv=seq_kv, causal=True, cu_seqlens_q=cu_q,
                      cu_seqlens_k=cu_k)
        len_q, len_kv = cu_q[it.b + 1] - cu_q[it.b], cu_k[it.b + 1] - cu_k[it.b]
        assert (it.len_q, it.len_kv, it.q_row0, it.kv_row0) == (len_q, len_kv, cu_q[it.b], cu_k[it.b])
        assert it.valid == (it.kv_tile * 128 < len_kv)
        for h, i, m in dec.visits(it):
            seen.add((it.b, h, i, it.kv_tile, m))
    want = set()
    for b in range(3):
        len_q, len_kv = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        for (i, j), m in _brute(64, 128, len_q, len_kv, True).items():
            want |= {(b, h, i, j, m) for h in range(4)}
    assert seen == want and any(s[0] == 0 for s in seen) and not any(s[0] == 1 for s in seen)


def test_causal_items_are_numbered_longest_first():
    dec = BackwardDecomposition(64, 128)
    visits = [dec.item(w, batch=1, heads=2, heads_kv=2, seq_q=2048, seq_kv=2048, causal=True).n_visits
              for w in range(dec.kv_tiles(2048))]
    assert visits == sorted(visits, reverse=True) and visits[0] > visits[-1] > 0


def test_deterministic_dq_order_is_the_kv_tile_order():
    dec = BackwardDecomposition(64, 128)
    kw = dict(batch=2, heads=4, heads_kv=2, seq_q=300, seq_kv=700, causal=True)
    tiles = dec.kv_tiles(700)
    for b, h, i in itertools.product(range(2), range(4), range(5)):
        ws = dec.dq_contributors(b, h, i, **kw)
        assert ws == sorted(ws)
        # exactly the items that visit (h, i)
        want = [w for w in range(dec.num_work(2, 2, 700)) if dec.item(w, **kw).b == b
                and any(v[:2] == (h, i) for v in dec.visits(dec.item(w, **kw)))]
        assert ws == want
        assert all(w // tiles == b * 2 + h // 2 for w in ws)


# ---- the host model against torch autograd ------------------------------------------------------------------

def _forward(q, k, v, causal, scale):
    """FP64 attention with FlashAttention's rule for a row that sees no key (O = 0, LSE = -inf), differentiable."""
    g = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q @ kk.transpose(-1, -2)) * scale
    sq, skv = q.shape[2], k.shape[2]
    if causal:
        hide = torch.arange(skv)[None, :] > torch.arange(sq)[:, None] + skv - sq
        s = s.masked_fill(hide, float("-inf"))
    lse = torch.logsumexp(s, -1)
    seen = torch.isfinite(lse)[..., None]
    p = torch.where(seen, torch.exp(s - torch.where(seen, lse[..., None], torch.zeros_like(lse[..., None]))),
                    torch.zeros_like(s))
    return p @ vv, lse


@pytest.mark.parametrize("b,h,hk,sq,skv,d,causal,bm,bn", [
    (2, 4, 2, 70, 150, 16, False, 32, 48),
    (2, 4, 2, 70, 150, 16, True, 32, 48),
    (1, 3, 1, 150, 70, 8, True, 16, 32),    # S_q > S_kv: the first 80 rows see no key (gradient 0 there)
    (1, 2, 2, 1, 333, 16, False, 64, 128),  # a decoding step
    (1, 2, 1, 129, 129, 32, True, 64, 64),  # partial Q and K/V tiles on the diagonal
])
def test_host_model_equals_autograd(b, h, hk, sq, skv, d, causal, bm, bn):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, sq, d, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(b, hk, skv, d, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(b, hk, skv, d, dtype=torch.float64, generator=g, requires_grad=True)
    scale = 0.3
    out, lse = _forward(q, k, v, causal, scale)
    dout = torch.randn(out.shape, dtype=torch.float64, generator=g)
    out.backward(dout)
    dq, dk, dv = attention_backward(q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), dout,
                                    causal=causal, softmax_scale=scale, block_m=bm, block_n=bn)
    for name, got, want in (("dq", dq, q.grad), ("dk", dk, k.grad), ("dv", dv, v.grad)):
        assert torch.isfinite(got).all(), name
        err = float((got - want).abs().max())
        assert err <= 1e-10 * max(1.0, float(want.abs().max())), (name, err)
    if sq > skv and causal:
        assert float(dq[:, :, : sq - skv].abs().max()) == 0.0  # rows with no key


def test_host_model_does_not_depend_on_the_tiles():
    g = torch.Generator().manual_seed(1)
    q, k, v, dout = (torch.randn(1, 2, 200, 16, dtype=torch.float64, generator=g) for _ in range(4))
    out, lse = _forward(q, k, v, True, 0.25)
    a = attention_backward(q, k, v, out, lse, dout, causal=True, softmax_scale=0.25, block_m=64, block_n=128)
    b2 = attention_backward(q, k, v, out, lse, dout, causal=True, softmax_scale=0.25, block_m=16, block_n=176)
    for x, y in zip(a, b2):
        assert float((x - y).abs().max()) <= 1e-12


def test_host_model_refuses_bad_shapes():
    q = torch.zeros(1, 3, 8, 16)
    k = torch.zeros(1, 2, 8, 16)
    with pytest.raises(ValueError, match="not a multiple of H_kv"):
        attention_backward(q, k, k, q, torch.zeros(1, 3, 8), q)
    with pytest.raises(ValueError, match="expected"):
        attention_backward(q, k[..., :8], k, q, torch.zeros(1, 3, 8), q)

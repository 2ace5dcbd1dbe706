"""Special-value numerics of both backends against FP32 torch attention (issue 33, item 5).

One score_mod adds a table of special values to chosen scores: a NaN score, +inf scores, -inf scores
(some keys, all keys but one, every key: a fully hidden row), logits of +-1e30 (one key, every key),
and mixes; rows in the first, a middle and the partial last K/V tile; plus inputs of large magnitude
(scores near 1e21, and products that overflow to +-inf in FP32). Run on every target of this GPU
(compute capability 9.0: sm90a natively, with and without the software exp2 columns, and the sm100a
kernel through the emulation target; 10.x: sm100a).

The reference is FP32 attention computed here with torch: torch.softmax of the scores, so a NaN or
+inf score makes its whole row NaN (exp(inf - inf) is NaN) and a -inf score has probability 0; a row
whose every score is -inf gives O = 0 and LSE = -inf (FlashAttention's rule, where torch's softmax
would give NaN). Other rows: max|out - ref| <= 2 max|lowp - ref| + 1e-3 (lowp: P rounded to BF16
before PV and O rounded to BF16, what the kernels do) and |lse - ref| <= 1e-3 max(1, |ref|).

Huge logits (1e30, scores near 1e21, a row of -1e30) take the kernels' power-of-two exponent scale
(b200c.codegen.softmax_rules.huge_lines): without it the rounded row max alone overflowed exp2
(NaN rows where torch gives the softmax; measured on the H200 before the rule, every target).
"""
import pytest

pytestmark = pytest.mark.gpu

DEV = "cuda"
B, H, S_Q, S_KV, D = 1, 2, 333, 333, 128
NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def torch():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.set_float32_matmul_precision("highest")
    return torch


def _targets(torch) -> list:
    """(target, schedule, what) of every kernel this GPU runs; another GPU skips with the reason."""
    import b200c

    cc = tuple(torch.cuda.get_device_capability())
    if cc == (9, 0):
        hopper = b200c.default_schedule(D, target="sm90a")
        b200 = b200c.default_schedule(D, target="sm100a")
        assert b200.sw_exp2_per16 > 0, "the B200 preset is meant to cover the software exp2 columns"
        return [("sm90a", hopper, "sm90a preset"),
                ("sm90a", hopper.replace(sw_exp2_per16=2), "sm90a with software exp2"),
                ("emulate", b200, "sm100a preset (emulated)")]
    if cc[0] == 10:
        return [("sm100a", b200c.default_schedule(D, target="sm100a"), "sm100a preset")]
    pytest.skip(f"{torch.cuda.get_device_name()} has compute capability {cc[0]}.{cc[1]}; b200c's kernels run "
                f"on 9.0 (sm90a, emulate) and 10.x (sm100a)")


def _special_table(torch):
    """(H, S_q, S_kv) FP32 values added to the scores, and {row: what} of the rows they change."""
    t = torch.zeros(H, S_Q, S_KV)
    rows = {}

    def put(h, r, what, cols, value):
        t[h, r, cols] = value
        rows[(h, r)] = what

    put(0, 3, "one NaN score", 10, NAN)
    put(0, 4, "one NaN score in K/V tile 1", 200, NAN)
    put(0, 5, "one +inf score", 200, INF)
    put(1, 7, "two +inf scores", [0, 300], INF)
    put(0, 9, "every score -inf (hidden row)", slice(None), -INF)
    put(0, 11, "every score -inf but one", slice(None), -INF)
    t[0, 11, 150] = 0.0
    put(0, 13, "-inf on every other key", slice(0, None, 2), -INF)
    put(0, 15, "one logit +1e30", 77, 1e30)
    put(1, 15, "one logit -1e30", 77, -1e30)
    put(0, 19, "every logit -1e30", slice(None), -1e30)
    put(0, 21, "every logit +1e30", slice(None), 1e30)
    put(0, 23, "+1e30 and a NaN", 5, 1e30)
    t[0, 23, 260] = NAN
    put(1, 25, "-inf everywhere but a NaN", slice(None), -INF)
    t[1, 25, 40] = NAN
    put(1, 27, "+inf and -inf", 30, INF)
    t[1, 27, 31] = -INF
    put(0, 130, "NaN in the first row of Q tile 1", 0, NAN)
    put(0, 300, "NaN in the partial last K/V tile", 332, NAN)
    put(1, 301, "+inf in the partial last K/V tile", 330, INF)
    put(1, 302, "hidden row in the last Q tile", slice(None), -INF)
    put(1, 332, "every score -inf but the last key", slice(None), -INF)
    t[1, 332, 332] = 3.0
    return t.to(DEV), rows


def _reference(torch, q, k, v, scale, table):
    """(out, lse, lowp) in FP32 for logical (B, H, S, D) inputs, scores + table (see the module docstring)."""
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if table is not None:
        s = s + table
    hidden = (s == -INF).all(-1, keepdim=True)
    p = torch.softmax(s, dim=-1)
    p = torch.where(hidden, torch.zeros_like(p), p)
    lse = torch.logsumexp(s, dim=-1)
    vv = v.float()
    # lowp: what a BF16 kernel rounds, P before PV and O on the way out (as FlashAttention's BF16 reference);
    # O's rounding matters at V of 1e4 (a BF16 ulp of 32 near 5000: measured 16.7 on the emulated sm100a preset
    # against 2 x 8.0 of P's rounding alone)
    return p @ vv, lse, (p.bfloat16().float() @ vv).bfloat16().float()


def _check(torch, out, lse, ref, ref_lse, lowp, what, rows=None):
    o = out.float()
    nan_ref = torch.isnan(ref).any(-1)
    nan_out = torch.isnan(o).any(-1)
    assert torch.equal(nan_out, nan_ref), (
        f"{what}: NaN rows differ: kernel {nan_out.nonzero().tolist()}, reference {nan_ref.nonzero().tolist()}")
    assert bool(torch.isnan(o[nan_ref]).all()), f"{what}: a NaN row is only partly NaN"
    assert not bool(torch.isfinite(lse[nan_ref]).any()), f"{what}: a NaN row has a finite LSE"
    hidden = ref_lse == -INF
    assert bool((o[hidden] == 0).all()), f"{what}: rows with every score -inf are not 0"
    assert bool((lse[hidden] == -INF).all()), f"{what}: rows with every score -inf do not have LSE -inf"
    ok = ~nan_ref & ~hidden
    tol = 2 * float((lowp - ref).abs()[ok].max()) + 1e-3
    err = (o - ref).abs().amax(-1)
    worst = err.masked_fill(~ok, 0).argmax()
    idx = [int(i) for i in torch.unravel_index(worst, err.shape)]
    assert float(err[ok].max()) <= tol, (f"{what}: max|out - ref| = {float(err[ok].max()):.3e} > {tol:.3e} at "
                                         f"(b, h, row) = {idx}{' (' + rows[(idx[1], idx[2])] + ')' if rows and (idx[1], idx[2]) in rows else ''}")
    fin = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), fin), f"{what}: finite LSE entries differ"
    e = ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1))[fin]
    assert float(e.max()) <= 1e-3, f"{what}: max relative |lse - ref| = {float(e.max()):.3e}"


def _inputs(torch, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return [torch.randn(B, H, n, D, device=DEV, generator=g).bfloat16() for n in (S_Q, S_KV, S_KV)]


def test_special_scores_from_a_score_mod(torch):
    """NaN, +-inf and +-1e30 scores put in by a score_mod (see _special_table), every target."""
    import b200c

    table, rows = _special_table(torch)
    assert torch.isnan(table).any() and torch.isinf(table).any()

    def special(score, b, h, q_idx, kv_idx):
        return score + table[h, q_idx, kv_idx]

    q, k, v = _inputs(torch)
    scale = D ** -0.5
    ref, ref_lse, lowp = _reference(torch, q, k, v, scale, table)
    # the reference itself has what the table asks for
    assert bool(torch.isnan(ref[0, 0, 3]).all()) and bool(torch.isnan(ref[0, 0, 5]).all())
    assert float(ref_lse[0, 0, 9]) == -INF and bool((ref[0, 0, 9] == 0).all())  # where torch's softmax says NaN
    for target, schedule, what in _targets(torch):
        out, lse = b200c.attention(q, k, v, schedule=schedule, target=target, score_mod=special, return_lse=True)
        _check(torch, out, lse, ref, ref_lse, lowp, f"{what}: special scores", rows)


def test_large_magnitude_inputs(torch):
    """Scores near 1e21 (a key with a 2^70 entry: one-hot rows toward it, or weight 0 for it), products that
    overflow FP32 to +inf (NaN rows, as in FP32 torch) and to -inf (weight 0), and V of magnitude 1e4."""
    import b200c

    q, k, v = _inputs(torch, seed=1)
    k[0, 0, 50, 0] = 2.0 ** 70            # scores q[., 0] * 2^70: about +-1e21
    k[0, 1, 60, 0] = 2.0 ** 70
    q[0, 1, 10] = 0
    q[0, 1, 10, 0] = 2.0 ** 60           # q . k[60] = 2^130: +inf in FP32 -> NaN row
    q[0, 1, 11] = 0
    q[0, 1, 11, 0] = -(2.0 ** 60)        # -inf for key 60 only: that key gets weight 0
    q[0, 1, 11, 1] = 1.0
    v = (v.float() * 1e4).bfloat16()
    scale = D ** -0.5
    ref, ref_lse, lowp = _reference(torch, q, k, v, scale, None)
    assert bool(torch.isnan(ref[0, 1, 10]).all()) and not bool(torch.isnan(ref[0, 1, 11]).any())
    for target, schedule, what in _targets(torch):
        out, lse = b200c.attention(q, k, v, schedule=schedule, target=target, return_lse=True)
        _check(torch, out, lse, ref, ref_lse, lowp, f"{what}: large inputs")

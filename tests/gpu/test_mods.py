"""Programmable attention on the GPU: score_mod / mask_mod / block masks / sinks / window_size / SDPA
attn_mask, on both targets (sm90a natively with the Hopper presets; sm100a through the emulation
target with the blog's stage-18 schedule), against FP32 attention computed here from the user's
own functions evaluated with torch ops on the whole score matrix (not from b200c's trace), with the
FlashAttention tolerance rule: max|out - ref| <= 2 max|lowp - ref| + 1e-3, where ``lowp`` is the same
attention with P rounded to BF16 before PV (what the kernels do), and |lse - ref| <= 1e-3.
Covers every b200c.mods recipe, odd lengths, fully masked rows (O = 0, LSE = -inf; with sinks
O = 0, LSE = the sink) and NaN produced by a mod (the row is NaN, as in FP32 attention)."""
import pytest

pytestmark = pytest.mark.gpu

LSE_TOL = 1e-3


@pytest.fixture(scope="module")
def torch():
    import torch

    if PREBUILD:  # scripts/prebuild_mods.py calls the test functions itself; under pytest it checks nothing
        pytest.skip("prebuild replay, nothing checked")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.set_float32_matmul_precision("highest")
    return torch


def supported_targets(torch) -> list:
    """The targets whose kernels run on this GPU: ["sm90a", "emulate"] at compute capability 9.0,
    ["sm100a"] at 10.x; any other GPU skips the test (pytest.skip) with the reason, never an empty
    list that would let a test pass without a check."""
    cc = tuple(torch.cuda.get_device_capability())
    if cc == (9, 0):
        return ["sm90a", "emulate"]
    if cc[0] == 10:
        return ["sm100a"]
    pytest.skip(f"{torch.cuda.get_device_name()} has compute capability {cc[0]}.{cc[1]}; b200c's kernels run "
                f"on 9.0 (sm90a, emulate) and 10.x (sm100a)")


@pytest.fixture(scope="module")
def targets(torch):
    """This GPU's targets (scripts/prebuild_mods.py passes the replayed one itself)."""
    return supported_targets(torch)


def _schedule(target, d):
    import b200c

    return b200c.default_schedule(d, target="sm90a" if target == "sm90a" else "sm100a")


def reference(torch, q, k, v, scale, causal=False, score_mod=None, mask_mod=None, sinks=None):
    """(out fp32, lse fp32, lowp out fp32, visible rows (B, H, S_q) bool) of logical (B, H, S, D) inputs."""
    if PREBUILD:
        return None, None, None, None
    B, H, s_q, D = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    g = H // h_kv
    kk = k.repeat_interleave(g, dim=1).float()
    vv = v.repeat_interleave(g, dim=1).float()
    s = (q.float() @ kk.transpose(-1, -2)) * scale
    dev = q.device
    b = torch.arange(B, device=dev)[:, None, None, None]
    h = torch.arange(H, device=dev)[None, :, None, None]
    qi = torch.arange(s_q, device=dev)[None, None, :, None]
    ki = torch.arange(s_kv, device=dev)[None, None, None, :]
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki).float().expand(B, H, s_q, s_kv)
    keep = torch.ones(B, H, s_q, s_kv, dtype=torch.bool, device=dev)
    if causal:
        keep &= ki <= qi + (s_kv - s_q)
    if mask_mod is not None:
        keep &= mask_mod(b, h, qi, ki).expand(B, H, s_q, s_kv)
    s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float()[None, :, None, None].expand(B, H, s_q, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m) | torch.isnan(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    den = p.sum(-1, keepdim=True)
    if sinks is not None:
        p = p[..., :-1]
    p = torch.where(den == 0, torch.zeros_like(p), p / torch.where(den == 0, torch.ones_like(den), den))  # NaN stays
    out = p @ vv
    lowp = p.bfloat16().float() @ vv
    visible = keep.any(-1) if sinks is None else torch.ones(B, H, s_q, dtype=torch.bool, device=dev)
    if sinks is None:
        lse = torch.where(visible, lse, torch.full_like(lse, float("-inf")))
    return out, lse, lowp, keep.any(-1)


def check(torch, out, lse, ref, ref_lse, lowp, sees_keys, what):
    if PREBUILD:
        return
    o = out.float()
    nan_ref = torch.isnan(ref).any(-1)
    assert torch.equal(torch.isnan(o).any(-1), nan_ref), f"{what}: NaN rows differ"
    hidden = ~sees_keys
    assert bool((o[hidden] == 0).all()), f"{what}: rows that see no key are not 0"
    ok = sees_keys & ~nan_ref
    tol = 2 * float((lowp - ref).abs()[ok].max()) + 1e-3 if bool(ok.any()) else 0
    err = float((o - ref).abs()[ok].max()) if bool(ok.any()) else 0.0
    assert err <= tol, f"{what}: max|out - ref| = {err:.3e} > {tol:.3e}"
    if lse is not None:
        fin = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse), fin), f"{what}: finite LSE entries differ"
        assert bool((lse[~fin & ~torch.isnan(ref_lse)] == ref_lse[~fin & ~torch.isnan(ref_lse)]).all()), what
        if bool(fin.any()):
            e = float((lse - ref_lse).abs()[fin].max())
            assert e <= LSE_TOL, f"{what}: max|lse - ref| = {e:.3e}"


DEV = "cuda"


def _inputs(torch, B, H, H_kv, s_q, s_kv, D, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(B, H, s_q, D, device=DEV, generator=g).bfloat16()
    k = torch.randn(B, H_kv, s_kv, D, device=DEV, generator=g).bfloat16()
    v = torch.randn(B, H_kv, s_kv, D, device=DEV, generator=g).bfloat16()
    return q, k, v


PREBUILD = False  # True only in scripts/prebuild_mods.py: the calls replayed on CPU under the stand-in driver,
# nothing checked (reference and check return at once); the torch fixture skips any pytest run with it set


def _case(torch, target, *, B=2, H=4, H_kv=2, s_q=333, s_kv=333, D=128, causal=False, score_mod=None,
          mask_mod=None, sinks=None, window_size=None, ref_mask=None, what="", builtin=False):
    """One call checked against FP32 attention; ``builtin``: schedule=None (the target's built-in choice
    for these mods) instead of the target's dense preset."""
    import b200c

    q, k, v = _inputs(torch, B, H, H_kv, s_q, s_kv, D)
    scale = D ** -0.5
    out, lse = b200c.attention(q, k, v, schedule=None if builtin else _schedule(target, D), target=target, causal=causal,
                               score_mod=score_mod, mask_mod=mask_mod, sinks=sinks, window_size=window_size,
                               return_lse=True)
    if PREBUILD:
        return
    ref, ref_lse, lowp, sees = reference(torch, q, k, v, scale, causal, score_mod, ref_mask or mask_mod, sinks)
    check(torch, out, lse, ref, ref_lse, lowp, sees, f"{target} {what}")


def test_recipes_both_targets(torch, targets):
    import b200c.mods as mods

    for target in targets:
        slopes = mods.alibi_slopes(4).to(DEV)
        docs = torch.tensor([0] * 100 + [1] * 150 + [2] * 83, device=DEV, dtype=torch.int32)
        lengths = torch.tensor([333, 170], device=DEV, dtype=torch.int32)
        _case(torch, target, score_mod=mods.softcap(30.0), what="softcap")
        _case(torch, target, score_mod=mods.softcap(20.0), causal=True, what="softcap causal")
        _case(torch, target, score_mod=mods.alibi(slopes), causal=True, what="alibi causal GQA")
        _case(torch, target, mask_mod=mods.sliding_window(64), what="sliding window")
        _case(torch, target, mask_mod=mods.document(docs), what="document")
        _case(torch, target, mask_mod=mods.prefix_lm(40), what="prefix-lm")
        _case(torch, target, mask_mod=mods.key_padding(lengths), causal=True, what="key padding causal")
        _case(torch, target, s_q=200, s_kv=517, score_mod=mods.alibi(slopes), mask_mod=mods.key_padding(lengths),
              what="score_mod and mask_mod, S_q != S_kv")


def test_key_bias_tables_by_stride(torch, targets):
    """A score_mod reading a captured table by key: with a key stride of 1 the kernel reads one address
    per K/V tile plus constant offsets (CapturedTensor.unit_dims), with another stride one address per key;
    both against FP32 on both targets, with the index offset by a constant, -inf entries hiding whole rows'
    worth of keys, causal, S_q != S_kv and partial last tiles."""
    for target in targets:
        g = torch.Generator(device=DEV).manual_seed(7)
        unit = torch.randn(2, 4, 530, device=DEV, generator=g)  # (B, H, S_kv + 13), key stride 1
        unit[1, :, 300:] = float("-inf")
        strided = unit.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, key stride 1 -> 4
        for name, table in (("unit", unit), ("strided", strided)):
            def per_key(score, b, h, q_idx, kv_idx, table=table):
                return score + table[b, h, kv_idx + 13]

            _case(torch, target, s_q=300, s_kv=517, score_mod=per_key, what=f"per-key table, {name} stride")
            _case(torch, target, s_q=517, s_kv=517, score_mod=per_key, causal=True,
                  what=f"per-key table, {name} stride, causal")


def test_additive_biases_split_per_row(torch, targets):
    """Score_mods that are score + bias with a bias linear in kv_idx (ALiBi) or constant over a row (a
    per-head or per-row bias): on sm90a the whole tiles add slope * k per score and hand the rest to the
    softmax as a per-row offset (softmax_tile_biased). -inf and large biases, rows that a -inf bias hides
    entirely (O = 0, LSE = -inf), a slope that differs per row, sinks, causal with S_q != S_kv, head dims
    64 and 256."""
    import b200c.mods as mods

    for target in targets:
        slopes = mods.alibi_slopes(4).to(DEV)
        head_bias = torch.tensor([0.5, -3.0, 40.0, -40.0], device=DEV)
        row_bias = torch.randn(777, device=DEV) * 8
        row_bias[::5] = float("-inf")
        row_bias[3] = 1e4

        def per_head(score, b, h, q_idx, kv_idx):
            return score - head_bias[h] * 2.0

        def per_row(score, b, h, q_idx, kv_idx):
            return row_bias[q_idx] + score

        def linear(score, b, h, q_idx, kv_idx):  # two terms: one linear in kv_idx, one per head
            return score + (q_idx - kv_idx) * 0.01 + head_bias[h]

        def wide(score, b, h, q_idx, kv_idx):  # |q_idx - 2 kv_idx| may pass 2^22: not split, one FMA per score
            return score + (q_idx - 2 * kv_idx) * 0.01 - head_bias[h]

        row_slope = torch.rand(777, device=DEV) * 0.5

        def slope_per_row(score, b, h, q_idx, kv_idx):  # the thread's two rows (8 apart) have different slopes
            return score + (kv_idx - q_idx) * row_slope[q_idx]

        _case(torch, target, score_mod=per_head, what="per-head bias")
        _case(torch, target, s_q=777, s_kv=500, score_mod=per_row, causal=True, what="per-row bias with -inf rows")
        _case(torch, target, s_q=300, s_kv=777, score_mod=linear, causal=True, what="linear in kv_idx and q_idx")
        _case(torch, target, s_q=300, s_kv=777, score_mod=wide, what="a bias not split")
        _case(torch, target, s_q=300, s_kv=777, score_mod=slope_per_row, causal=True, what="a slope per row")
        _case(torch, target, score_mod=mods.alibi(slopes), sinks=head_bias, what="alibi with sinks")
        _case(torch, target, score_mod=mods.alibi(slopes), causal=True, builtin=True, what="alibi, built-in schedule")
        _case(torch, target, score_mod=wide, builtin=True, what="a bias not split, built-in schedule")
        for d in (64, 256):
            _case(torch, target, s_q=400, s_kv=613, D=d, score_mod=mods.alibi(slopes), what=f"alibi D={d}")


def test_window_size_bottom_right(torch, targets):
    for target in targets:
        for s_q, s_kv, ws in ((300, 300, (100, 0)), (150, 421, (64, 16)), (421, 150, (-1, 0)), (257, 257, (0, -1))):
            off = s_kv - s_q
            lo, hi = ws

            def ref_mask(b, h, qi, ki, lo=lo, hi=hi, off=off):
                m = torch.ones_like(ki - qi, dtype=torch.bool)
                if lo >= 0:
                    m = m & (ki - qi >= off - lo)
                if hi >= 0:
                    m = m & (ki - qi <= off + hi)
                return m

            _case(torch, target, s_q=s_q, s_kv=s_kv, window_size=ws, ref_mask=ref_mask, what=f"window {ws} {s_q}x{s_kv}")


def test_fully_masked_rows_and_sinks(torch, targets):
    import b200c.mods as mods

    def half_rows(b, h, q_idx, kv_idx):  # rows q_idx % 3 == 1 see nothing
        return (q_idx % 3) != 1

    sinks = torch.tensor([0.5, -1.0, 2.0, 8.0], device=DEV)
    for target in targets:
        _case(torch, target, mask_mod=half_rows, what="fully masked rows")
        _case(torch, target, sinks=sinks, what="sinks")
        _case(torch, target, sinks=sinks, mask_mod=half_rows, causal=True, what="sinks, masked rows")
        _case(torch, target, sinks=sinks, score_mod=mods.softcap(30.0), what="sinks with softcap")


def test_nan_and_inf_from_a_mod(torch, targets):
    def nan_on_diagonal(score, b, h, q_idx, kv_idx):
        return torch.where((q_idx == kv_idx) & (q_idx % 7 == 0), score * float("nan"), score)

    def neg_inf_first_keys(score, b, h, q_idx, kv_idx):
        return torch.where(kv_idx < 5, torch.full_like(score, float("-inf")), score)

    for target in targets:
        _case(torch, target, score_mod=nan_on_diagonal, what="NaN from score_mod")
        _case(torch, target, score_mod=neg_inf_first_keys, s_q=100, s_kv=3, what="-inf from score_mod (every key)")
        _case(torch, target, score_mod=neg_inf_first_keys, what="-inf from score_mod")


def test_head_dims_and_block_sparsity(torch, targets):
    import b200c
    import b200c.mods as mods

    for target in targets:
        for d in (64, 256):
            _case(torch, target, D=d, s_q=129, s_kv=300, score_mod=mods.softcap(30.0),
                  mask_mod=mods.sliding_window(50, 10), what=f"D={d}")
    # a document mask whose documents each fit in a few K/V tiles: most tiles are empty and skipped
    docs = (torch.arange(4096, device=DEV) // 512).int()
    q, k, v = _inputs(torch, 1, 2, 2, 4096, 4096, 128)
    target = targets[0]
    out = b200c.attention(q, k, v, schedule=_schedule(target, 128), target=target, mask_mod=mods.document(docs))
    ref, _, lowp, sees = reference(torch, q, k, v, 128 ** -0.5, mask_mod=mods.document(docs))
    check(torch, out, None, ref, None, lowp, sees, "document 4096")


def test_varlen(torch, targets):
    """attention_varlen with mods: b is the sequence, q_idx / kv_idx positions within it (an empty query
    sequence, one shorter than a tile, S_q != S_kv per sequence)."""
    import b200c
    import b200c.mods as mods

    lq, lk = [70, 0, 300, 5], [90, 40, 300, 200]
    H, H_kv, D = 4, 2, 128
    cq = torch.tensor([0] + list(__import__("itertools").accumulate(lq)), device=DEV, dtype=torch.int32)
    ck = torch.tensor([0] + list(__import__("itertools").accumulate(lk)), device=DEV, dtype=torch.int32)
    g = torch.Generator(device=DEV).manual_seed(3)
    q = torch.randn(sum(lq), H, D, device=DEV, generator=g).bfloat16()
    k = torch.randn(sum(lk), H_kv, D, device=DEV, generator=g).bfloat16()
    v = torch.randn(sum(lk), H_kv, D, device=DEV, generator=g).bfloat16()
    for target in targets:
        for what, kw in (("softcap", dict(score_mod=mods.softcap(30.0))),
                         ("sliding window", dict(mask_mod=mods.sliding_window(64))),
                         ("window_size", dict(window_size=(32, 8))),
                         ("softcap causal sinks", dict(score_mod=mods.softcap(30.0), causal=True,
                                                       sinks=torch.tensor([1.0, 0.0, -1.0, 3.0], device=DEV)))):
            out, lse = b200c.attention_varlen(q, k, v, cq, ck, max(lq), max(lk), schedule=_schedule(target, D),
                                              target=target, return_lse=True, **kw)
            if PREBUILD:
                continue
            for i, (a, b) in enumerate(zip(lq, lk)):
                if a == 0:
                    continue
                qs = q[int(cq[i]):int(cq[i + 1])].transpose(0, 1)[None]
                ks = k[int(ck[i]):int(ck[i + 1])].transpose(0, 1)[None]
                vs = v[int(ck[i]):int(ck[i + 1])].transpose(0, 1)[None]
                ref_mask = kw.get("mask_mod")
                if "window_size" in kw:
                    off = b - a

                    def ref_mask(bb, hh, qi, ki, off=off):
                        return (ki - qi >= off - 32) & (ki - qi <= off + 8)
                ref, ref_lse, lowp, sees = reference(torch, qs, ks, vs, D ** -0.5, kw.get("causal", False),
                                                     kw.get("score_mod"), ref_mask, kw.get("sinks"))
                o = out[int(cq[i]):int(cq[i + 1])].transpose(0, 1)[None]
                ls = lse[:, int(cq[i]):int(cq[i + 1])][None]
                check(torch, o, ls, ref, ref_lse, lowp, sees, f"{target} varlen {what} sequence {i}")


def test_new_values_do_not_recompile_and_equal_functions_share_a_kernel(torch, targets):
    import b200c
    import b200c.mods as mods
    from b200c.runtime import op

    target = targets[0]
    q, k, v = _inputs(torch, 2, 4, 4, 300, 300, 128)
    sched = _schedule(target, 128)
    n0 = None
    for lens in ([300, 10], [1, 299], [150, 150]):
        lengths = torch.tensor(lens, device=DEV, dtype=torch.int32)
        out = b200c.attention(q, k, v, schedule=sched, target=target, mask_mod=mods.key_padding(lengths))
        ref, _, lowp, sees = reference(torch, q, k, v, 128 ** -0.5, mask_mod=mods.key_padding(lengths))
        check(torch, out, None, ref, None, lowp, sees, f"key padding {lens}")
        n0 = len(op._kernels) if n0 is None else n0
        assert len(op._kernels) == n0, "new captured values loaded a new kernel"

    def softcap_a(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / 25.0) * 25.0

    def softcap_b(s, bb, hh, qq, kk):  # the same function written again
        return torch.tanh(s / 25.0) * 25.0

    b200c.attention(q, k, v, schedule=sched, target=target, score_mod=softcap_a)
    n1 = len(op._kernels)
    b200c.attention(q, k, v, schedule=sched, target=target, score_mod=softcap_b)
    assert len(op._kernels) == n1


def test_sdpa_attn_mask(torch, targets):
    import warnings

    import torch.nn.functional as F

    import b200c
    from b200c.runtime import sdpa

    B, H, s_q, s_kv, D = 2, 4, 300, 260, 128
    q, k, v = _inputs(torch, B, H, H, s_q, s_kv, D)
    lengths = torch.tensor([260, 100], device=DEV)
    pad = torch.arange(s_kv, device=DEV)[None, :] < lengths[:, None]  # (B, S_kv)
    masks = {
        "bool key padding (B,1,1,S)": pad[:, None, None, :],
        "additive key padding (B,1,1,S)": torch.zeros(B, 1, 1, s_kv, device=DEV, dtype=torch.bfloat16).masked_fill(
            ~pad[:, None, None, :], float("-inf")),
        "additive bias (B,H,1,S)": torch.randn(B, H, 1, s_kv, device=DEV).bfloat16(),
        "bool full (B,H,S_q,S)": torch.rand(B, H, s_q, s_kv, device=DEV) > 0.3,
        "additive full (S_q,S)": torch.randn(s_q, s_kv, device=DEV).bfloat16(),
        "bool one element (1,1,1,1)": torch.ones(1, 1, 1, 1, device=DEV, dtype=torch.bool),
        "additive one element (1,)": torch.full((1,), 2.5, device=DEV).bfloat16(),
        # a key stride of 2: the general loads (a contiguous mask takes the unit-stride ones)
        "additive key padding, key stride 2": torch.zeros(B, s_kv, 2, device=DEV, dtype=torch.bfloat16).masked_fill(
            ~pad[:, :, None], float("-inf"))[:, None, None, :, 0],
        # a per-row bias is a light mod (the dense tiles, the bias handed to the softmax per row); -inf rows
        "additive per row (B,1,S_q,1), -inf rows": torch.randn(B, 1, s_q, 1, device=DEV).bfloat16().index_fill(
            2, torch.arange(0, s_q, 7, device=DEV), float("-inf")),
        # sequence 1 sees no key: its rows give exactly 0
        "bool key padding, an empty sequence": (pad & (torch.arange(B, device=DEV) == 0)[:, None])[:, None, None, :],
        "additive key padding, an empty sequence": torch.zeros(B, 1, 1, s_kv, device=DEV, dtype=torch.bfloat16
                                                               ).index_fill(0, torch.tensor([1], device=DEV),
                                                                            float("-inf")),
    }
    for what, m in masks.items():
        sdpa.calls.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error", b200c.FallbackWarning)
            out = b200c.scaled_dot_product_attention(q, k, v, attn_mask=m)
            with torch.inference_mode():  # a mask made in a model's inference-mode forward: no version counter
                out_inf = b200c.scaled_dot_product_attention(q, k, v, attn_mask=m.clone())
        assert sdpa.calls["b200c"] == 2, (what, dict(sdpa.calls))
        if PREBUILD:
            continue
        assert torch.equal(out, out_inf), what
        full = m.expand(B, H, s_q, s_kv).contiguous()  # torch's kernels want a bias with a contiguous last dim
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=full if m.dtype == torch.bool
                                             else full.float())
        lowp = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
        hidden = ~full.any(-1) if m.dtype == torch.bool else (full == float("-inf")).all(-1)  # (B, H, S_q)
        assert bool((out[hidden] == 0).all()), f"{what}: rows that see no key are not 0"
        rows = ~torch.isnan(ref).any(-1) & ~hidden
        tol = 2 * float((lowp.float() - ref)[rows].abs().max()) + 1e-3
        err = float((out.float() - ref)[rows].abs().max())
        assert err <= tol, (what, err, tol)


def test_calls_do_not_wait_for_the_device(torch, targets):
    """A call with mods only enqueues work, its block mask included (torch's sync debug mode raises on a
    stream or device sync): a sync per call would stall the host in every masked attention call of a
    model. New mask values the second time (the block mask is computed again), after a first call that
    loads the kernels."""
    import b200c
    import b200c.mods as mods

    q, k, v = _inputs(torch, 2, 4, 4, 300, 300, 128)
    slopes = mods.alibi_slopes(4).to(DEV)

    def inputs(seed):
        return (torch.tensor([300 - seed, 170 + seed], device=DEV, dtype=torch.int32),
                ((torch.arange(300, device=DEV) + seed) // 100).int(),
                torch.randn(2, 1, 1, 300, device=DEV).bfloat16())

    for target in targets:
        sched = _schedule(target, 128)

        def calls(lengths, docs, bias, seed):
            b200c.attention(q, k, v, schedule=sched, target=target, mask_mod=mods.key_padding(lengths))
            b200c.attention(q, k, v, schedule=sched, target=target, mask_mod=mods.document(docs), causal=True)
            b200c.attention(q, k, v, schedule=sched, target=target, window_size=(64 + seed, 0))
            b200c.attention(q, k, v, schedule=sched, target=target, score_mod=mods.alibi(slopes))
            if target == "sm90a":
                b200c.scaled_dot_product_attention(q, k, v, attn_mask=bias)

        calls(*inputs(0), 0)
        if PREBUILD:
            continue
        second = inputs(1)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            calls(*second, 1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()

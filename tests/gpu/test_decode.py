"""Split-KV and the KV-cache entry point on the GPU, against FP32 attention with FlashAttention's
tolerance rule (scripts/real_inputs_sweep.py's Check): split counts 1-16 on the native Hopper kernels
(sm90a) and the sm100a kernels (emulated on Hopper, native on a B200), S_kv not a multiple of the tile
or the page, causal with S_q 1 and 4, GQA, the LSE, varlen, mods, empty sequences and cache lengths 0,
contiguous and paged caches (pages 16 and 256), CUDA-graph replay with new lengths."""
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

pytestmark = pytest.mark.gpu


def _targets():
    import torch

    cap = torch.cuda.get_device_capability()
    if cap == (9, 0):
        return ["sm90a", "emulate"]
    if cap[0] == 10:
        return ["sm100a"]
    pytest.skip(f"b200c has no target for compute capability {cap[0]}.{cap[1]} (sm90a needs 9.0, sm100a 10.x)")


@pytest.fixture(scope="module")
def env():
    import torch

    import real_inputs_sweep as sweep

    targets = _targets()
    torch.set_float32_matmul_precision("highest")
    return sweep, targets


def _schedule(target, d, splits):
    import b200c
    from b200c.dsl.split_build import split_build

    base = b200c.default_schedule(d, target="sm90a" if target == "sm90a" else "sm100a")
    return base.replace(kv_splits=1) if splits == 1 else split_build(base).replace(kv_splits=splits)


def _check(sweep, out, lse, q, k, v, causal, scale=None):
    """out, lse (B, H, S_q, D) / (B, H, S_q) against the FP32 reference; returns the verdict's failures."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    ref, ref_lse, torch_bf16, visible = sweep.reference(q, k, v, scale, causal)
    chk = sweep.Check()
    chk.add(out, lse, ref, ref_lse, torch_bf16, visible)
    status, tol, fails = chk.verdict()
    return fails


def _rand(*shape, scale=1.0, seed=0):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to("cuda", torch.bfloat16)


@pytest.mark.parametrize("splits", [1, 2, 3, 5, 16, 40])  # 40: the combine reloads the LSE of splits 32 and up
def test_split_counts_match_fp32(env, splits):
    import b200c

    sweep, targets = env
    bad = []
    for target in targets:
        for (b, h, h_kv, s_q, s_kv, causal, d) in [(1, 32, 8, 1, 5000, False, 128), (2, 8, 8, 4, 3001, True, 64),
                                                   (1, 4, 1, 4, 777, True, 256), (2, 16, 2, 1, 130, False, 128),
                                                   (1, 8, 2, 1, 9000, False, 128)]:  # 52 tiles of 176 keys
            q = _rand(b, h, s_q, d, scale=3.0, seed=1)
            k, v = _rand(b, h_kv, s_kv, d, seed=2), _rand(b, h_kv, s_kv, d, seed=3)
            out, lse = b200c.attention(q, k, v, schedule=_schedule(target, d, splits), causal=causal,
                                       return_lse=True, target=target)
            fails = _check(sweep, out, lse, q, k, v, causal)
            if fails:
                bad.append((target, b, h, h_kv, s_q, s_kv, causal, d, fails))
    assert not bad, bad


def test_split_count_does_not_change_the_result(env):
    """Beyond FP32 rounding (then one BF16 rounding), a row's result is the same at every split count."""
    import b200c
    import torch

    _, targets = env
    for target in targets:
        q = _rand(1, 8, 1, 128, scale=3.0, seed=4)
        k, v = _rand(1, 8, 9000, 128, seed=5), _rand(1, 8, 9000, 128, seed=6)
        outs = [b200c.attention(q, k, v, schedule=_schedule(target, 128, n), return_lse=True, target=target)
                for n in (1, 2, 7, 16)]
        for o, l in outs[1:]:
            assert (o.float() - outs[0][0].float()).abs().max() <= 2 * 2 ** -8 * outs[0][0].float().abs().max()
            # the kernels' approximate exp2/log2 units: about 1e-6 of the LSE (13.4 +- 1.5e-5 measured at 16 splits)
            assert ((l - outs[0][1]).abs() <= 4e-6 * outs[0][1].abs().clamp_min(1.0)).all()


def test_default_decode_splits_and_matches(env):
    """schedule=None: a decoding step's shape runs the split-KV build by itself (two launches)."""
    import b200c

    sweep, targets = env
    q = _rand(1, 32, 1, 128, scale=3.0, seed=7)
    k, v = _rand(1, 8, 32768, 128, seed=8), _rand(1, 8, 32768, 128, seed=9)
    out, lse = b200c.attention(q, k, v, return_lse=True)
    assert not _check(sweep, out, lse, q, k, v, False)


def test_combine_kernel_merges_as_the_host_model(env, monkeypatch):
    """The combine kernel against b200c.codegen.split_model.merge of the very partials the split kernels
    wrote (the workspace kept from the call): the merged O within one BF16 rounding (plus FP32 sums),
    the LSE within FP32 rounding, rows of empty splits included (4 query rows, causal, 9 splits of a
    short sequence: the last splits of the first rows see no key)."""
    import b200c
    import torch

    from b200c.codegen.split_model import merge
    from b200c.runtime.split_kv import SplitLaunch

    kept = []
    workspace = SplitLaunch.workspace

    def keep(self, empty):
        parts = workspace(self, empty)
        kept.append(parts)
        return parts

    monkeypatch.setattr(SplitLaunch, "workspace", keep)
    _, targets = env
    for target in targets:
        for (b, h, h_kv, s_q, s_kv, causal, d, n) in [(2, 8, 8, 4, 3001, True, 128, 5), (1, 32, 8, 1, 9000, False, 64, 16),
                                                      (1, 4, 4, 4, 1200, True, 256, 9)]:
            kept.clear()
            q = _rand(b, h, s_q, d, scale=3.0, seed=21)
            k, v = _rand(b, h_kv, s_kv, d, seed=22), _rand(b, h_kv, s_kv, d, seed=23)
            out, lse = b200c.attention(q, k, v, schedule=_schedule(target, d, n), causal=causal, return_lse=True,
                                       target=target)
            torch.cuda.synchronize()
            assert len(kept) == 1, (target, "one split launch expected", len(kept))
            o_part, lse_part = kept[0]
            assert o_part.shape == (n, b * h * s_q, d)  # rows (b, h, s) in order: (b, h_kv, group) at S_q 1
            want, want_lse = merge(o_part.double(), lse_part.double())
            got, got_lse = out.reshape(-1, d).double(), lse.reshape(-1).double()
            assert ((got - want).abs() <= 2 ** -8 * want.abs() + 1e-6 * want.abs().max()).all(), (target, s_q, d)
            assert torch.equal(torch.isinf(got_lse), torch.isinf(want_lse)), (target, s_q, d)
            fin = ~torch.isinf(want_lse)
            assert ((got_lse - want_lse)[fin].abs() <= 1e-5 * want_lse[fin].abs().clamp_min(1.0)).all(), (target, d)
            assert (lse_part == -math.inf).any() or n < 9, "the case meant to hold an empty split has none"


def test_varlen_and_mods_with_splits(env):
    import b200c
    import torch

    sweep, targets = env
    for target in targets:
        lens_k = [0, 2000, 777, 1]
        total = sum(lens_k)
        q = _rand(4, 8, 64, scale=3.0, seed=10)  # one query row per sequence
        k, v = _rand(total, 2, 64, seed=11), _rand(total, 2, 64, seed=12)
        cq = torch.arange(5, dtype=torch.int32, device="cuda")
        ck = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
        out, lse = b200c.attention_varlen(q, k, v, cq, ck, 1, max(lens_k), schedule=_schedule(target, 64, 4),
                                          return_lse=True, target=target)
        for i, n in enumerate(lens_k):
            o = out[i:i + 1].transpose(0, 1)[None]  # (1, H, 1, D)
            ks = k[int(ck[i]):int(ck[i + 1])].transpose(0, 1)[None]
            vs = v[int(ck[i]):int(ck[i + 1])].transpose(0, 1)[None]
            if n == 0:
                assert (o == 0).all() and (lse[:, i] == -math.inf).all()
                continue
            assert not _check(sweep, o, lse[:, i][None, :, None], q[i:i + 1].transpose(0, 1)[None], ks, vs, False)
        # a score_mod and a sliding window with splits: against the reference with the same bias and mask
        qd = _rand(1, 4, 2, 128, scale=2.0, seed=13)
        kd, vd = _rand(1, 4, 3000, 128, seed=14), _rand(1, 4, 3000, 128, seed=15)

        def bias(score, b, h, q_idx, kv_idx):
            return score + 0.001 * (kv_idx - q_idx).float()

        out = b200c.attention(qd, kd, vd, schedule=_schedule(target, 128, 6), score_mod=bias, window_size=(1000, 0),
                              target=target)
        one = b200c.attention(qd, kd, vd, schedule=_schedule(target, 128, 1), score_mod=bias, window_size=(1000, 0),
                              target=target)
        s = (qd.float() @ kd.float().transpose(-1, -2)) * 128 ** -0.5
        r = torch.arange(2, device="cuda")[:, None] + 3000 - 2
        c = torch.arange(3000, device="cuda")[None, :]
        s = s + 0.001 * (c - (r - 3000 + 2)).float()
        s = s.masked_fill((c > r) | (c < r - 1000), -math.inf)
        ref = torch.softmax(s, -1) @ vd.float()
        assert (out.float() - one.float()).abs().max() <= 2 * 2 ** -8 * one.float().abs().max(), target
        assert (out.float() - ref).abs().max() < 4e-3, target


@pytest.mark.parametrize("num_splits", [0, 3])  # 0: the automatic count, one split here (no combine kernel)
@pytest.mark.parametrize("paged", [None, 16, 256])
def test_kvcache_append_lengths_and_pages(env, paged, num_splits):
    import b200c
    import torch

    sweep, targets = env
    for target in targets:
        b, h, h_kv, d, s_max = 3, 16, 4, 128, 1100
        lens = [0, 1000, 37]
        for s_new in (1, 4):
            k_full = _rand(b, s_max, h_kv, d, seed=20)
            v_full = _rand(b, s_max, h_kv, d, seed=21)
            q = _rand(b, s_new, h, d, scale=3.0, seed=22)
            k_new, v_new = _rand(b, s_new, h_kv, d, seed=23), _rand(b, s_new, h_kv, d, seed=24)
            seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
            if paged is None:
                kc, vc, table = k_full.clone(), v_full.clone(), None
            else:
                pages = -(-s_max // paged)
                perm = torch.randperm(b * pages, generator=torch.Generator().manual_seed(0)).to("cuda")
                table = perm.reshape(b, pages).to(torch.int32)
                kc = torch.zeros(b * pages, paged, h_kv, d, dtype=torch.bfloat16, device="cuda")
                vc = torch.zeros_like(kc)
                pad = pages * paged - s_max
                kp = torch.nn.functional.pad(k_full, (0, 0, 0, 0, 0, pad)).reshape(b * pages, paged, h_kv, d)
                vp = torch.nn.functional.pad(v_full, (0, 0, 0, 0, 0, pad)).reshape(b * pages, paged, h_kv, d)
                kc[perm] = kp
                vc[perm] = vp
            out, lse = b200c.attention_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=seqlens, block_table=table,
                                                    causal=True, return_lse=True, target=target,
                                                    num_splits=num_splits)
            for i, n in enumerate(lens):
                ks = torch.cat([k_full[i, :n], k_new[i]]).transpose(0, 1)[None]
                vs = torch.cat([v_full[i, :n], v_new[i]]).transpose(0, 1)[None]
                fails = _check(sweep, out[i:i + 1].transpose(1, 2), lse[i:i + 1], q[i:i + 1].transpose(1, 2), ks, vs,
                               True)
                assert not fails, (target, paged, num_splits, s_new, i, fails)
            if paged is None:  # the new tokens are in the cache
                for i, n in enumerate(lens):
                    assert torch.equal(kc[i, n:n + s_new], k_new[i]) and torch.equal(vc[i, n:n + s_new], v_new[i])


def test_kvcache_cuda_graph_replays_with_new_lengths(env):
    import b200c
    import torch

    sweep, targets = env
    target = targets[0]
    b, h, h_kv, d, s_max = 2, 8, 2, 128, 4096
    kc, vc = _rand(b, s_max, h_kv, d, seed=30), _rand(b, s_max, h_kv, d, seed=31)
    q = _rand(b, 1, h, d, scale=3.0, seed=32)
    seqlens = torch.tensor([100, 200], dtype=torch.int32, device="cuda")
    b200c.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, target=target)  # build + load outside the graph
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pytest.raises(b200c.LaunchError, match="check_inputs=False"):  # the check cannot synchronize here
            b200c.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, target=target)
        out = b200c.attention_with_kvcache(q, kc, vc, cache_seqlens=seqlens, target=target, check_inputs=False)
    for lens in ([100, 200], [4000, 1], [0, 4096]):
        seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
        g.replay()
        torch.cuda.synchronize()
        for i, n in enumerate(lens):
            o = out[i:i + 1].transpose(1, 2)
            if n == 0:
                assert (o == 0).all()
                continue
            ks, vs = kc[i, :n].transpose(0, 1)[None], vc[i, :n].transpose(0, 1)[None]
            assert not _check(sweep, o, None, q[i:i + 1].transpose(1, 2), ks, vs, False), (lens, i)


@pytest.mark.parametrize("paged", [None, 16])
def test_bad_kvcache_inputs_raise_and_the_process_goes_on(env, paged):
    """Issue 49 item 3: a table entry out of range (num_blocks, -1), a negative length, lengths past the
    capacity each raise LaunchError before the append, the caches bit for bit untouched, and a valid call in
    the same process afterwards gives the right result (the CUDA context is alive)."""
    import b200c
    import torch

    sweep, targets = env
    target = targets[0]
    b, h, h_kv, d = 2, 8, 2, 128
    if paged:
        blocks, pages = 16, 8
        kc, vc = _rand(blocks, paged, h_kv, d, seed=40), _rand(blocks, paged, h_kv, d, seed=41)
        good = torch.randperm(blocks, generator=torch.Generator().manual_seed(0))[:b * pages].to(torch.int32)
        good = good.reshape(b, pages).cuda()
    else:
        kc, vc = _rand(b, 128, h_kv, d, seed=40), _rand(b, 128, h_kv, d, seed=41)
        good = None
    q = _rand(b, 1, h, d, scale=3.0, seed=42)
    k_new, v_new = _rand(b, 1, h_kv, d, seed=43), _rand(b, 1, h_kv, d, seed=44)
    lens_ok = torch.tensor([50, 100], dtype=torch.int32, device="cuda")
    bad = [(torch.tensor([50, -3], dtype=torch.int32, device="cuda"), good, r"cache_seqlens\[1\] = -3"),
           (torch.tensor([128, 5], dtype=torch.int32, device="cuda"), good, "more than the cache holds")]
    if paged:
        for value in (blocks, -1):
            t = good.clone()
            t[1, 3] = value  # sequence 1 (101 tokens) uses 7 pages
            bad.append((lens_ok, t, rf"block_table\[1, 3\] = {value} is not a block"))
    before = (kc.clone(), vc.clone())
    for lens, table, want in bad:
        with pytest.raises(b200c.LaunchError, match=want):
            b200c.attention_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lens, block_table=table, target=target)
        torch.cuda.synchronize()
        assert torch.equal(kc, before[0]) and torch.equal(vc, before[1]), want
    out = b200c.attention_with_kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lens_ok, block_table=good, target=target)
    torch.cuda.synchronize()
    for i, n in enumerate((51, 101)):
        if paged:
            rows = torch.cat([torch.arange(int(p) * paged, int(p) * paged + paged) for p in good[i].tolist()])[:n]
            ks, vs = kc.view(-1, h_kv, d)[rows.cuda()], vc.view(-1, h_kv, d)[rows.cuda()]
        else:
            ks, vs = kc[i, :n], vc[i, :n]
        assert torch.equal(ks[n - 1], k_new[i, 0]), "the valid call appended"
        assert not _check(sweep, out[i:i + 1].transpose(1, 2), None, q[i:i + 1].transpose(1, 2),
                          ks.transpose(0, 1)[None], vs.transpose(0, 1)[None], False), (paged, i)

"""Every input kind on the native Hopper kernels (target sm90a, the H200), against FP32 attention with the
FlashAttention tolerance rule (scripts/real_inputs_sweep.py's cases with its Hopper schedules: the presets
for D = 64/128/256, h02 and h01): causal (bottom-right aligned, rows with no key: O = 0, LSE = -inf),
GQA/MQA with packed heads, the LSE, varlen with empty sequences, S_q != S_kv and partial tiles, BSHD and
special values, the SDPA drop-in with no schedule. The whole sweep: ``python scripts/real_inputs_sweep.py
--target sm90a``."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def env():
    import torch

    import real_inputs_sweep as sweep

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90a target needs a compute capability 9.0 GPU")
    torch.set_float32_matmul_precision("highest")
    return sweep, sweep.schedules("sm90a"), sweep.b200c_calls("sm90a")


def _run(env, pred, at_least=1):
    from b200c.runtime import synchronize

    sweep, scheds, calls = env
    cases = [c for c in sweep.make_cases() if pred(c)]
    assert len(cases) >= at_least
    bad = []
    for c in cases:
        row = sweep.run_case(c, scheds, calls, "cuda", synchronize)
        if row["status"] != "PASS":
            bad.append((row["case"], row.get("failures")))
    assert not bad, bad[:4]


def test_causal_and_lengths(env):
    """S_q, S_kv over 1..4095 (partial tiles, S_q > S_kv: rows with no key), causal and not, GQA 1/2/8."""
    _run(env, lambda c: c.group == "lengths" and c.s_q in (1, 63, 129, 1000) and c.s_kv in (1, 64, 257, 4095), 24)


def test_varlen_with_empty_sequences(env):
    _run(env, lambda c: c.group == "varlen", 10)


def test_head_dims_64_and_256(env):
    _run(env, lambda c: c.group == "head_dim", 16)


def test_one_consumer_and_baseline_roles(env):
    _run(env, lambda c: c.group == "roles" and c.s_q in (1, 127, 255) and c.s_kv in (1, 129, 255), 8)


def test_special_values_and_layouts(env):
    _run(env, lambda c: c.group == "special", 10)


def test_sdpa_drop_in(env):
    _run(env, lambda c: c.group == "sdpa", 4)


def test_drop_in_without_a_schedule_runs_natively_on_hopper(monkeypatch):
    """schedule=None on a Hopper GPU: the Hopper presets, natively (no emulation), for every head dim,
    causal with GQA included, and equal to torch's SDPA within the FlashAttention rule."""
    import warnings

    import torch
    import torch.nn.functional as F

    import b200c
    from b200c.runtime import op

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a compute capability 9.0 GPU")
    monkeypatch.setattr(op, "_kernels", {})  # the suite's other tests load emulated kernels in this process
    for d in (64, 128, 256):
        q = torch.randn(2, 8, 1000, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(2, 2, 1000, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(2, 2, 1000, d, device="cuda", dtype=torch.bfloat16)
        with warnings.catch_warnings():
            warnings.simplefilter("error", b200c.FallbackWarning)  # a fallback fails the test
            out = b200c.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
        bf = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        tol = 2 * (bf.float() - ref).abs().max().item() + 1e-3
        assert (out.float() - ref).abs().max().item() <= tol, d
        o2 = b200c.attention(q, k, v, causal=True)  # schedule=None
        assert torch.equal(o2, out)
    built_for = {lk.target.name for lk in op._kernels.values()}  # this test's kernels alone (a fresh table)
    assert built_for == {"sm90a"}, built_for


def test_short_key_presets(monkeypatch):
    """The short-K/V presets (128 / 128 / 64-row K/V tiles for a few hundred keys, what cross-attention to
    text or audio tokens runs without a schedule) at every head dim, and the few-K/V one (head dim 64):
    S_kv 1, 77, 251 (one partial tile, a whole one and a partial one), S_q 251 and 1000, causal (rows with no key: O = 0, LSE = -inf) and not,
    GQA 8/2; against FP32 attention with the FlashAttention rule (the sweep's reference and check),
    natively."""
    import warnings

    import torch

    import b200c
    import real_inputs_sweep as sweep
    from b200c.dsl import presets
    from b200c.runtime import op

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a compute capability 9.0 GPU")
    monkeypatch.setattr(op, "_kernels", {})
    torch.manual_seed(0)
    for d in (64, 128, 256):
        for s_kv in (1, 77, 251):
            for s_q in (251, 1000):
                q = torch.randn(2, 8, s_q, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(2, 2, s_kv, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(2, 2, s_kv, d, device="cuda", dtype=torch.bfloat16)
                for short in (presets.HOPPER_SHORT_KV_PRESETS[d], presets.HOPPER_FEW_KV_PRESETS.get(d)):
                    for causal in (False, True) if short else ():
                        with warnings.catch_warnings():
                            warnings.simplefilter("error", b200c.FallbackWarning)
                            out, lse = b200c.attention(q, k, v, schedule=short, causal=causal, target="sm90a",
                                                       return_lse=True)
                        chk = sweep.Check()
                        chk.add(out, lse, *sweep.reference(q, k, v, d ** -0.5, causal))
                        status, tol, fails = chk.verdict()
                        assert status == "PASS", (short.name, d, s_kv, s_q, causal, fails)
        # schedule=None picks the few-K/V preset for S_kv = 251 at head dim 64, the short one elsewhere
        picked = presets.HOPPER_FEW_KV_PRESETS.get(d, presets.HOPPER_SHORT_KV_PRESETS[d])
        out = b200c.attention(q, k, v)
        assert torch.equal(out, b200c.attention(q, k, v, schedule=picked))
    assert {lk.built.launch.name for lk in op._kernels.values()} == {
        *(presets.HOPPER_SHORT_KV_PRESETS[d].name for d in (64, 128, 256)), presets.HOPPER_FEW_KV_PRESETS[64].name}

"""b200c.scaled_dot_product_attention, the drop-in for torch's SDPA: what runs b200c, what falls
back (with a FallbackWarning on every such call), the model swap, torch.compile; the built-in presets
(CPU only; b200c launches decoded by the fake driver)."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import b200c
from b200c.dsl import presets
from b200c.errors import FallbackWarning, ScheduleError
from b200c.runtime import fake_driver, sdpa

BF16 = torch.bfloat16
TORCH_SDPA = torch._C._nn.scaled_dot_product_attention
EXAMPLES = b200c.__path__[0] + "/../examples/"


def t(b=1, h=2, s=128, d=128, dtype=BF16):
    return torch.randn(b, h, s, d).to(dtype)


@pytest.fixture(autouse=True)
def _fresh():
    sdpa._warned.clear()
    yield
    sdpa._warned.clear()
    torch._dynamo.reset()


@pytest.fixture
def fd():
    with fake_driver.install() as f:
        yield f


def fallbacks(record):
    return [str(w.message) for w in record if issubclass(w.category, FallbackWarning)]


# ---- presets --------------------------------------------------------------------------------


def test_preset_d128_is_example_18():
    ex = b200c.load_schedule_file(EXAMPLES + "18_tma_l2_promotion.py")
    assert presets.D128.replace(name=ex.name) == ex


@pytest.mark.parametrize("d,variant", [(64, "hdim64"), (256, "hdim256")])
def test_head_dim_presets_are_the_variants(d, variant):
    v = b200c.load_schedule_file(EXAMPLES + f"variants/{variant}.py")
    assert presets.default_schedule(d).replace(name=v.name) == v
    assert presets.default_schedule(d).head_dim == d


def test_hopper_presets_are_h11_per_head_dim():
    """HOPPER_D128 is examples/hopper/h11; D64 takes 224-row K/V tiles without ping-pong (measured faster on
    the H200, presets.py), D256 80-row tiles, one work item per CTA."""
    h11 = b200c.load_schedule_file(EXAMPLES + "hopper/h11_persistent.py")
    assert presets.HOPPER_D128.replace(name=h11.name, blog_stage=h11.blog_stage) == h11
    assert presets.HOPPER_D64 == presets.HOPPER_D128.replace(name="hopper_default_d64", head_dim=64, block_n=224,
                                                             pingpong=False)
    assert (presets.HOPPER_D256.block_n, presets.HOPPER_D256.persistent) == (80, False)
    for d, s in presets.HOPPER_PRESETS.items():
        assert b200c.plan(s, "sm90a") is not None and s.head_dim == d


def test_presets_are_feasible():
    for d, s in presets.PRESETS.items():
        assert b200c.plan(s) is not None and s.head_dim == d
    with pytest.raises(ScheduleError, match="no built-in schedule for head dim 96"):
        presets.default_schedule(96)


# ---- runs b200c -----------------------------------------------------------------------------


@pytest.mark.parametrize("d", [64, 128, 256])
def test_default_schedule_per_head_dim(fd, d):
    q, k, v = t(d=d), t(d=d), t(d=d)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        out = b200c.scaled_dot_product_attention(q, k, v)
    (L,) = fd.launches
    assert L.kernel.name == f"default_d{d}" and L.out_ptr == out.data_ptr() and out.shape == q.shape
    assert L.params["causal"] == 0 and L.scale == pytest.approx(d ** -0.5)


def test_causal_square_gqa_and_scale(fd):
    q, k = t(h=8, s=300), t(h=2, s=300)
    b200c.scaled_dot_product_attention(q, k, k, is_causal=True, scale=0.3, enable_gqa=True)
    (L,) = fd.launches
    assert L.params["causal"] == 1 and L.params["heads_kv"] == 2 and L.scale == pytest.approx(0.3)
    assert L.params["pack_heads"] == 1  # causal GQA with the two-Q-stage preset


def test_explicit_schedule(fd):
    b200c.scaled_dot_product_attention(t(), t(), t(), schedule=EXAMPLES + "04_warp_specialization.py")
    assert fd.launches[0].kernel.name == "warp_specialization"


def test_invalid_schedule_raises_instead_of_falling_back():
    with pytest.raises(ScheduleError, match="Schedule has no field"):
        b200c.scaled_dot_product_attention(t(), t(), t(), schedule=b200c.Schedule(q_stage=2))
    with pytest.raises(b200c.TargetError, match="unknown target 'cpu'"):
        b200c.scaled_dot_product_attention(t(), t(), t(), target="cpu")


# ---- falls back ----------------------------------------------------------------------------


def cases():
    q, k, v = t(), t(), t()
    return [
        ("dropout", dict(query=q, key=k, value=v, dropout_p=0.5), "dropout_p=0.5"),
        ("fp16", dict(query=q.half(), key=k.half(), value=v.half()), "dtype torch.float16"),
        ("fp32", dict(query=q.float(), key=k.float(), value=v.float()), "dtype torch.float32"),
        ("3-D", dict(query=q[0], key=k[0], value=v[0]), "3-D/3-D/3-D inputs"),
        ("causal S_q != S_kv", dict(query=t(s=64), key=k, value=v, is_causal=True), "top-left corner"),
        ("head dim 96", dict(query=t(d=96), key=t(d=96), value=t(d=96)), "head dim 96"),
        ("Ev != E", dict(query=q, key=k, value=t(d=64)), "head dims differ"),
        ("negative scale", dict(query=q, key=k, value=v, scale=-0.1), "is negative"),
        ("nan scale", dict(query=q, key=k, value=v, scale=float("nan")), "must be finite"),
        ("huge scale", dict(query=q, key=k, value=v, scale=1e39), "too large"),
        ("layout", dict(query=t(d=256)[..., ::2], key=t(d=256)[..., ::2], value=t(d=256)[..., ::2]),
         "last-dim stride 2"),
        ("schedule can't hold D", dict(query=t(d=256), key=t(d=256), value=t(d=256),
                                       schedule=EXAMPLES + "18_tma_l2_promotion.py"), "768 of 512 TMEM columns"),
    ]


@pytest.mark.parametrize("name,kw,why", cases(), ids=[c[0] for c in cases()])
def test_fallbacks_match_torch_and_say_why_each_time(fd, name, kw, why):
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = b200c.scaled_dot_product_attention(**kw)
        got2 = b200c.scaled_dot_product_attention(**kw)
    kw.pop("schedule", None)
    torch.manual_seed(0)
    want = TORCH_SDPA(**kw)
    if kw.get("dropout_p", 0) == 0:
        torch.testing.assert_close(got, want, equal_nan=True)
        torch.testing.assert_close(got2, want, equal_nan=True)
    else:
        assert got.shape == want.shape
    msgs = fallbacks(rec)
    assert len(msgs) == 2, msgs  # each call says it
    assert all(why in m and "fell back to torch's scaled_dot_product_attention" in m for m in msgs)
    assert not fd.launches


def test_fallback_warning_points_at_the_caller(fd):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        b200c.scaled_dot_product_attention(t(dtype=torch.float32), t(dtype=torch.float32), t(dtype=torch.float32))
    (w,) = rec
    assert w.filename == __file__


def test_inputs_requiring_grad_fall_back_and_get_gradients(fd):
    q = t().requires_grad_()
    with pytest.warns(FallbackWarning, match="inputs require grad"):
        out = b200c.scaled_dot_product_attention(q, t(), t())
    out.float().sum().backward()
    assert q.grad is not None and not fd.launches
    with torch.no_grad():
        b200c.scaled_dot_product_attention(q, t(), t())
    assert len(fd.launches) == 1  # no gradient needed: b200c runs


def test_cpu_tensors_fall_back_without_the_fake_driver():
    q = t()
    with pytest.warns(FallbackWarning, match="query is on cpu"):
        out = b200c.scaled_dot_product_attention(q, q, q)
    torch.testing.assert_close(out, TORCH_SDPA(q, q, q))


@pytest.mark.parametrize("hq,hkv,gqa,why", [(4, 2, False, "4 query heads and 2 key/value heads without enable_gqa"),
                                             (3, 2, True, "3 query heads and 2 key/value heads")])
def test_unsupported_head_counts_behave_like_torch(fd, hq, hkv, gqa, why):
    q, k = t(h=hq), t(h=hkv)
    with pytest.warns(FallbackWarning, match=why):
        with pytest.raises(RuntimeError) as mine:
            b200c.scaled_dot_product_attention(q, k, k, enable_gqa=gqa)
    with pytest.raises(RuntimeError) as theirs:
        TORCH_SDPA(q, k, k, enable_gqa=gqa)
    assert str(mine.value) == str(theirs.value)


def test_a_build_failure_is_raised(fd, monkeypatch):
    from b200c.runtime import op

    def no_nvcc(*a, **kw):
        raise b200c.BuildError("nvcc not found on PATH")

    monkeypatch.setattr(op, "kernel_for_generated", no_nvcc)
    with pytest.raises(b200c.BuildError, match="nvcc not found"):  # an error of b200c's setup: never a fallback
        b200c.scaled_dot_product_attention(t(), t(), t())


def test_a_hang_is_not_swallowed(fd, monkeypatch):
    from b200c.runtime import op

    def hung(*a, **kw):
        raise b200c.BarrierTimeoutError("bounded mbarrier wait timed out")

    monkeypatch.setattr(op, "kernel_for_generated", hung)
    with pytest.raises(b200c.BarrierTimeoutError):
        b200c.scaled_dot_product_attention(t(), t(), t())


# ---- the swap into a model ------------------------------------------------------------------


class TinyAttention(torch.nn.Module):
    def __init__(self, d=128, h=4):
        super().__init__()
        self.h = h
        self.qkv = torch.nn.Linear(d * h, 3 * d * h, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, -1).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, -1)


def test_readme_one_liner_swaps_sdpa_into_a_model(fd, monkeypatch):
    from conftest import ROOT

    line = "torch.nn.functional.scaled_dot_product_attention = b200c.scaled_dot_product_attention"
    assert line in (ROOT / "README.md").read_text()
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", F.scaled_dot_product_attention)
    exec(line, {"torch": torch, "b200c": b200c})
    model = TinyAttention().to(BF16)
    with torch.no_grad():
        y = model(torch.randn(2, 200, 512).to(BF16))
    assert y.shape == (2, 200, 512)
    (L,) = fd.launches
    assert L.params["causal"] == 1 and L.sizes == (2, 4, 200, 200)
    with pytest.warns(FallbackWarning, match="dtype torch.float32"):  # fallback does not recurse into the swap
        TinyAttention().float()(torch.randn(1, 10, 512))


def test_signature_matches_torch():
    import inspect

    params = list(inspect.signature(b200c.scaled_dot_product_attention).parameters.values())
    assert [(p.name, p.default) for p in params[:8]] == [
        ("query", inspect.Parameter.empty), ("key", inspect.Parameter.empty), ("value", inspect.Parameter.empty),
        ("attn_mask", None), ("dropout_p", 0.0), ("is_causal", False), ("scale", None), ("enable_gqa", False)]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[8:])
    assert "FallbackWarning" in b200c.scaled_dot_product_attention.__doc__


# ---- torch.compile ----------------------------------------------------------------------------


def test_compile_traces_the_b200c_path():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, k, v):
        return b200c.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    with FakeTensorMode():
        q = torch.empty(2, 8, 256, 64, dtype=BF16, device="cuda")
        k = torch.empty(2, 2, 256, 64, dtype=BF16, device="cuda")
        assert compiled(q, k, k).shape == q.shape
    (node,) = [n for n in graphs[0].graph.nodes if "b200c.attention" in str(n.target)]
    assert b200c.Schedule.from_json(node.args[3]) == presets.D64 and node.args[6] is True


def test_compile_traces_the_fallback_and_warns_once():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, k, v):
        return b200c.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with FakeTensorMode():
            q = torch.empty(2, 4, 100, 128, dtype=BF16, device="cuda")
            k = torch.empty(2, 4, 300, 128, dtype=BF16, device="cuda")
            compiled(q, k, k)
            compiled(q, k, k)
    assert len([m for m in fallbacks(rec) if "top-left corner" in m]) == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any("scaled_dot_product_attention" in x for x in targets)
    assert not any("b200c" in x for x in targets)


def test_a_failed_driver_call_is_raised_not_fallen_back(fd, monkeypatch):
    """Issue 33 item 6: a CUDA driver call on a b200c kernel that fails (here cuLaunchKernel with
    CUDA_ERROR_ILLEGAL_ADDRESS) is b200c's own failure: the drop-in raises DriverError (a LaunchError)
    naming the call and the error instead of a FallbackWarning and torch's result."""
    from cuda.bindings import driver as real

    from b200c.runtime import driver

    q = t()
    monkeypatch.setattr(driver._cu(), "cuLaunchKernel", lambda *a: (real.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with pytest.raises(b200c.DriverError, match="cuLaunchKernel of .* failed: .*CUDA_ERROR_ILLEGAL_ADDRESS"):
            b200c.scaled_dot_product_attention(q, q, q)
    assert not fallbacks(rec)
    assert issubclass(b200c.DriverError, b200c.LaunchError)

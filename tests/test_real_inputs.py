"""Real attention inputs on the host side (issue 10): any lengths, causal, GQA/MQA, LSE, head dims
64/256, softmax_scale values, flags, torch.compile. What each launch would receive is decoded by
the fake driver (CPU only)."""
from __future__ import annotations

import fractions
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import b200c
from b200c.errors import LaunchError, ResourceError
from b200c.runtime import fake_driver, launcher, op

BF16 = torch.bfloat16
SCHED = b200c.Schedule(name="real_inputs")  # 1 Q stage, not persistent
EX18 = b200c.load_schedule_file(b200c.__path__[0] + "/../examples/18_tma_l2_promotion.py")  # 2 Q stages, persistent


def t(b=1, h=2, s=256, d=128):
    return torch.randn(b, h, s, d).to(BF16)


@pytest.fixture
def fd():
    with fake_driver.install() as f:
        yield f


@pytest.fixture(autouse=True)
def _reset_dynamo():
    yield
    torch._dynamo.reset()


# ---- what one launch receives ----------------------------------------------------------


@pytest.mark.parametrize("s_q,s_kv", [(1, 1), (63, 64), (127, 129), (255, 257), (1000, 1), (1, 4095)])
def test_any_lengths_reach_the_kernel(fd, s_q, s_kv):
    q, k = t(b=3, h=5, s=s_q), t(b=3, h=5, s=s_kv)
    out = b200c.attention(q, k, k, schedule=SCHED.replace(kv_splits=1))  # the plain build (no split-KV)
    (L,) = fd.launches
    assert out.shape == q.shape and L.sizes == (3, 5, s_q, s_kv)
    assert L.grid == 3 * 5 * math.ceil(s_q / 128)
    assert fd.encodes[0][1] == (128, s_q, 5, 3) and fd.encodes[1][1] == (128, s_kv, 5, 3)


def test_gqa_maps_use_h_kv(fd):
    q, k, v = t(b=2, h=8, s=300), t(b=2, h=2, s=200), t(b=2, h=2, s=200)
    b200c.attention(q, k, v, schedule=SCHED)
    (L,) = fd.launches
    assert L.params["heads"] == 8 and L.params["heads_kv"] == 2
    dims = {addr: d for addr, d, _, _, _ in fd.encodes}
    assert dims[q.data_ptr()] == (128, 300, 8, 2)
    assert dims[k.data_ptr()] == dims[v.data_ptr()] == (128, 200, 2, 2)
    strides = {addr: s for addr, _, s, _, _ in fd.encodes}
    assert strides[k.data_ptr()] == (256, 200 * 256, 2 * 200 * 256)  # S, H_kv, B strides in bytes


def test_mqa_bshd_strides(fd):
    q = torch.randn(2, 100, 8, 128).to(BF16)  # (B, S, H, D)
    k = torch.randn(2, 70, 1, 128).to(BF16)
    out = b200c.attention(q, k, k, schedule=SCHED, layout="bshd")
    (L,) = fd.launches
    assert out.shape == q.shape and L.params["heads_kv"] == 1
    assert fd.encodes[1][1:3] == ((128, 70, 1, 2), (256, 2 * 70 * 256, 70 * 256))  # H_kv = 1: the extent


def test_causal_flag_and_lse(fd):
    q, k = t(b=2, h=4, s=300), t(b=2, h=4, s=500)
    out, lse = b200c.attention(q, k, k, schedule=SCHED, causal=True, return_lse=True)
    (L,) = fd.launches
    assert L.params["causal"] == 1 and L.params["pack_heads"] == 0
    assert lse.shape == (2, 4, 300) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert L.lse_ptr == lse.data_ptr() and L.lse_strides == (4 * 300, 300, 1)
    assert L.out_ptr == out.data_ptr()
    out2 = b200c.attention(q, k, k, schedule=SCHED)
    assert isinstance(out2, torch.Tensor)
    L2 = fd.launches[-1]
    assert L2.params["causal"] == 0 and L2.lse_ptr == 0 and L2.lse_strides == (0, 0, 0)
    assert len(launcher._entries) == 2  # causal / return_lse are part of the entry key


def test_lse_with_bshd_layout_is_bhs(fd):
    q = torch.randn(2, 100, 4, 128).to(BF16)
    out, lse = b200c.attention(q, q, q, schedule=SCHED, layout="bshd", return_lse=True)
    assert out.shape == (2, 100, 4, 128) and lse.shape == (2, 4, 100)
    assert fd.launches[0].lse_strides == (400, 100, 1)


def test_repeated_lse_calls_get_fresh_buffers(fd):
    q = t()
    a = b200c.attention(q, q, q, schedule=SCHED, return_lse=True)
    b = b200c.attention(q, q, q, schedule=SCHED, return_lse=True)
    assert fd.launches[0].lse_ptr == a[1].data_ptr() and fd.launches[1].lse_ptr == b[1].data_ptr()
    assert a[1].data_ptr() != b[1].data_ptr() and len(launcher._entries) == 1


def test_empty_kv_gives_zeros_and_minus_inf_lse(fd):
    q = t(b=2, h=4, s=100)
    out, lse = b200c.attention(q, t(b=2, h=2, s=0), t(b=2, h=2, s=0), schedule=SCHED, return_lse=True, causal=True)
    assert torch.count_nonzero(out) == 0 and lse.shape == (2, 4, 100) and bool((lse == float("-inf")).all())
    out, lse = b200c.attention(t(s=0), t(), t(), schedule=SCHED, return_lse=True)
    assert out.shape == (1, 2, 0, 128) and lse.shape == (1, 2, 0)
    assert not fd.launches


@pytest.mark.parametrize("d,sched,name", [(64, EX18, "tma_l2_promotion"), (256, SCHED, "real_inputs"),
                                          (256, b200c.dsl.presets.D256, "default_d256")])
def test_schedule_is_specialized_to_the_head_dim(fd, d, sched, name):
    q = t(h=2, s=130, d=d)
    b200c.attention(q, q, q, schedule=sched)
    (L,) = fd.launches
    assert L.kernel.head_dim == d and L.kernel.name == name
    want = b200c.generate(sched.replace(head_dim=d)).launch
    assert (L.smem, L.kernel.tmem_cols) == (want.dynamic_smem_bytes, want.tmem_cols)
    assert L.scale == pytest.approx(d ** -0.5)
    assert fd.encodes[0][3] == want.tma_box_inner


def test_schedule_that_cannot_hold_d_raises_resource_error():
    q = t(d=256)  # CPU: the schedule's budget is reported before the device rule
    with pytest.raises(ResourceError, match=r"schedule 'tma_l2_promotion' at the inputs' head dim D = 256: 2 Q stages "
                                            r"at head dim 256 need 768 of 512 TMEM columns.*default_schedule\(256, target=.sm100a.\)"):
        b200c.attention(q, q, q, schedule=EX18)
    with pytest.raises(ResourceError, match="768 of 512 TMEM columns"):  # cached failure, same answer
        b200c.attention(q, q, q, schedule=EX18)


def test_attention_generated_checks_the_head_dim(fd):
    from b200c.runtime import attention_generated

    gen = op.generated_kernel(SCHED.to_json())
    q = t(d=64)
    with pytest.raises(LaunchError, match="generated for head dim 128 but the inputs have D = 64"):
        attention_generated(q, q, q, gen)
    out, lse = attention_generated(t(), t(), t(), gen, causal=True, return_lse=True)
    assert fd.launches[-1].params["causal"] == 1 and fd.launches[-1].lse_ptr == lse.data_ptr()


# ---- softmax_scale: every value a user can pass ---------------------------------------------


def f32(x):
    import ctypes

    return ctypes.c_float(x).value


FLT_MIN = 1.1754943508222875e-38  # 0 and scales below it are passed as FLT_MIN (see inputs.FLT_MIN)


@pytest.mark.parametrize("scale,want", [
    (0.125, 0.125), (1, 1.0), (3, 3.0), (0, FLT_MIN), (0.0, FLT_MIN), (-0.0, FLT_MIN), (1e-30, 1e-30),
    (1e-45, FLT_MIN), (1e-300, FLT_MIN), (1e38, 1e38), (2.35e38, 2.35e38), (fractions.Fraction(1, 8), 0.125), (True and 2, 2.0),
])
def test_scale_values_computed(fd, scale, want):
    q = t()
    b200c.attention(q, q, q, schedule=SCHED, softmax_scale=scale)
    assert fd.launches[-1].scale == pytest.approx(f32(want), rel=1e-7, abs=0)


def test_scale_numpy_and_tensor_scalars(fd):
    numpy = pytest.importorskip("numpy")
    q = t()
    for scale in (numpy.float32(0.25), numpy.float64(0.25), numpy.int64(2), numpy.float16(0.5),
                  torch.tensor(0.25), torch.tensor(0.25, dtype=torch.float64), torch.tensor(2),
                  torch.tensor(0.5, dtype=BF16)):
        b200c.attention(q, q, q, schedule=SCHED, softmax_scale=scale)
        assert fd.launches[-1].scale == pytest.approx(float(scale)), scale


@pytest.mark.parametrize("scale,msg", [
    (-0.1, "softmax_scale=-0.1 is negative; b200c kernels take the row max of the raw scores.*negate q"),
    (-1, "is negative"),
    (float("nan"), "softmax_scale=nan must be finite"),
    (float("inf"), "softmax_scale=inf must be finite"),
    (float("-inf"), "must be finite"),
    (2.36e38, "too large: softmax_scale \\* log2\\(e\\) overflows FP32"),
    (1e39, "too large"),
    (10 ** 400, "does not fit a float"),
    (True, "must be a real number"),
    ("0.1", "must be a real number"),
    (1j, "must be a real number"),
    (None.__class__, "must be a real number"),
    (torch.tensor([0.1]), "softmax_scale is a tensor of shape \\(1,\\)"),
    (torch.tensor(True), "dtype torch.bool"),
    (torch.tensor(1j), "dtype torch.complex64"),
    (torch.tensor(-1.0), "is negative"),
    (torch.tensor(float("nan")), "must be finite"),
])
def test_scale_values_refused(scale, msg):
    q = t()
    with pytest.raises(LaunchError, match=msg):
        b200c.attention(q, q, q, schedule=SCHED, softmax_scale=scale)


def test_scale_numpy_refusals():
    numpy = pytest.importorskip("numpy")
    q = t()
    for scale, msg in ((numpy.float32(-1), "is negative"), (numpy.float64("nan"), "must be finite"),
                       (numpy.bool_(True), "must be a real number"), (numpy.float32("inf"), "must be finite")):
        with pytest.raises(LaunchError, match=msg):
            b200c.attention(q, q, q, schedule=SCHED, softmax_scale=scale)


def test_scale_limit_is_exact():
    from b200c.runtime.inputs import softmax_scale_value

    limit = 3.4028234663852886e38 / 1.4426950408889634
    assert softmax_scale_value(limit * (1 - 1e-7)) == pytest.approx(limit * (1 - 1e-7))
    with pytest.raises(LaunchError, match="too large"):
        softmax_scale_value(limit * (1 + 1e-6))


def test_zero_and_tiny_scales_are_passed_as_flt_min():
    """-inf (masked scores) * 0 is NaN in the kernel: 0 and scales below the smallest normal FP32 go as FLT_MIN
    (found by the emulated real-inputs sweep: scale=0 gave NaN rows)."""
    import numpy

    from b200c.runtime.inputs import FLT_MIN, softmax_scale_value

    assert FLT_MIN == float(numpy.finfo(numpy.float32).tiny)
    for tiny in (0.0, 0, 1e-45, 1e-39, numpy.float32(0)):
        assert softmax_scale_value(tiny) == FLT_MIN
    assert softmax_scale_value(2e-38) == 2e-38 and softmax_scale_value(0.5) == 0.5


# ---- flags ------------------------------------------------------------------------------------


def test_flags_accept_bool_like_values(fd):
    q = t()
    b200c.attention(q, q, q, schedule=SCHED, causal=1)
    assert fd.launches[-1].params["causal"] == 1
    out = b200c.attention(q, q, q, schedule=SCHED, return_lse=0)
    assert isinstance(out, torch.Tensor)


@pytest.mark.parametrize("kw", [dict(causal="yes"), dict(causal=2), dict(return_lse="no"), dict(causal=None)])
def test_flags_refuse_other_values(kw):
    q = t()
    name = next(iter(kw))
    with pytest.raises(LaunchError, match=f"{name}=.* must be True or False"):
        b200c.attention(q, q, q, schedule=SCHED, **kw)


def test_help_documents_the_new_arguments():
    doc = b200c.attention.__doc__
    for part in ("causal:", "bottom-right", "return_lse:", "(B, H, S_q)", "H_kv", "64, 128 or 256", "negative",
                 "NaN", "ResourceError"):
        assert part in doc, part


# ---- torch.compile and the custom ops ---------------------------------------------------------


def nodes(gm, name):
    return [n for n in gm.graph.nodes if n.op == "call_function" and name in str(n.target)]


def test_compile_traces_causal_lse_gqa_without_graph_break():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, k, v):
        out, lse = b200c.attention(q, k, v, schedule=EX18, causal=True, return_lse=True, softmax_scale=0.5)
        return out * 2, lse

    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    with FakeTensorMode():
        q = torch.empty(2, 8, 300, 64, dtype=BF16, device="cuda")
        k = torch.empty(2, 2, 77, 64, dtype=BF16, device="cuda")
        out, lse = compiled(q, k, k)
        assert out.shape == q.shape and lse.shape == (2, 8, 300) and lse.dtype == torch.float32
    (node,) = nodes(graphs[0], "b200c.attention_lse")
    _, _, _, sched_json, scale, target, causal = node.args
    assert causal is True and scale == 0.5 and b200c.Schedule.from_json(sched_json) == EX18


def test_compile_reports_a_head_dim_the_schedule_cannot_hold():
    def fn(q):
        return b200c.attention(q, q, q, schedule=EX18)

    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    with FakeTensorMode():
        q = torch.empty(1, 2, 128, 256, dtype=BF16, device="cuda")
        with pytest.raises(Exception, match="768 of 512 TMEM columns"):
            compiled(q)


def test_compile_aot_eager_runs_the_lse_op(fd):
    def fn(q, k):
        return b200c.attention(q, k, k, schedule=SCHED, causal=True, return_lse=True)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    q, k = t(h=4, s=100), t(h=2, s=150)
    out, lse = compiled(q, k)
    (L,) = fd.launches
    assert L.out_ptr == out.data_ptr() and L.lse_ptr == lse.data_ptr()
    assert L.params["causal"] == 1 and L.params["heads_kv"] == 2


def test_lse_op_backward_raises(fd):
    q = t().requires_grad_()
    out, lse = b200c.attention(q, q.detach(), q.detach(), schedule=SCHED, return_lse=True)
    with pytest.raises(b200c.BackwardNotSupportedError):
        (out.float().sum() + lse.sum()).backward()

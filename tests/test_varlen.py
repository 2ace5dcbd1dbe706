"""b200c.attention_varlen (flash_attn_varlen_func's convention): validation, cu_seqlens values,
what the launch receives (decoded by the fake driver), the custom op under torch.compile (CPU only)."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import b200c
from b200c.errors import LaunchError
from b200c.runtime import fake_driver, launcher

BF16 = torch.bfloat16
I32 = torch.int32
SCHED = b200c.Schedule(name="varlen_test")
EX18 = b200c.load_schedule_file(b200c.__path__[0] + "/../examples/18_tma_l2_promotion.py")


def packed(total, h, d=128):
    return torch.randn(total, h, d).to(BF16)


def cu(*lengths):
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=I32)


@pytest.fixture
def fd():
    with fake_driver.install() as f:
        yield f


@pytest.fixture(autouse=True)
def _reset_dynamo():
    yield
    torch._dynamo.reset()


# ---- what the launch receives -----------------------------------------------------------------


def test_varlen_parameters(fd):
    lq, lk = (100, 0, 300, 1), (50, 200, 0, 7)  # empty sequences in q and in k
    q, k, v = packed(sum(lq), 8), packed(sum(lk), 2), packed(sum(lk), 2)
    cq, ck = cu(*lq), cu(*lk)
    out, lse = b200c.attention_varlen(q, k, v, cq, ck, 300, 200, schedule=SCHED, return_lse=True, causal=True)
    (L,) = fd.launches
    p = L.params
    assert out.shape == q.shape and lse.shape == (8, 401) and lse.dtype == torch.float32
    assert p["cu_seqlens_q"] == cq.data_ptr() and p["cu_seqlens_k"] == ck.data_ptr()
    assert (p["batch"], p["heads"], p["heads_kv"], p["seq_q"], p["seq_kv"]) == (4, 8, 2, 300, 200)
    assert L.out_ptr == out.data_ptr() and L.out_strides == (0, 128, 8 * 128)
    assert L.lse_ptr == lse.data_ptr() and L.lse_strides == (0, 401, 1)
    assert p["causal"] == 1 and p["pack_heads"] == 0  # one Q stage
    assert L.grid == 4 * 8 * 3  # B * H * ceil(max_seqlen_q / 128)
    dims = {addr: (d, s) for addr, d, s, _, _ in fd.encodes}
    assert dims[q.data_ptr()] == ((128, 401, 8, 1), (8 * 256, 256, 401 * 8 * 256))
    assert dims[k.data_ptr()][0] == dims[v.data_ptr()][0] == (128, 257, 2, 1)


def test_varlen_packs_heads_with_two_q_stages(fd):
    q, k = packed(300, 8), packed(300, 4)
    b200c.attention_varlen(q, k, k, cu(100, 200), cu(150, 150), 200, 150, schedule=EX18)
    (L,) = fd.launches
    assert L.params["pack_heads"] == 1 and L.grid == 2 * 4 * 2  # B * H / 2 * ceil(200 / 128)


def test_packed_qkv_slices_without_copies(fd):
    qkv = torch.randn(500, 3, 4, 128).to(BF16)  # (total, 3, H, D)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    out = b200c.attention_varlen(q, k, v, cu(200, 300), cu(200, 300), 300, 300, schedule=SCHED)
    assert out.shape == (500, 4, 128)
    dims = {addr: (d, s) for addr, d, s, _, _ in fd.encodes}
    assert dims[k.data_ptr()][0] == (128, 500, 4, 1) and dims[k.data_ptr()][1][:2] == (3 * 4 * 256, 256)


def test_cached_entry_rechecks_values_each_call(fd):
    q = packed(300, 2)
    cq = cu(100, 200)
    b200c.attention_varlen(q, q, q, cq, cq, 200, 200, schedule=SCHED)
    cq[1] = 250  # same pointer, new values: sequence 1 is now 50 rows, sequence 0 250 > max_seqlen
    with pytest.raises(LaunchError, match="sequence 0 has 250 rows .* but max_seqlen_q = 200"):
        b200c.attention_varlen(q, q, q, cq, cu(100, 200), 200, 200, schedule=SCHED)
    assert len(fd.launches) == 1


def test_rows_outside_every_sequence_are_zero(fd):
    q = packed(400, 2)
    cq = torch.tensor([50, 100, 300], dtype=I32)  # rows 0-49 and 300-399 belong to no sequence
    out, lse = b200c.attention_varlen(q, q, q, cq, cu(100, 200), 200, 200, schedule=SCHED, return_lse=True)
    assert torch.count_nonzero(out[:50]) == 0 and torch.count_nonzero(out[300:]) == 0
    assert bool((lse[:, :50] == float("-inf")).all()) and bool((lse[:, 300:] == float("-inf")).all())


def test_nothing_to_launch(fd):
    q = packed(300, 4)
    out, lse = b200c.attention_varlen(q, q, q, cu(100, 200), cu(0, 0), 200, 0, schedule=SCHED, return_lse=True)
    assert torch.count_nonzero(out) == 0 and bool((lse == float("-inf")).all()) and lse.shape == (4, 300)
    out = b200c.attention_varlen(packed(0, 4), packed(0, 4), packed(0, 4), cu(), cu(), 0, 0, schedule=SCHED)
    assert out.shape == (0, 4, 128)
    assert not fd.launches


def test_check_seqlens_false_skips_the_value_check(fd):
    q = packed(300, 2)
    bad = torch.tensor([0, 200, 100], dtype=I32)
    with pytest.raises(LaunchError, match="cu_seqlens_q\\[2\\] = 100 < cu_seqlens_q\\[1\\] = 200"):
        b200c.attention_varlen(q, q, q, bad, cu(100, 200), 200, 200, schedule=SCHED)
    b200c.attention_varlen(q, q, q, bad, cu(100, 200), 200, 200, schedule=SCHED, check_seqlens=False)
    assert len(fd.launches) == 1  # the caller vouched for the values


# ---- rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cq,ck,mq,mk,msg", [
    ([0, 100, 90], [0, 100, 200], 200, 200, "cu_seqlens_q\\[2\\] = 90 < cu_seqlens_q\\[1\\] = 100"),
    ([-5, 100, 300], [0, 100, 200], 200, 200, "cu_seqlens_q\\[0\\] = -5 is negative"),
    ([0, 100, 301], [0, 100, 200], 201, 200, "cu_seqlens_q\\[2\\] = 301 but tensor q has 300 rows"),
    ([0, 100, 300], [0, 100, 201], 200, 200, "cu_seqlens_k\\[2\\] = 201 but tensor k has 200 rows"),
    ([0, 100, 300], [0, 100, 200], 199, 200, "sequence 1 has 200 rows .* but max_seqlen_q = 199"),
    ([0, 100, 300], [0, 150, 200], 200, 100, "sequence 0 has 150 rows .* but max_seqlen_k = 100"),
])
def test_cu_seqlens_values(fd, cq, ck, mq, mk, msg):
    q, k = packed(300, 2), packed(200, 2)
    with pytest.raises(LaunchError, match=msg):
        b200c.attention_varlen(q, k, k, torch.tensor(cq, dtype=I32), torch.tensor(ck, dtype=I32), mq, mk,
                               schedule=SCHED)
    assert not fd.launches


@pytest.mark.parametrize("change,msg", [
    (dict(cq=torch.tensor([0, 100], dtype=torch.int64)), "cu_seqlens_q has dtype torch.int64; it must be torch.int32"),
    (dict(cq=torch.zeros(1, 2, dtype=I32)), "cu_seqlens_q has shape \\(1, 2\\); it must be 1-D"),
    (dict(cq=torch.zeros(0, dtype=I32)), "B \\+ 1 >= 1 entries"),
    (dict(cq=torch.tensor([0, 0, 100, 0], dtype=I32)[::2]), "cu_seqlens_q has stride 2; it must be contiguous"),
    (dict(ck=cu(50, 50, 0)), "cu_seqlens_k has 4 entries but cu_seqlens_q has 3"),
    (dict(cq=[0, 100]), "cu_seqlens_q must be a torch.Tensor of int32, got list"),
    (dict(q=torch.randn(1, 100, 2, 128).to(BF16)), "tensor q has 4 dims .* 3-D packed \\(total_tokens, H, D\\)"),
    (dict(q=packed(100, 3)), "q has H = 3 heads but k and v have H_kv = 2"),
    (dict(v=packed(90, 2)), "tensor v has shape \\(90, 2, 128\\) but k has \\(100, 2, 128\\)"),
    (dict(q=packed(100, 2, 96), k=packed(100, 2, 96), v=packed(100, 2, 96)), "head dim D = 96"),
    (dict(q=packed(100, 2).float()), "tensor q has dtype torch.float32"),
    (dict(q=torch.randn(100, 2, 130).to(BF16)[..., :128]), "tensor q has S stride 260 elements"),
    (dict(mq=1.5), "max_seqlen_q=1.5 \\(float\\) must be an int"),
    (dict(mk=True), "max_seqlen_k=True must be an int"),
    (dict(mq=-1), "max_seqlen_q=-1 must be in \\[0, 2\\^31\\)"),
])
def test_varlen_rules(fd, change, msg):
    args = dict(q=packed(100, 2), k=packed(100, 2), v=packed(100, 2), cq=cu(50, 50), ck=cu(50, 50), mq=50, mk=50)
    args.update(change)
    with pytest.raises(LaunchError, match=msg):
        b200c.attention_varlen(args["q"], args["k"], args["v"], args["cq"], args["ck"], args["mq"], args["mk"],
                               schedule=SCHED)


def test_cpu_tensors_named_without_fake_driver():
    q = packed(100, 2)
    with pytest.raises(LaunchError, match="tensor q is on cpu"):
        b200c.attention_varlen(q, q, q, cu(50, 50), cu(50, 50), 50, 50, schedule=SCHED)


def test_help_documents_varlen():
    doc = b200c.attention_varlen.__doc__
    for part in ("(total_q, H, D)", "cu_seqlens_q", "torch.int32", "(H, total_q)", "check_seqlens", "sync",
                 "Raises:", "Empty sequences"):
        assert part in doc, part


# ---- the custom op ----------------------------------------------------------------------------


def test_varlen_fake_impl_and_compile():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, k, v, cq, ck):
        out, lse = b200c.attention_varlen(q, k, v, cq, ck, 300, 200, schedule=EX18, causal=True, return_lse=True)
        return out + 1, lse

    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    with FakeTensorMode():
        q = torch.empty(401, 8, 64, dtype=BF16, device="cuda")
        k = torch.empty(257, 2, 64, dtype=BF16, device="cuda")
        c = torch.empty(5, dtype=I32, device="cuda")
        out, lse = compiled(q, k, k, c, c)
        assert out.shape == q.shape and lse.shape == (8, 401) and lse.dtype == torch.float32
    (node,) = [n for n in graphs[0].graph.nodes if "b200c.attention_varlen" in str(n.target)]
    assert node.args[5:7] == (300, 200) and node.args[10:] == (True, True, True)


def test_varlen_compile_aot_eager_runs(fd):
    def fn(q, k, cq, ck):
        return b200c.attention_varlen(q, k, k, cq, ck, 200, 200, schedule=SCHED)

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    q = packed(300, 2)
    out = compiled(q, q, cu(100, 200), cu(100, 200))
    (L,) = fd.launches
    assert L.out_ptr == out.data_ptr() and L.params["batch"] == 2


def test_varlen_inputs_requiring_grad_forward_only(fd):
    q = packed(300, 2).requires_grad_()
    out = b200c.attention_varlen(q, q.detach(), q.detach(), cu(100, 200), cu(100, 200), 200, 200, schedule=SCHED)
    assert out.requires_grad and len(fd.launches) == 1
    with pytest.raises(b200c.BackwardNotSupportedError):
        out.float().sum().backward()
    assert launcher._entries

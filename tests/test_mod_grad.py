"""d score_mod / d score from the traced graph (b200c/dsl/mod_grad.py), checked on the host in FP64: against
torch autograd of the user's own function, and by torch.autograd.gradcheck of the traced graph's host
evaluation (b200c/dsl/mod_eval.py) with the derived graph as its backward (issue 31 item 5)."""
import pytest
import torch

import b200c.mods as mods
from b200c.dsl.mod_eval import evaluate
from b200c.dsl.mod_grad import score_derivative
from b200c.dsl.mods import trace_mods
from b200c.errors import ScheduleError

H, S = 3, 9
TABLE = torch.randn(H, S, S, generator=torch.Generator().manual_seed(3))
SLOPES = torch.tensor([0.5, 0.25, 0.125])


def _grid(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    score = (torch.randn(2, H, S, S, generator=g, dtype=dtype) * 4)
    b = torch.arange(2).view(2, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    q = torch.arange(S).view(1, 1, S, 1)
    k = torch.arange(S).view(1, 1, 1, S)
    return score, b, h, q, k


FUNCS = {
    "identity": lambda s, b, h, q, k: s,
    "softcap": mods.softcap(30.0),
    "softcap_written_out": lambda s, b, h, q, k: torch.tanh(s / 20.0) * 20.0,
    "alibi_symmetric": lambda s, b, h, q, k: s - SLOPES[h] * (q - k).abs(),
    "table_bias": lambda s, b, h, q, k: s * 2 + TABLE[h, q, k],
    "causal_where": lambda s, b, h, q, k: torch.where(q >= k, s, -float("inf")),
    "min_max_clamp": lambda s, b, h, q, k: torch.clamp(s, max=2.0) + torch.clamp(s * 0.5, min=-1.0)
    + torch.clamp(s, -3.0, 3.0) + torch.minimum(s, s * 0.3) + torch.maximum(s, TABLE[h, q, k]),
    "square_and_pow": lambda s, b, h, q, k: s * s + torch.pow(s.abs() + 1.0, 1.5) + torch.pow(1.5, s / 4),
    "exp_log_sqrt": lambda s, b, h, q, k: torch.log(torch.exp(s / 8) + 1.0) + torch.sqrt(s * s + 1.0)
    + torch.rsqrt(s * s + 2.0) + torch.exp2(s / 8) + torch.log2(s.abs() + 1.0),
    "sigmoid_trig": lambda s, b, h, q, k: torch.sigmoid(s) * torch.sin(s) + torch.cos(s / 2),
    "division": lambda s, b, h, q, k: s / (s * s + 1.0) + 3.0 / (s.abs() + 2.0),
    "abs": lambda s, b, h, q, k: s.abs() * 0.5,
    "constant": lambda s, b, h, q, k: (q - k).float() * 0.1,
    "bf16_round": lambda s, b, h, q, k: s.bfloat16().float() * 2,
}


@pytest.mark.parametrize("name", list(FUNCS))
def test_derivative_equals_autograd_of_the_function(name):
    fn = FUNCS[name]
    ms, caps = trace_mods(score_mod=fn)
    score, b, h, q, k = _grid()
    s = score.clone().requires_grad_(True)
    ref = fn(s, b, h, q, k)
    want = torch.autograd.grad(ref.sum(), s)[0] if ref.requires_grad else torch.zeros_like(score)
    d = score_derivative(ms.score_mod)
    env = dict(score=score, b=b, h=h, q_idx=q, kv_idx=k)
    got = torch.broadcast_to(evaluate(d, env, [c.double() if c.is_floating_point() else c for c in caps]), score.shape)
    # the forward itself: the host evaluation equals the function (the derived graph keeps its nodes)
    fwd = evaluate(ms.score_mod, env, [c.double() if c.is_floating_point() else c for c in caps])
    # (a function that casts to FP32 itself, `.float()`, is compared at FP32's precision)
    tol = 1e-12 if ref.dtype == torch.float64 else 1e-6
    ref, want = torch.broadcast_to(ref.detach(), score.shape).double(), want.double()
    finite = torch.isfinite(ref)
    assert torch.allclose(torch.broadcast_to(fwd, score.shape)[finite].double(), ref[finite], rtol=tol, atol=tol)
    assert torch.allclose(got[finite].double(), want[finite], rtol=1e-10, atol=1e-12), (name, float((got - want).abs().max()))


class _Traced(torch.autograd.Function):
    """The traced graph's host evaluation, with the derived graph as its backward."""

    @staticmethod
    def forward(ctx, score, graph, grad_graph, idx, caps):
        ctx.save_for_backward(score)
        ctx.rest = (grad_graph, idx, caps)
        env = dict(score=score, **idx)
        return torch.broadcast_to(evaluate(graph, env, caps), score.shape).clone()

    @staticmethod
    def backward(ctx, grad):
        (score,) = ctx.saved_tensors
        grad_graph, idx, caps = ctx.rest
        d = torch.broadcast_to(evaluate(grad_graph, dict(score=score, **idx), caps), score.shape)
        return grad * d, None, None, None, None


@pytest.mark.parametrize("name", [n for n in FUNCS if n not in ("causal_where", "bf16_round", "abs",
                                                                  "min_max_clamp", "constant")])
def test_gradcheck_of_the_host_model(name):
    """torch.autograd.gradcheck (finite differences in FP64) of the traced graph with the derived backward;
    the non-smooth functions (kinks, -inf, rounding) are left to the autograd comparison above."""
    fn = FUNCS[name]
    ms, caps = trace_mods(score_mod=fn)
    score, b, h, q, k = _grid()
    caps = [c.double() if c.is_floating_point() else c for c in caps]
    grad_graph = score_derivative(ms.score_mod)
    idx = dict(b=b, h=h, q_idx=q, kv_idx=k)
    s = score[:1, :, :4, :4].clone().requires_grad_(True)
    small = dict(b=b[:1], h=h, q_idx=q[:, :, :4], kv_idx=k[..., :4])
    assert torch.autograd.gradcheck(lambda x: _Traced.apply(x, ms.score_mod, grad_graph, small, caps), (s,),
                                    eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("fn,op", [
    (lambda s, b, h, q, k: s // 2, "floordiv"),
    (lambda s, b, h, q, k: s % 3, "mod"),
    (lambda s, b, h, q, k: s.int().float(), "to_int"),
])
def test_ops_without_a_derivative_are_refused_by_name(fn, op):
    ms, _ = trace_mods(score_mod=fn)
    with pytest.raises(ScheduleError, match=f"score_mod's {op} at .* has no derivative"):
        score_derivative(ms.score_mod)


def test_index_only_ops_need_no_derivative():
    """floordiv / mod / casts on the indices (a tiled bias) are fine: they do not depend on the score."""
    fn = lambda s, b, h, q, k: s + TABLE[h, q // 3, k % 3]
    ms, caps = trace_mods(score_mod=fn)
    d = score_derivative(ms.score_mod)
    score, b, h, q, k = _grid()
    got = evaluate(d, dict(score=score, b=b, h=h, q_idx=q, kv_idx=k), [c.double() for c in caps])
    assert torch.equal(torch.broadcast_to(got, score.shape), torch.ones_like(score))


def test_derivative_graph_is_a_mod_graph():
    ms, _ = trace_mods(score_mod=mods.softcap(30.0))
    d = score_derivative(ms.score_mod)
    assert d.kind == "score_mod_grad" and d.nodes[: len(ms.score_mod.nodes)] == ms.score_mod.nodes
    names = [n.name for n in d.nodes]
    assert len(names) == len(set(names)) and d.output in names
    with pytest.raises(ScheduleError, match="takes a score_mod graph"):
        score_derivative(trace_mods(mask_mod=lambda b, h, q, k: q >= k)[0].mask_mod)


# ---- gradients of captured tensors (a learned bias table, trained ALiBi slopes) ------------------------------

CAPTURE_CASES = {
    "table_bias": lambda T, P: (lambda s, b, h, q, k: s + T[h, q, k]),
    "tiled_table": lambda T, P: (lambda s, b, h, q, k: s * 2 + T[h, q // 3, k % 3]),
    "multiplicative": lambda T, P: (lambda s, b, h, q, k: s * T[h, q, k]),
    "trained_alibi": lambda T, P: (lambda s, b, h, q, k: s - P[h] * (q - k).abs()),
    "two_loads": lambda T, P: (lambda s, b, h, q, k: torch.tanh(s / 10) * 10 + T[h, q, k] * T[h, k, q] + P[h]),
}


@pytest.mark.parametrize("name", list(CAPTURE_CASES))
def test_captured_tensor_gradients_equal_autograd(name):
    """dL/dT for L = sum(g * score_mod(...)): the host model scatter-adds g * d score_mod / d (loaded element)
    at each load's indices (b200c.dsl.mod_grad.capture_derivatives), against torch autograd."""
    from b200c.dsl.mod_eval import values
    from b200c.dsl.mod_grad import capture_derivatives

    make = CAPTURE_CASES[name]
    ms, caps = trace_mods(score_mod=make(TABLE, SLOPES))
    score, b, h, q, k = _grid()
    g = torch.randn(score.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    t64, p64 = TABLE.double().requires_grad_(True), SLOPES.double().requires_grad_(True)
    (g * make(t64, p64)(score, b, h, q, k)).sum().backward()
    want = {id(TABLE): t64.grad if t64.grad is not None else torch.zeros_like(t64),
            id(SLOPES): p64.grad if p64.grad is not None else torch.zeros_like(p64)}
    env = dict(score=score, b=b, h=h, q_idx=q, kv_idx=k)
    caps64 = [c.double() for c in caps]
    vals = values(ms.score_mod, env, caps64)
    got = [torch.zeros_like(c) for c in caps64]
    loads = {n.name: n for n in ms.score_mod.nodes if n.op == "load"}
    found = capture_derivatives(ms.score_mod)
    assert sorted(x[1] for x in found) == sorted(loads)
    for ti, node, dg in found:
        d = torch.broadcast_to(values(dg, env, caps64)[dg.output], score.shape)
        idx = tuple(torch.broadcast_to(vals[a].long(), score.shape) for a in loads[node].args)
        got[ti].index_put_(idx, g * d, accumulate=True)
    for c, grad in zip(caps, got):
        ref = want[id(c)] if any(c is x for x in (TABLE, SLOPES)) else None
        assert ref is not None, "a captured tensor the test does not know"
        assert torch.allclose(grad, ref, rtol=1e-10, atol=1e-10), (name, float((grad - ref).abs().max()))

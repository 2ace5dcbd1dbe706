"""Tracing of attention mods (b200c/dsl/mods.py): every canonical op of OPS traced from a small user
function, each traced graph evaluated by an interpreter written here (walking the nodes with torch) and
compared with the user's function called on broadcast index tensors; the records' identity rules
(cache key) and every error message. CPU only.

``evaluate`` and ``CASES`` are shared with tests/test_mods_codegen.py (the C lowering is compared with
this interpreter)."""
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from b200c.dsl.mod_records import MASK_PARAMS, SCORE_PARAMS, ModSet
from b200c.dsl.mods import ARITY, OPS, const_value, trace_mods, uses
from b200c.errors import ScheduleError

HERE = Path(__file__).resolve()
B, H, SQ, SKV = 2, 3, 5, 7
DTYPES = {"f32": torch.float32, "i32": torch.int32, "bool": torch.bool}


# ---------------------------------------------------------------------------------------------------
# an interpreter of ModGraphs, independent of the tracer: one torch expression per canonical op


def _as(x, vtype):
    return x.to(DTYPES[vtype])


def _promoted(*types):
    return "f32" if "f32" in types else "i32" if "i32" in types else "bool"


def evaluate(graph, tensors, score, b, h, q_idx, kv_idx):
    """The value of ``graph`` (a ModGraph) on broadcastable tensors (score FP32, indices int32), computed
    node by node in the node's type; ``tensors`` are the captured tensors."""
    env = dict(zip(SCORE_PARAMS, (score, b, h, q_idx, kv_idx)))
    node_types = {}
    for n in graph.nodes:
        node_types[n.name] = n.type
        if n.op == "param":
            assert n.name in env and env[n.name].dtype == DTYPES[n.type]
            continue
        a = [env[x] for x in n.args]
        ts = [node_types[x] for x in n.args]
        t = n.type
        op = n.op
        if op == "const":
            v = torch.tensor(const_value(n), dtype=DTYPES[t])
        elif op == "load":
            v = tensors[n.tensor][tuple(i.long() for i in a)]
        elif op in ("add", "sub", "mul"):
            x, y = _as(a[0], t), _as(a[1], t)
            v = x + y if op == "add" else x - y if op == "sub" else x * y
        elif op == "truediv":
            v = a[0].float() / a[1].float()
        elif op == "floordiv":
            v = torch.floor_divide(_as(a[0], t), _as(a[1], t))
        elif op == "mod":
            v = torch.remainder(_as(a[0], t), _as(a[1], t))
        elif op == "neg":
            v = -_as(a[0], t)
        elif op == "abs":
            v = torch.abs(_as(a[0], t))
        elif op == "pow":
            v = torch.pow(a[0].float(), a[1].float())
        elif op in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos"):
            v = getattr(torch, op)(a[0].float())
        elif op in ("minimum", "maximum"):
            x, y = _as(a[0], t), _as(a[1], t)
            if t == "bool":
                v = (x & y) if op == "minimum" else (x | y)
            else:
                v = torch.minimum(x, y) if op == "minimum" else torch.maximum(x, y)
        elif op == "clamp":
            x, lo, hi = (_as(v_, t) for v_ in a)
            v = torch.minimum(torch.maximum(x, lo), hi)
        elif op == "where":
            assert a[0].dtype == torch.bool
            v = torch.where(a[0], _as(a[1], t), _as(a[2], t))
        elif op in ("lt", "le", "gt", "ge", "eq", "ne"):
            c = _promoted(*ts)
            v = getattr(torch, op)(_as(a[0], c), _as(a[1], c))
        elif op in ("logical_and", "logical_or"):
            v = getattr(torch, op)(a[0], a[1])
        elif op == "logical_not":
            v = torch.logical_not(a[0])
        elif op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            v = getattr(torch, op)(_as(a[0], t), _as(a[1], t))
        elif op == "bitwise_not":
            v = torch.bitwise_not(_as(a[0], t))
        elif op == "to_float":
            v = a[0].float()
        elif op == "to_int":
            v = a[0].to(torch.int32)
        elif op == "to_bool":
            v = a[0] != 0
        elif op == "round_bf16":
            v = a[0].float().to(torch.bfloat16).float()
        elif op == "round_f16":
            v = a[0].float().half().float()
        else:
            raise AssertionError(f"the interpreter has no rule for {op}")
        env[n.name] = _as(v, t)
    return env[graph.output]


def index_grid(seed=0):
    """score (B, H, SQ, SKV) FP32 and the broadcast int32 index tensors b, h, q_idx, kv_idx."""
    g = torch.Generator().manual_seed(seed)
    score = torch.randn(B, H, SQ, SKV, generator=g) * 4
    b = torch.arange(B, dtype=torch.int32).view(B, 1, 1, 1)
    h = torch.arange(H, dtype=torch.int32).view(1, H, 1, 1)
    q = torch.arange(SQ, dtype=torch.int32).view(1, 1, SQ, 1)
    kv = torch.arange(SKV, dtype=torch.int32).view(1, 1, 1, SKV)
    return score, b, h, q, kv


def run_reference(kind, fn, score, b, h, q, kv):
    return fn(score, b, h, q, kv) if kind == "score_mod" else fn(b, h, q, kv)


def check_against_reference(kind, fn, reference=None, seed=0):
    """Trace ``fn``, evaluate its graph and compare with ``reference`` (default ``fn``) on the grid."""
    mods, tensors = trace_mods(**{kind: fn})
    graph = getattr(mods, kind)
    score, b, h, q, kv = index_grid(seed)
    got = evaluate(graph, tensors, score, b, h, q, kv)
    want = torch.as_tensor(run_reference(kind, reference or fn, score, b, h, q, kv))
    got, want = torch.broadcast_tensors(got, want)
    if kind == "mask_mod":
        assert got.dtype == torch.bool
        assert torch.equal(got, want.bool()), f"{graph.expression}: {got} != {want}"
    else:
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want.double(), rtol=2e-6, atol=2e-6, equal_nan=True,
                                   msg=lambda m: f"{graph.expression}: {m}")
    return mods, tensors


# ---------------------------------------------------------------------------------------------------
# closure tensors of the cases (some non-contiguous views: the strides are kernel inputs)

_g = torch.Generator().manual_seed(1)
BIAS = torch.randn(H, generator=_g)
TABLE_BF16 = torch.randn(B, H, SKV, SQ, generator=_g).to(torch.bfloat16).transpose(2, 3)  # (B, H, SQ, SKV) view
TABLE_F16 = torch.randn(B, H, SQ, generator=_g).half()
DOC_I64 = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3], dtype=torch.int64)
LENS_I32 = torch.tensor([3, 6], dtype=torch.int32)
KEEP_BOOL = torch.rand(SKV, B, generator=_g).gt(0.3).t()  # (B, SKV) view

# (name, kind, function, reference or None, the canonical ops the graph must contain)
CASES = [
    ("add", "score_mod", lambda score, b, h, q_idx, kv_idx: score + q_idx + 1, None, {"add"}),
    ("sub", "score_mod", lambda score, b, h, q_idx, kv_idx: score - kv_idx * 0.5 - 2, None, {"sub"}),
    ("mul", "score_mod", lambda score, b, h, q_idx, kv_idx: score * 2.5 * (q_idx - kv_idx), None, {"mul"}),
    ("truediv", "score_mod", lambda score, b, h, q_idx, kv_idx: score / 3.0 + q_idx / (kv_idx + 1), None,
     {"truediv"}),
    ("floordiv_int", "score_mod", lambda score, b, h, q_idx, kv_idx:
        score + (q_idx - kv_idx) // 3 + torch.div(q_idx - 7, kv_idx + 1, rounding_mode="floor"), None,
     {"floordiv"}),
    ("floordiv_float", "score_mod", lambda score, b, h, q_idx, kv_idx:
        score // 0.7 + torch.floor_divide(score, -1.3), None, {"floordiv"}),
    ("mod_int", "score_mod", lambda score, b, h, q_idx, kv_idx:
        score + (q_idx - kv_idx) % 3 + torch.remainder(q_idx - 7, -4), None, {"mod"}),
    ("mod_float", "score_mod", lambda score, b, h, q_idx, kv_idx: score % 0.7 + torch.remainder(score, -1.3),
     None, {"mod"}),
    ("neg", "score_mod", lambda score, b, h, q_idx, kv_idx: -score + (-q_idx) + torch.neg(score), None, {"neg"}),
    ("abs", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.abs(score) + abs(q_idx - kv_idx), None,
     {"abs"}),
    ("pow", "score_mod", lambda score, b, h, q_idx, kv_idx:
        score ** 2 + 2.0 ** (score * 0.1) + torch.pow(score.abs() + 1, 0.5), None, {"pow"}),
    ("exp", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.exp(score * 0.1) + (q_idx * 0.5).exp(), None,
     {"exp"}),
    ("exp2", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.exp2(score * 0.1), None, {"exp2"}),
    ("log", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.log(score.abs() + 1.0), None, {"log"}),
    ("log2", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.log2(score.abs() + 1.0) + torch.log2(kv_idx + 1),
     None, {"log2"}),
    ("sqrt", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.sqrt(score.abs()), None, {"sqrt"}),
    ("rsqrt", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.rsqrt(score.abs() + 0.5), None, {"rsqrt"}),
    ("tanh", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.tanh(score / 30.0) * 30.0, None, {"tanh"}),
    ("sigmoid", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.sigmoid(score) + score.sigmoid(), None,
     {"sigmoid"}),
    ("sin", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.sin(score), None, {"sin"}),
    ("cos", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.cos(score) + torch.cos(q_idx), None, {"cos"}),
    ("minimum", "score_mod", lambda score, b, h, q_idx, kv_idx:
        torch.minimum(score, q_idx * 0.1) + torch.min(score, kv_idx.float()) + score.clamp(max=1.0), None,
     {"minimum"}),
    ("maximum", "score_mod", lambda score, b, h, q_idx, kv_idx:
        torch.maximum(score, kv_idx - q_idx) + torch.clamp(score, min=0.0) + torch.max(q_idx, kv_idx), None,
     {"maximum"}),
    ("clamp", "score_mod", lambda score, b, h, q_idx, kv_idx:
        score.clamp(-1.0, 1.0) + torch.clamp(q_idx - kv_idx, -2, 2), None, {"clamp"}),
    ("where", "score_mod", lambda score, b, h, q_idx, kv_idx: torch.where(q_idx >= kv_idx, score, -float("inf")),
     None, {"where", "ge"}),
    ("bitwise_int", "score_mod", lambda score, b, h, q_idx, kv_idx:
        score + ((q_idx & 3) ^ (kv_idx | 1)) + ~q_idx, None, {"bitwise_and", "bitwise_xor", "bitwise_or",
                                                            "bitwise_not"}),
    ("to_float", "score_mod", lambda score, b, h, q_idx, kv_idx: score + q_idx.float() / 2, None, {"to_float"}),
    ("to_int", "score_mod", lambda score, b, h, q_idx, kv_idx: score + (score * 3).int() + (score * 2).long(),
     None, {"to_int"}),
    ("round_bf16", "score_mod", lambda score, b, h, q_idx, kv_idx: score.to(torch.bfloat16).float(), None,
     {"round_bf16"}),
    ("round_f16", "score_mod", lambda score, b, h, q_idx, kv_idx: score.half().float(), None, {"round_f16"}),
    ("load_f32", "score_mod", lambda score, b, h, q_idx, kv_idx: score + BIAS[h] * (kv_idx - q_idx), None,
     {"load"}),
    ("load_bf16", "score_mod", lambda score, b, h, q_idx, kv_idx: score + TABLE_BF16[b, h, q_idx, kv_idx], None,
     {"load"}),
    ("load_chained_f16", "score_mod", lambda score, b, h, q_idx, kv_idx: score + TABLE_F16[b][h][q_idx],
     lambda score, b, h, q_idx, kv_idx: score + TABLE_F16[b, h, q_idx], {"load"}),
    ("const", "score_mod", lambda score, b, h, q_idx, kv_idx:
        torch.zeros_like(score) + torch.ones_like(score) * torch.full_like(score, 2.5) + torch.tensor(3.0)
        + score * 0, None, {"const"}),
    ("int_output", "score_mod", lambda score, b, h, q_idx, kv_idx: q_idx - kv_idx, None, {"to_float"}),
    ("compare", "mask_mod", lambda b, h, q_idx, kv_idx:
        (q_idx < kv_idx + 2) & (q_idx <= 3) | (kv_idx > q_idx + 1) ^ (h >= 1) | (b == 1) & (q_idx != kv_idx), None,
     {"lt", "le", "gt", "ge", "eq", "ne"}),
    ("logical", "mask_mod", lambda b, h, q_idx, kv_idx:
        torch.logical_and(q_idx >= kv_idx, torch.logical_not(q_idx - kv_idx > 2)) | torch.logical_or(b == 1, h),
     None, {"logical_and", "logical_or", "logical_not"}),
    ("bitwise_bool", "mask_mod", lambda b, h, q_idx, kv_idx: ~(q_idx < kv_idx) & (b == 0), None,
     {"bitwise_not", "bitwise_and"}),
    ("to_bool", "mask_mod", lambda b, h, q_idx, kv_idx: (q_idx - kv_idx).bool() & h.to(torch.bool), None,
     {"to_bool"}),
    ("int_mask_output", "mask_mod", lambda b, h, q_idx, kv_idx: (q_idx - kv_idx) % 2 != 0, None, {"mod", "ne"}),
    ("load_i64", "mask_mod", lambda b, h, q_idx, kv_idx: DOC_I64[q_idx] == DOC_I64[kv_idx], None, {"load"}),
    ("load_i32_bool", "mask_mod", lambda b, h, q_idx, kv_idx:
        (kv_idx < LENS_I32[b]) & KEEP_BOOL[b, kv_idx] | (kv_idx < LENS_I32[b * 0]), None, {"load"}),
]


def test_every_canonical_op_has_a_case():
    covered = set().union(*(ops for *_, ops in CASES))
    assert covered == set(OPS), f"no case for {sorted(set(OPS) - covered)}"
    assert set(ARITY) | {"load"} == set(OPS)


@pytest.mark.parametrize("name, kind, fn, reference, ops", CASES, ids=[c[0] for c in CASES])
def test_case_traces_and_evaluates_like_the_function(name, kind, fn, reference, ops):
    mods, _ = check_against_reference(kind, fn, reference)
    graph = getattr(mods, kind)
    present = {n.op for n in graph.nodes}
    assert ops <= present, f"{name}: {sorted(ops - present)} missing from {graph.expression}"
    for n in graph.nodes:  # well-formed SSA: operands defined before use, arities as OPS says
        if n.op not in ("param", "load"):
            assert len(n.args) == ARITY[n.op], n
    assert {n.type for n in graph.nodes} <= {"f32", "i32", "bool"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_inputs(seed):
    """The grid with other random scores, for the float cases."""
    for name, kind, fn, reference, _ in CASES:
        if kind == "score_mod":
            check_against_reference(kind, fn, reference, seed=seed)


def test_graph_shape_names_params_and_types():
    mods, tensors = trace_mods(score_mod=lambda s, bb, hh, qq, kk: torch.tanh(s / 30.0) * 30.0,
                               mask_mod=lambda bb, hh, qq, kk: qq >= kk)
    sm, mm = mods.score_mod, mods.mask_mod
    assert [n.name for n in sm.nodes[:5]] == list(SCORE_PARAMS)  # parameter names are canonical
    assert [n.type for n in sm.nodes[:5]] == ["f32", "i32", "i32", "i32", "i32"]
    assert [n.name for n in mm.nodes[:4]] == list(MASK_PARAMS)
    assert [n.name for n in sm.nodes[5:]] == [f"v{i}" for i in range(len(sm.nodes) - 5)]
    assert sm.output == sm.nodes[-1].name and sm.kind == "score_mod" and mm.kind == "mask_mod"
    assert sm.expression == "tanh(score / 30.0) * 30.0"
    assert mm.expression == "q_idx >= kv_idx"
    assert uses(sm) == {"score"} and uses(mm) == {"q_idx", "kv_idx"}
    assert mods.captured == () and tensors == () and not mods.sinks


def test_dead_values_are_dropped():
    def fn(score, b, h, q_idx, kv_idx):
        unused = torch.exp(score) * BIAS[h]  # noqa: F841 - dead: neither the exp nor the load stays
        return score + 1.0
    mods, tensors = trace_mods(fn)
    assert [n.op for n in mods.score_mod.nodes] == ["param"] * 5 + ["const", "add"]
    assert mods.captured == () and tensors == ()


def test_identity_and_constant_outputs():
    mods, _ = trace_mods(lambda score, b, h, q_idx, kv_idx: score, lambda b, h, q_idx, kv_idx: True)
    assert mods.score_mod.output == "score" and mods.score_mod.expression == "score"
    assert mods.mask_mod.expression == "True" and uses(mods.mask_mod) == frozenset()


def test_expressions():
    cases = {
        (lambda score, b, h, q_idx, kv_idx: score + BIAS[h] * (kv_idx - q_idx)): "score + cap0[h] * (kv_idx - q_idx)",
        (lambda b, h, q_idx, kv_idx: DOC_I64[q_idx] == DOC_I64[kv_idx]): "cap0[q_idx] == cap0[kv_idx]",
        (lambda b, h, q_idx, kv_idx: (q_idx - 4 <= kv_idx) & (kv_idx <= q_idx)):
            "(q_idx - 4 <= kv_idx) & (kv_idx <= q_idx)",
        (lambda score, b, h, q_idx, kv_idx: -(score - 1.5) ** 2 / (2 - q_idx)): "-((score - 1.5) ** 2) / (2 - q_idx)",
        (lambda score, b, h, q_idx, kv_idx: torch.where(q_idx >= kv_idx, score, -float("inf"))):
            "where(q_idx >= kv_idx, score, -inf)",
        (lambda score, b, h, q_idx, kv_idx: (score * 1e-05).to(torch.bfloat16) + TABLE_BF16[b][h][q_idx, kv_idx]):
            "round_bf16(score * 1e-05) + cap0[b, h, q_idx, kv_idx]",
    }
    for fn, want in cases.items():
        mods, _ = trace_mods(**{("score_mod" if fn.__code__.co_argcount == 5 else "mask_mod"): fn})
        got = (mods.score_mod or mods.mask_mod).expression
        assert got == want


def test_captured_tensors_shared_and_ordered():
    """A tensor both functions read is one captured tensor; order: first use, score_mod first."""
    mods, tensors = trace_mods(
        score_mod=lambda score, b, h, q_idx, kv_idx: score + BIAS[h] + TABLE_F16[b, h, q_idx],
        mask_mod=lambda b, h, q_idx, kv_idx: (DOC_I64[q_idx] == DOC_I64[kv_idx]) & (BIAS[h] > 0))
    assert [(c.dtype, c.ndim) for c in mods.captured] == [("f32", 1), ("f16", 3), ("i64", 1)]
    assert tensors[0] is BIAS and tensors[1] is TABLE_F16 and tensors[2] is DOC_I64
    loads = [n.tensor for n in mods.mask_mod.nodes if n.op == "load"]
    assert loads == [2, 2, 0]


def test_sinks_flag():
    mods, tensors = trace_mods(sinks=torch.zeros(H))
    assert mods.sinks and mods.score_mod is None and mods.mask_mod is None and tensors == ()
    assert not mods.empty and ModSet().empty
    mods, tensors = trace_mods(lambda score, b, h, q_idx, kv_idx: score + BIAS[h], sinks=torch.zeros(H))
    assert mods.sinks and len(tensors) == 1


# ---------------------------------------------------------------------------------------------------
# identity: the kernel cache key


def _softcap_a(cap, bias):
    def my_score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap) + bias[h]
    return my_score_mod


_OTHER_FILE = '''
import torch
def make(cap, bias):


    def another_name(s, batch, head, q, k):  # other names, other file, other lines
        return cap * torch.tanh(s / cap) + bias[head]
    return another_name
'''


def _softcap_b(cap, bias):
    ns = {}
    exec(compile(_OTHER_FILE, "/somewhere/else/user_mods.py", "exec"), ns)  # noqa: S102 - test input
    return ns["make"](cap, bias)


def test_same_function_twice_is_the_same_modset():
    a, ta = trace_mods(_softcap_a(30.0, torch.randn(4)))
    b, tb = trace_mods(_softcap_b(30.0, torch.randn(16, dtype=torch.float32)[::2]))
    assert a == b and a.to_json() == b.to_json()
    assert ta[0] is not tb[0]
    assert ModSet.from_json(a.to_json()) == a


def test_different_constants_or_captures_differ():
    base = trace_mods(_softcap_a(30.0, torch.randn(4)))[0]
    assert trace_mods(_softcap_a(50.0, torch.randn(4)))[0].to_json() != base.to_json()
    assert trace_mods(_softcap_a(30.0, torch.randn(4).bfloat16()))[0].to_json() != base.to_json()
    assert trace_mods(_softcap_a(30.0, torch.randn(4, 4)[0]))[0].to_json() == base.to_json()
    # a float constant keeps its exact value (repr round trip), not a rounded one
    x = 0.1 + 0.2
    g = trace_mods(lambda score, b, h, q_idx, kv_idx: score * x)[0]
    c = [n for n in g.score_mod.nodes if n.op == "const"][0]
    assert const_value(c) == x and repr(const_value(ModSet.from_json(g.to_json()).score_mod.nodes[5])) == repr(x)
    assert trace_mods(lambda score, b, h, q_idx, kv_idx: score * 0.3)[0] != g


def test_non_finite_constants_survive_json():
    """msgspec writes inf/nan as null: the records keep them as strings, so +inf, -inf and nan differ."""
    outs = {}
    for v in (math.inf, -math.inf, math.nan):
        m = trace_mods(lambda score, b, h, q_idx, kv_idx, v=v: torch.where(q_idx >= kv_idx, score, v))[0]
        back = ModSet.from_json(m.to_json())
        assert back == m
        c = [n for n in back.score_mod.nodes if n.op == "const"][0]
        got = const_value(c)
        assert (math.isnan(got) and math.isnan(v)) or got == v
        outs[repr(v)] = m.to_json()
    assert len(set(outs.values())) == 3


def test_int_and_float_constants_differ():
    a = trace_mods(lambda score, b, h, q_idx, kv_idx: score + q_idx * 2)[0]
    b = trace_mods(lambda score, b, h, q_idx, kv_idx: score + q_idx * 2.0)[0]
    assert a.to_json() != b.to_json()


def test_import_b200c_stays_torch_free():
    code = ("import sys, b200c, b200c.dsl.mods, b200c.codegen.mods; "
            "assert 'torch' not in sys.modules, 'torch imported'; assert 'b200c.mods' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------------------------
# errors: each says what was wrong, the limit and what to change, and where


def _line_of(marker: str) -> int:
    for i, line in enumerate(HERE.read_text().splitlines(), 1):
        if marker in line and "_line_of(" not in line:
            return i
    raise AssertionError(marker)


def _erf_mod(score, b, h, q_idx, kv_idx):
    return torch.erf(score) * 2  # MARK-erf


def _method_mod(score, b, h, q_idx, kv_idx):
    return score.erfinv()  # MARK-erfinv


def _math_mod(score, b, h, q_idx, kv_idx):
    import math as m
    return m.sqrt(score)  # MARK-math


def _branchy_mod(score, b, h, q_idx, kv_idx):
    if q_idx >= kv_idx:  # MARK-if
        return score
    return score - 1.0


def _minmax_mod(b, h, q_idx, kv_idx):
    return min(q_idx, kv_idx) > 2  # MARK-min


def test_unsupported_op_names_the_op_and_line():
    with pytest.raises(ScheduleError) as e:
        trace_mods(_erf_mod)
    msg = str(e.value)
    assert "torch.erf is not supported" in msg and f"{HERE}:{_line_of('MARK-erf')}" in msg
    assert "torch.tanh" not in msg and "tanh" in msg  # the table is listed
    with pytest.raises(ScheduleError, match=r"torch\.Tensor\.erfinv is not supported") as e:
        trace_mods(_method_mod)
    assert f":{_line_of('MARK-erfinv')}" in str(e.value)
    with pytest.raises(ScheduleError, match=r"math\.sqrt") as e:
        trace_mods(_math_mod)
    assert f":{_line_of('MARK-math')}" in str(e.value)


def test_control_flow_is_refused_with_the_line():
    for fn, marker, kind in ((_branchy_mod, "MARK-if", "score_mod"), (_minmax_mod, "MARK-min", "mask_mod")):
        with pytest.raises(ScheduleError) as e:
            trace_mods(**{kind: fn})
        msg = str(e.value)
        assert "data-dependent Python control flow" in msg and "cannot be compiled" in msg
        assert "torch.where" in msg and f"{HERE}:{_line_of(marker)}" in msg


def test_wrong_parameter_counts():
    with pytest.raises(ScheduleError, match=r"score_mod must take exactly 5 positional parameters.*takes 4"):
        trace_mods(score_mod=lambda b, h, q_idx, kv_idx: q_idx >= kv_idx)
    with pytest.raises(ScheduleError, match=r"mask_mod must take exactly 4 positional parameters.*takes 5"):
        trace_mods(mask_mod=lambda score, b, h, q_idx, kv_idx: score)
    with pytest.raises(ScheduleError, match=r"takes 1 \('x',\) and the required keyword-only"):
        trace_mods(mask_mod=lambda x, *, y: x)
    # what can be called with the parameters is fine: *args, extra parameters with defaults
    assert trace_mods(mask_mod=lambda *args: args[2] >= args[3])[0].mask_mod.expression == "q_idx >= kv_idx"
    with pytest.raises(ScheduleError, match="not a function"):
        trace_mods(score_mod=3.0)


def test_callable_objects_and_partials_trace():
    import functools

    class Mod:
        def __call__(self, score, b, h, q_idx, kv_idx):
            return score * 2.0

    def shifted(shift, b, h, q_idx, kv_idx):
        return q_idx + shift >= kv_idx

    assert trace_mods(Mod())[0].score_mod.expression == "score * 2.0"
    assert trace_mods(mask_mod=functools.partial(shifted, 3))[0].mask_mod.expression == "q_idx + 3 >= kv_idx"


def test_captured_tensor_dtype_and_rank_errors():
    f64 = torch.randn(H, dtype=torch.float64)
    with pytest.raises(ScheduleError) as e:
        trace_mods(lambda score, b, h, q_idx, kv_idx: score + f64[h])
    msg = str(e.value)
    assert "torch.float64" in msg and "float32, bfloat16, float16, int32, int64, bool" in msg
    zero_dim = torch.tensor(2.0)
    with pytest.raises(ScheduleError) as e:
        trace_mods(lambda score, b, h, q_idx, kv_idx: score * zero_dim)
    assert "0-dim" in str(e.value) and "Python number" in str(e.value) and "1-element tensor" in str(e.value)
    # a 0-dim tensor made inside the function is a constant
    m = trace_mods(lambda score, b, h, q_idx, kv_idx: score * torch.tensor(2.0))[0]
    assert m.score_mod.expression == "score * 2.0" and m.captured == ()


def test_indexing_errors():
    t2 = torch.randn(B, H)
    with pytest.raises(ScheduleError, match=r"2-D tensor is indexed in only 1 dimension"):
        trace_mods(lambda score, b, h, q_idx, kv_idx: score + t2[b])
    with pytest.raises(ScheduleError, match=r"indexed with 3 indices at .*; give exactly 2"):
        trace_mods(lambda score, b, h, q_idx, kv_idx: score + t2[b, h, q_idx])
    with pytest.raises(ScheduleError, match=r"used without an index"):
        trace_mods(lambda score, b, h, q_idx, kv_idx: score + t2)
    with pytest.raises(ScheduleError, match=r"negative constant -1"):
        trace_mods(lambda score, b, h, q_idx, kv_idx: score + t2[b, -1])
    with pytest.raises(ScheduleError, match=r"indexed with a f32 value"):
        trace_mods(lambda score, b, h, q_idx, kv_idx: score + t2[b, score])
    with pytest.raises(ScheduleError, match=r"slice"):
        trace_mods(lambda score, b, h, q_idx, kv_idx: score + t2[b, :])
    with pytest.raises(ScheduleError, match=r"traced value is indexed"):
        trace_mods(lambda score, b, h, q_idx, kv_idx: score[0])


def test_output_type_errors():
    with pytest.raises(ScheduleError) as e:
        trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: q_idx >= kv_idx)
    assert "score_mod returns a bool" in str(e.value) and "mask_mod" in str(e.value)
    with pytest.raises(ScheduleError) as e:
        trace_mods(mask_mod=lambda b, h, q_idx, kv_idx: torch.exp(q_idx * 0.5))
    assert "mask_mod returns a float" in str(e.value) and "comparison" in str(e.value)
    with pytest.raises(ScheduleError, match="returns a tuple"):
        trace_mods(mask_mod=lambda b, h, q_idx, kv_idx: (q_idx, kv_idx))


def test_type_rule_errors():
    with pytest.raises(ScheduleError, match=r"on bool values is not supported.*\.int\(\)"):
        trace_mods(mask_mod=lambda b, h, q_idx, kv_idx: (q_idx > 1) + (kv_idx > 1) > 0)
    with pytest.raises(ScheduleError, match=r"needs bool or integer operands, got a float"):
        trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: score + (score & 1))
    with pytest.raises(ScheduleError, match=r"condition is i32, not a bool"):
        trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: torch.where(q_idx, score, 0.0))
    with pytest.raises(ScheduleError, match=r"does not fit in 32 bits"):
        trace_mods(mask_mod=lambda b, h, q_idx, kv_idx: kv_idx < 2 ** 40)
    with pytest.raises(ScheduleError, match=r"torch.float64 is not supported"):
        trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: score.to(torch.float64))
    with pytest.raises(ScheduleError, match=r"rounding_mode='trunc'"):
        trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: torch.div(score, 2.0, rounding_mode="trunc"))


def test_other_tracing_failures_name_the_line():
    def fn(score, b, h, q_idx, kv_idx):
        return score + [1.0, 2.0][h]  # MARK-list
    with pytest.raises(ScheduleError) as e:
        trace_mods(fn)
    assert f"{HERE}:{_line_of('MARK-list')}" in str(e.value) and "tracing failed" in str(e.value)


def test_sinks_must_be_a_tensor():
    with pytest.raises(ScheduleError, match="sinks is a list"):
        trace_mods(sinks=[0.0, 1.0])


def test_dtype_casts_and_dtype_attribute():
    m = trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: score + q_idx.to(score.dtype)
                   + kv_idx.to(torch.float32) + q_idx.type_as(score) + score.float() + score.to("cpu"))[0]
    ops = [n.op for n in m.score_mod.nodes]
    assert ops.count("to_float") == 3  # score.float() and .to(device) of a float are no-ops

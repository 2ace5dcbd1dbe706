"""The ready-made mods of b200c/mods.py: each recipe traces to the documented formula (its expression),
evaluates like an independent torch formula written here, lowers to C that gives the same values
(g++ on the host), shares a ModSet when written twice, and refuses bad arguments. CPU only."""
import inspect
import math
import shutil
import subprocess

import pytest
import torch

import b200c.mods as recipes
from b200c.dsl.mods import trace_mods
from b200c.errors import ScheduleError
from test_mods_trace import B, H, SKV, SQ, check_against_reference, evaluate, index_grid

_g = torch.Generator().manual_seed(7)
S = max(SQ, SKV)
DOC_1D = torch.tensor([0, 0, 0, 1, 1, 2, 2], dtype=torch.int32)
DOC_2D = torch.randint(0, 3, (B, S), generator=_g).sort(dim=1).values  # int64
PREFIX = torch.tensor([2, 4], dtype=torch.int64)
LENGTHS = torch.tensor([3, 7], dtype=torch.int32)
SLOPES = recipes.alibi_slopes(H)


def _score(fn):
    return ("score_mod", fn)


def _mask(fn):
    return ("mask_mod", fn)


# (name, (kind, mod), expression, independent formula of (score, b, h, q, kv))
RECIPES = [
    ("softcap", _score(recipes.softcap(30.0)), "30.0 * tanh(score / 30.0)",
     lambda s, b, h, q, kv: 30.0 * torch.tanh(s / 30.0)),
    ("alibi", _score(recipes.alibi(SLOPES)), "score + cap0[h] * (kv_idx - q_idx)",
     lambda s, b, h, q, kv: s - SLOPES[h.long()] * (q - kv).float()),
    ("sliding_window", _mask(recipes.sliding_window(2)), "(q_idx - 2 <= kv_idx) & (kv_idx <= q_idx)",
     lambda s, b, h, q, kv: (q - kv >= 0) & (q - kv <= 2)),
    ("sliding_window_lr", _mask(recipes.sliding_window(1, 2)), "(q_idx - 1 <= kv_idx) & (kv_idx <= q_idx + 2)",
     lambda s, b, h, q, kv: (kv - q >= -1) & (kv - q <= 2)),
    ("causal", _mask(recipes.causal()), "q_idx >= kv_idx", lambda s, b, h, q, kv: kv <= q),
    ("document_1d", _mask(recipes.document(DOC_1D)), "cap0[q_idx] == cap0[kv_idx]",
     lambda s, b, h, q, kv: DOC_1D[q.long()] == DOC_1D[kv.long()]),
    ("document_2d", _mask(recipes.document(DOC_2D)), "cap0[b, q_idx] == cap0[b, kv_idx]",
     lambda s, b, h, q, kv: DOC_2D[b.long(), q.long()] == DOC_2D[b.long(), kv.long()]),
    ("prefix_lm_int", _mask(recipes.prefix_lm(3)), "(kv_idx < 3) | (q_idx >= kv_idx)",
     lambda s, b, h, q, kv: (kv < 3) | (kv <= q)),
    ("prefix_lm_tensor", _mask(recipes.prefix_lm(PREFIX)), "(kv_idx < cap0[b]) | (q_idx >= kv_idx)",
     lambda s, b, h, q, kv: (kv < PREFIX[b.long()]) | (kv <= q)),
    ("key_padding", _mask(recipes.key_padding(LENGTHS)), "kv_idx < cap0[b]",
     lambda s, b, h, q, kv: kv < LENGTHS[b.long()]),
    ("and_masks", _mask(recipes.and_masks(recipes.causal(), recipes.document(DOC_1D), recipes.key_padding(LENGTHS))),
     "(q_idx >= kv_idx) & (cap0[q_idx] == cap0[kv_idx]) & (kv_idx < cap1[b])",
     lambda s, b, h, q, kv: (kv <= q) & (DOC_1D[q.long()] == DOC_1D[kv.long()]) & (kv < LENGTHS[b.long()])),
    ("or_masks", _mask(recipes.or_masks(recipes.sliding_window(1), recipes.prefix_lm(2))),
     "(q_idx - 1 <= kv_idx) & (kv_idx <= q_idx) | ((kv_idx < 2) | (q_idx >= kv_idx))",
     lambda s, b, h, q, kv: ((q - kv >= 0) & (q - kv <= 1)) | (kv < 2) | (kv <= q)),
    ("and_masks_empty", _mask(recipes.and_masks()), "True", lambda s, b, h, q, kv: torch.tensor(True)),
    ("or_masks_empty", _mask(recipes.or_masks()), "False", lambda s, b, h, q, kv: torch.tensor(False)),
]


@pytest.mark.parametrize("name, mod, expression, formula", RECIPES, ids=[r[0] for r in RECIPES])
def test_recipe_traces_to_its_formula(name, mod, expression, formula):
    kind, fn = mod
    mods, tensors = check_against_reference(kind, fn)  # the graph evaluates like the function
    graph = getattr(mods, kind)
    assert graph.expression == expression
    score, b, h, q, kv = index_grid(3)
    got = evaluate(graph, tensors, score, b, h, q, kv)
    want = torch.as_tensor(formula(score, b, h, q, kv))
    got, want = torch.broadcast_tensors(got, want)
    if kind == "mask_mod":
        assert torch.equal(got, want.bool())
    else:
        torch.testing.assert_close(got, want.float(), rtol=2e-6, atol=2e-6)


def test_alibi_slopes_are_press_et_al():
    assert recipes.alibi_slopes(8).tolist() == [2.0 ** -i for i in range(1, 9)]
    assert recipes.alibi_slopes(1).tolist() == [2.0 ** -8]
    s12 = recipes.alibi_slopes(12)
    want = [2.0 ** (-i) for i in range(1, 9)] + [2.0 ** (-0.5 * i) for i in (1, 3, 5, 7)]
    assert s12.dtype == torch.float32 and s12.shape == (12,)
    torch.testing.assert_close(s12, torch.tensor(want), rtol=0, atol=0)
    with pytest.raises(ScheduleError, match="heads must be an int >= 1"):
        recipes.alibi_slopes(0)


def test_recipes_written_twice_share_a_modset():
    a = trace_mods(recipes.alibi(torch.randn(4)), recipes.document(torch.zeros(9, dtype=torch.int32)))[0]
    b = trace_mods(recipes.alibi(torch.randn(16)[::2]), recipes.document(torch.ones(3, dtype=torch.int32)))[0]
    assert a.to_json() == b.to_json()
    assert trace_mods(recipes.softcap(30.0))[0] == trace_mods(recipes.softcap(30))[0]
    assert trace_mods(recipes.softcap(30.0))[0] != trace_mods(recipes.softcap(50.0))[0]
    assert trace_mods(mask_mod=recipes.sliding_window(4))[0] != trace_mods(mask_mod=recipes.sliding_window(8))[0]
    # an int64 and an int32 tensor are different kernels (the element type is read differently)
    c = trace_mods(mask_mod=recipes.document(torch.zeros(9, dtype=torch.int64)))[0]
    assert c.captured[0].dtype == "i64" and c != trace_mods(mask_mod=recipes.document(DOC_1D))[0]


def test_a_tensor_used_by_several_masks_is_captured_once():
    keep = recipes.key_padding(LENGTHS)
    mods, tensors = trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: score + LENGTHS[b],
                               mask_mod=recipes.and_masks(keep, keep))
    assert len(mods.captured) == 1 and tensors == (LENGTHS,)


def test_recipe_argument_errors():
    with pytest.raises(ScheduleError, match="cap must be a number > 0 and <= 1e30"):
        recipes.softcap(0.0)
    with pytest.raises(ScheduleError, match="cap must be a number > 0 and <= 1e30"):
        recipes.softcap(math.inf)
    with pytest.raises(ScheduleError, match=r"float32 tensor of shape \(H,\)"):
        recipes.alibi(torch.ones(2, 2))
    with pytest.raises(ScheduleError, match=r"float32 tensor of shape \(H,\)"):
        recipes.alibi([0.5, 0.25])
    with pytest.raises(ScheduleError, match="left=-1; it must be an int >= 0"):
        recipes.sliding_window(-1)
    with pytest.raises(ScheduleError, match="right=1.5"):
        recipes.sliding_window(4, 1.5)
    with pytest.raises(ScheduleError, match=r"torch.float32; it must be torch.int32 or torch.int64"):
        recipes.document(torch.zeros(4))
    with pytest.raises(ScheduleError, match=r"must be \(S,\) or \(B, S\)"):
        recipes.document(torch.zeros(1, 2, 3, dtype=torch.int32))
    with pytest.raises(ScheduleError, match=r"must be \(B,\)"):
        recipes.key_padding(torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ScheduleError, match="prefix_len=-2"):
        recipes.prefix_lm(-2)
    with pytest.raises(ScheduleError, match="argument 1 is a int"):
        recipes.and_masks(recipes.causal(), 3)
    with pytest.raises(ScheduleError, match="argument 0 is a str"):
        recipes.or_masks("causal")


def test_recipes_are_documented():
    assert "sinks=" in recipes.__doc__ and "(H,)" in recipes.__doc__ and "LSE" in recipes.__doc__
    assert "softmax_scale" in recipes.__doc__ and "do not recompile" in recipes.__doc__
    for name in recipes.__all__:
        doc = inspect.getdoc(getattr(recipes, name))
        assert doc and len(doc) > 80, name
    assert "cap * tanh(score / cap)" in recipes.softcap.__doc__
    assert "score + slopes[h] * (kv_idx - q_idx)" in recipes.alibi.__doc__
    assert "top-left" in recipes.causal.__doc__ and "top-left" in recipes.sliding_window.__doc__.lower()


def test_import_b200c_does_not_import_the_recipes():
    import sys as _sys
    code = "import sys, b200c; assert 'b200c.mods' not in sys.modules"
    r = subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH to run the C lowering on the host")
def test_recipes_lowered_to_c_match(tmp_path):
    """Every recipe's C (g++, CUDA intrinsics defined for the host) gives the interpreter's values."""
    from test_mods_codegen import N_POINTS, _points, program

    cases = []
    for _, (kind, fn), _, _ in RECIPES:
        mods, tensors = trace_mods(**{kind: fn})
        cases.append((kind, mods, tensors))
    points = _points(5)
    src = tmp_path / "recipes.cpp"
    src.write_text(program(cases, "host", points))
    r = subprocess.run(["g++", "-std=c++17", "-O1", "-w", str(src), "-o", str(tmp_path / "recipes")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    out = subprocess.run([str(tmp_path / "recipes")], capture_output=True, text=True, timeout=60).stdout
    got = [torch.full((N_POINTS,), math.nan) for _ in cases]
    for line in out.splitlines():
        c, i, v = line.split()
        got[int(c)][int(i)] = float.fromhex(v)
    score, b, h, q, kv = points
    for (name, *_), (kind, mods, tensors), g in zip(RECIPES, cases, got):
        want = evaluate(getattr(mods, kind), tensors, score, b, h, q, kv).float().expand(N_POINTS)
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")

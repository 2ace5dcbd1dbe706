"""scripts/real_inputs_sweep.py on CPU: its cases cover issue 10's list, and its checks pass a
correct attention and fail wrong ones (top-left causal, wrong GQA head mapping, LSE in log2
units, NaN rows zeroed, masked rows not zero). The kernel itself runs on the GPU only."""
from __future__ import annotations

import sys
from collections import Counter

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import real_inputs_sweep as sweep  # noqa: E402

BF16 = torch.bfloat16


def test_cases_cover_the_issue():
    cases = sweep.make_cases()
    groups = Counter(c.group for c in cases)
    assert groups["lengths"] == len(sweep.LENGTHS) ** 2 * 2
    pairs = {(c.s_q, c.s_kv, c.causal) for c in cases if c.group == "lengths"}
    assert pairs == {(a, b, c) for a in sweep.LENGTHS for b in sweep.LENGTHS for c in (False, True)}
    assert {c.h // c.h_kv for c in cases if c.group == "lengths"} == {1, 2, 8}
    assert all(c.b % 2 == 1 and c.h_kv % 2 == 1 for c in cases if c.varlen is None)  # odd B, odd H_kv
    assert {(c.schedule, c.d) for c in cases} == {("ex18", 128), ("d64", 64), ("d256", 256), ("ex02", 64)} | {
        (s, d) for s in ("ex04", "ex01") for d in (64, 128, 256) if (s, d) != ("ex01", 64)}
    varlen = [c for c in cases if c.varlen]
    assert any(a == 0 and b > 0 for c in varlen for a, b in c.varlen)  # empty query sequence
    assert any(a > 0 and b == 0 for c in varlen for a, b in c.varlen)  # empty key sequence
    assert any(a == b == 0 for c in varlen for a, b in c.varlen)
    assert {c.schedule for c in varlen} == {"ex18", "d64", "d256", "ex04", "ex01"}
    specials = Counter(c.special for c in cases)
    assert specials["nan_q"] and specials["nan_k"] and specials["nan_k_sw"] and specials["sdpa"] and specials["bshd"]
    assert {c.scale for c in cases} >= {0.0, 10.0, 1e-30}
    assert len(cases) < 320  # the time budget (~6 min on an H200, builds included)


def test_reference_mask_is_bottom_right():
    m = sweep.causal_mask(2, 4, True, "cpu")
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    m = sweep.causal_mask(4, 2, True, "cpu")
    assert m.tolist() == [[False, False], [False, False], [True, False], [True, True]]


# ---- the checks, with stand-ins for b200c -------------------------------------------------------


def attention_stand_in(q, k, v, scale, causal, top_left=False, gqa_mod=False, lse_log2=False, nan_to_zero=False,
                       hidden_value=0.0):
    """An FP32 attention (B, H, S_q, D) with optional deliberate mistakes."""
    B, H, s_q, D = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    idx = [(h % h_kv) if gqa_mod else h // (H // h_kv) for h in range(H)]
    kk, vv = k[:, idx].float(), v[:, idx].float()
    s = (q.float() @ kk.transpose(-1, -2)) * scale
    if causal:
        mask = sweep.causal_mask(s_q, s_kv, True, "cpu") if not top_left else torch.ones(s_q, s_kv).tril().bool()
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1) if s_kv else torch.full((B, H, s_q), float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0) if nan_to_zero else torch.softmax(s, -1)
    vis = (s > float("-inf")).any(-1, keepdim=True) | torch.isnan(s).any(-1, keepdim=True)
    p = torch.where(vis, p, torch.zeros(()))
    out = (p @ vv) if s_kv else torch.zeros(B, H, s_q, D)
    out = torch.where(vis, out, torch.full((), hidden_value)) if s_kv else out
    if lse_log2:
        lse = lse / 0.6931471805599453
    return out.to(BF16), lse


def stand_in_calls(**mistakes):
    def dense(q, k, v, schedule, causal, scale, return_lse, layout="bhsd"):
        if layout == "bshd":
            q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        out, lse = attention_stand_in(q, k, v, scale, causal, **mistakes)
        if layout == "bshd":
            out = out.transpose(1, 2)
        return (out, lse) if return_lse else out

    def varlen(q, k, v, cq, ck, mq, mk, schedule, causal, scale):
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        out = torch.zeros_like(q)
        lse = torch.full((q.shape[1], q.shape[0]), float("-inf"))
        for b in range(len(cq) - 1):
            a0, a1, b0, b1 = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
            if a1 == a0:
                continue
            o, l_ = attention_stand_in(q[a0:a1].transpose(0, 1)[None], k[b0:b1].transpose(0, 1)[None],
                                       v[b0:b1].transpose(0, 1)[None], scale, causal, **mistakes)
            out[a0:a1] = o[0].transpose(0, 1)
            lse[:, a0:a1] = l_[0]
        return out, lse

    def sdpa(q, k, v, schedule, causal):
        return attention_stand_in(q, k, v, q.shape[-1] ** -0.5, causal, **mistakes)[0]

    return dense, varlen, sdpa


SMALL = (1, 63, 129)


@pytest.fixture(scope="module")
def small_cases():
    cases = sweep.make_cases(("special", "varlen", "lengths"), lengths=SMALL)
    keep = [c for c in cases if c.group != "varlen" or c.schedule == "ex18"]
    for c in keep:  # smaller special/varlen shapes for the CPU (the GPU runs the sweep's own)
        if c.group == "special":
            c.s_q, c.s_kv = min(c.s_q, 150), min(c.s_kv, 130)
        if c.varlen:
            c.varlen = tuple((min(a, 150), min(b, 130)) for a, b in c.varlen)
            c.s_q, c.s_kv = max(a for a, _ in c.varlen), max(b for _, b in c.varlen)
    return keep


@pytest.fixture(scope="module")
def scheds():
    return sweep.schedules()


def run_all(cases, scheds, **mistakes):
    calls = stand_in_calls(**mistakes)
    return {c.label(): sweep.run_case(c, scheds, calls, "cpu") for c in cases}


def test_a_correct_attention_passes_every_case(small_cases, scheds):
    rows = run_all(small_cases, scheds)
    bad = {k: r["failures"] for k, r in rows.items() if r["status"] != "PASS"}
    assert not bad
    nan_rows = [r for r in rows.values() if r["special"].startswith("nan")]
    assert nan_rows and all(r["status"] == "PASS" for r in nan_rows)
    assert all(r["no_lse_bitwise_equal"] for r in rows.values() if r["special"] == "no_lse")


def _differs(c, pred):
    """Some sequence of case ``c`` with keys satisfies pred(len_q, len_kv)."""
    seqs = c.varlen if c.varlen else [(c.s_q, c.s_kv)]
    return any(a > 0 and b > 0 and pred(a, b) for a, b in seqs)


@pytest.mark.parametrize("mistake,hits", [
    (dict(top_left=True), lambda c: c.causal and _differs(c, lambda a, b: a != b)),
    (dict(gqa_mod=True), lambda c: c.h // c.h_kv == 2 and _differs(c, lambda a, b: True)),
    (dict(lse_log2=True), lambda c: c.special != "sdpa" and _differs(c, lambda a, b: True)),
    (dict(nan_to_zero=True), lambda c: c.special.startswith("nan")),
    (dict(hidden_value=1.0), lambda c: c.causal and _differs(c, lambda a, b: a > b)),
])
def test_wrong_attentions_fail_exactly_where_they_differ(small_cases, scheds, mistake, hits):
    rows = run_all(small_cases, scheds, **mistake)
    expected = {c.label() for c in small_cases if hits(c)}
    assert expected
    assert all(r["status"] in ("PASS", "FAIL") for r in rows.values())
    assert {k for k, r in rows.items() if r["status"] == "FAIL"} == expected


def test_run_sweep_writes_one_table_and_json(tmp_path):
    """The driver end to end on the CPU with the stand-in: table, JSON, counts, an error row, the budget."""
    import json

    dense, varlen, sdpa = stand_in_calls()
    seen = []

    def flaky_dense(q, k, v, schedule, causal, scale, return_lse, layout="bhsd"):
        seen.append(1)
        if len(seen) == 2:
            raise RuntimeError("a stand-in failure")
        return dense(q, k, v, schedule, causal, scale, return_lse, layout)

    report = sweep.run_sweep(tmp_path, "emulate", 600.0, ("lengths",), build=False, calls=(flaky_dense, varlen, sdpa),
                             device="cpu", lengths=(1, 63))
    assert report["counts"] == {"PASS": 7, "FAIL": 0, "ERROR": 1, "NOT RUN": 0}
    data = json.loads((tmp_path / "real_inputs.json").read_text())
    assert len(data["results"]) == 8 and data["results"][1]["error"] == "RuntimeError: a stand-in failure"
    text = (tmp_path / "real_inputs_table.txt").read_text()
    assert "7 passed, 0 failed, 1 errors, 0 not run, of 8 cases" in text
    report = sweep.run_sweep(tmp_path, "emulate", -1.0, ("lengths",), build=False, calls=(dense, varlen, sdpa),
                             device="cpu", lengths=(1, 63))
    assert report["counts"]["NOT RUN"] == 8  # past the budget: reported, not silently dropped

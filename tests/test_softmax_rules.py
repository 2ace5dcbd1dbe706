"""The online softmax's numerics rules live in one place (b200c/codegen/softmax_rules.py) that both
backends call, and the templates of the softmax's decision nodes only print what Python wrote."""
from pathlib import Path

import pytest

import b200c
from b200c.codegen import softmax_rules as rules

ROOT = Path(__file__).resolve().parents[1]
TCGEN05 = ROOT / "examples/18_tma_l2_promotion.py"  # threshold, software exp2, NaN max
SM90 = ROOT / "examples/hopper/h09_lazy_rescale.py"


def _sm90_schedule():
    return b200c.load_schedule_file(SM90).replace(sw_exp2_per16=2)


@pytest.mark.parametrize("rule, marker", [("rebase_test", "REBASE_RULE"), ("max_fn", "MAX_RULE")])
def test_both_backends_take_the_rule_from_one_place(monkeypatch, rule, marker):
    """Replacing a rule changes the kernels of both backends (nothing else decides it)."""
    monkeypatch.setattr(rules, rule, lambda *a, **k: marker)
    tc = b200c.generate(b200c.load_schedule_file(TCGEN05), "sm100a").source
    hp = b200c.generate(_sm90_schedule(), "sm90a").source
    assert marker in tc and marker in hp


def test_rebase_test_forms():
    assert rules.rebase_test("g", "m", 8.0, nan=False, masked=False) == "g >= 8.0f"
    assert rules.rebase_test("g", "m", 8.0, nan=True, masked=False) == "!(g < 8.0f)"  # NaN rebases
    assert rules.rebase_test("g", "m", 8.0, nan=True, masked=True) == "g >= 8.0f || m != m"  # -inf - -inf does not


def test_rules_of_a_schedule():
    s = b200c.load_schedule_file(TCGEN05)
    assert rules.nan_max(s) and rules.top_p_rounding(s) and rules.top_p_sw_from(s) == 14
    assert rules.exp_ranges(2) == ((0, 14, "hw"), (14, 16, "sw")) and rules.exp_ranges(0) == ((0, 16, "hw"),)
    plain = s.replace(sw_exp2_per16=0, rescale_threshold=None)
    assert not rules.nan_max(plain) and not rules.top_p_rounding(plain) and rules.top_p_sw_from(plain) is None


@pytest.mark.parametrize("template", ["tcgen05/templates/stmt/Rebase.j2", "tcgen05/templates/stmt/RowmaxPass.j2",
                                      "tcgen05/templates/stmt/TopPRound.j2", "sm90/templates/stmt/SoftmaxFn.j2",
                                      "sm90/templates/stmt/RescaleFn.j2"])
def test_softmax_templates_only_print(template):
    text = (ROOT / "b200c/codegen" / template).read_text()
    assert "{%" not in text and "{{ n.code" in text

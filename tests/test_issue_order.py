"""Issue-order grammar (blog ch.7): valid orders and their derived prologue /
epilogue; invalid orders rejected with the broken dependency named."""
import pytest

from b200c import IssueOrderError
from b200c.dsl.issue_order import default_order, parse_issue_order


def test_stage5_order_has_no_prologue():
    o = parse_issue_order("Q0K(i) Q1K(i) P0V(i) P1V(i)", 2, "paired", 1)
    assert o.lead == 0 and o.prologue() == () and o.epilogue() == ()
    assert [s.symbolic for s in o.steps] == ["Q0K(i)", "Q1K(i)", "P0V(i)", "P1V(i)"]
    assert default_order(2) == "Q0K(i) Q1K(i) P0V(i) P1V(i)"
    # paired tokens: K/V(j) waited by the first QK, released after the last PV
    first = [s.symbolic for s in o.steps if o.is_first_consumer(s)]
    last = [s.symbolic for s in o.steps if o.is_last_consumer(s)]
    assert first == ["Q0K(i)"] and last == ["P1V(i)"]


def test_stage7_order_prologue_and_epilogue():
    o = parse_issue_order("P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)", 2, "separate", 3)
    assert o.lead == 1
    assert [s.symbolic for s in o.prologue()] == ["Q0K(i+1)", "Q1K(i+1)"]
    assert [s.symbolic for s in o.epilogue()] == ["P0V(i)", "P1V(i)"]
    seq = [s.at(j) for s, j in o.unrolled(3)]
    assert seq == ["Q0K(0)", "Q1K(0)",
                   "P0V(0)", "Q0K(1)", "P1V(0)", "Q1K(1)",
                   "P0V(1)", "Q0K(2)", "P1V(1)", "Q1K(2)",
                   "P0V(2)", "P1V(2)"]
    # K(j) is released by Q1K, V(j) by P1V
    assert [s.symbolic for s in o.steps if o.is_last_consumer(s)] == ["P1V(i)", "Q1K(i+1)"]
    assert [s.symbolic for s in o.steps if o.is_last_qk(s)] == ["Q1K(i+1)"]


def test_offsets_are_normalized():
    a = parse_issue_order("P0V(i-1) Q0K(i)", 1, "separate", 3)
    b = parse_issue_order("P0V(i) Q0K(i+1)", 1, "separate", 3)
    assert [s.symbolic for s in a.steps] == [s.symbolic for s in b.steps]


def test_single_kv_iteration_is_valid():
    o = parse_issue_order("P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)", 2, "separate", 3)
    assert [s.at(j) for s, j in o.unrolled(1)] == ["Q0K(0)", "Q1K(0)", "P0V(0)", "P1V(0)"]


INVALID = [
    ("pv-before-softmax", "P0V(i) Q0K(i)", 1, "separate", 3, ["P0V(i)", "PV before softmax", "Q0K(0)"]),
    ("sp-overwritten", "Q0K(i+1) P0V(i) Q1K(i+1) P1V(i)", 2, "separate", 3,
     ["Q0K(i+1)", "overwrites S0/P0", "P0V(0)", "still pending"]),
    ("kv-slot-refilled", "P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)", 2, "separate", 1,
     ["Q0K(i+1)", "needs K(1)", "refilled before its last consumer", "P1V(0)", "kv_stages >= 2"]),
    ("paired-slot", "P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)", 2, "paired", 1, ["Q0K(i+1)", "K/V(1)", "deadlock", "P1V(0)"]),
    ("duplicate", "Q0K(i) Q0K(i) P0V(i)", 1, "separate", 3, ["Q0K(i)", "repeats"]),
    ("missing-stage", "Q0K(i) P0V(i)", 2, "separate", 3, ["never issues Q1K"]),
    ("unknown-stage", "Q2K(i) P0V(i)", 2, "separate", 3, ["Q2K(i)", "q_stages=2"]),
    ("too-far-ahead", "P0V(i) Q0K(i+2)", 1, "separate", 3, ["Q0K(i+2)", "at most one iteration"]),
    ("syntax", "Q0K(j) P0V(i)", 1, "separate", 3, ["does not parse", "column"]),
]


@pytest.mark.parametrize("text,q,tok,slots,needles", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_orders(text, q, tok, slots, needles):
    with pytest.raises(IssueOrderError) as info:
        parse_issue_order(text, q, tok, slots)
    msg = str(info.value)
    for n in needles:
        assert n in msg, f"{msg!r} lacks {n!r}"

"""The barrier-protocol verifier (runs in every generate()): it accepts every
example and rejects deliberately broken protocols at compile time, naming the
barrier, the role and the step."""
from msgspec.structs import replace

import pytest

import b200c
from b200c import ProtocolError
from b200c.codegen import make_plan, tcgen05
from b200c.codegen.ir import Arrive, PhaseDecl, Wait
from b200c.codegen.verify import verify
from conftest import EXAMPLES, ROOT

VARIANTS = sorted((ROOT / "examples/variants").glob("*.py"))


def _ir(path):
    s = b200c.load_schedule_file(path)
    return tcgen05.lower(s, make_plan(s))


def _map(body, fn):
    out = []
    for n in body:
        if getattr(n, "body", ()):
            n = replace(n, body=tuple(_map(n.body, fn)))
        out.extend(fn(n))
    return tuple(out)


def _edit_role(ir, role, fn):
    roles = tuple(replace(r, body=_map(r.body, fn)) if r.name == role else r for r in ir.roles)
    assert roles != ir.roles, f"role {role} unchanged"
    return replace(ir, roles=roles)


@pytest.mark.parametrize("path", EXAMPLES + VARIANTS, ids=lambda p: p.stem)
def test_examples_pass(path):
    verify(_ir(path))  # also run by generate(); here without the emitter


def test_role_that_never_arrives_is_rejected():
    ir = _edit_role(_ir(ROOT / "examples/04_warp_specialization.py"), "softmax",
                    lambda n: [] if isinstance(n, Arrive) and n.barrier == "p_ready" else [n])
    with pytest.raises(ProtocolError, match=r"nobody arrives on barrier p_ready \(plan producers: softmax\)"):
        verify(ir)


@pytest.mark.parametrize("stage,barrier", [("12_split_correction", "p_ready"), ("14_persistent", "p_hi_ready"),
                                           ("14_persistent", "rowsum_free")])
def test_dropped_arrive_is_rejected(stage, barrier):
    """The correction warps skip one Q stage's arrival: the phase never completes (or completes with
    the wrong producers); the message names the barrier instance, the roles and the step."""
    ir = _edit_role(_ir(ROOT / f"examples/{stage}.py"), "correction",
                    lambda n: [] if isinstance(n, Arrive) and n.barrier == barrier and n.index == "1" else [n])
    with pytest.raises(ProtocolError) as e:
        verify(ir)
    msg = str(e.value)
    assert f"{barrier}[1]" in msg, msg
    assert "role " in msg and " at " in msg, msg


@pytest.mark.parametrize("stage", ["04_warp_specialization", "12_split_correction", "18_tma_l2_promotion"])
def test_doubled_arrive_is_rejected(stage):
    ir = _edit_role(_ir(ROOT / f"examples/{stage}.py"), "softmax",
                    lambda n: [n, n] if isinstance(n, Arrive) and n.barrier in ("p_ready", "p_hi_ready") else [n])
    with pytest.raises(ProtocolError) as e:
        verify(ir)
    msg = str(e.value)
    assert ("p_ready" in msg or "p_hi_ready" in msg) and "softmax" in msg, msg
    assert "arrivals" in msg or "too many" in msg or "ran ahead" in msg, msg
    assert "arrive p_" in msg, msg  # the step of the offending arrive


@pytest.mark.parametrize("stage,role,var", [("04_warp_specialization", "softmax", "s_full_ph"),
                                            ("07_compute_pipeline", "mma", "kv_full_ph"),
                                            ("14_persistent", "load", "q_free_ph")])
def test_wrong_parity_is_rejected(stage, role, var):
    flip = lambda n: [replace(n, init=1 - n.init)] if isinstance(n, PhaseDecl) and n.var == var else [n]
    ir = _edit_role(_ir(ROOT / f"examples/{stage}.py"), role, flip)
    with pytest.raises(ProtocolError) as e:
        verify(ir)
    msg = str(e.value)
    assert f"role {role}" in msg and "parity" in msg, msg


def test_wait_on_a_barrier_the_role_does_not_consume():
    ir = _ir(ROOT / "examples/06_load_pipeline.py")
    extra = lambda n: [n, replace(n, barrier="s_full", index="0")] if (
        isinstance(n, Wait) and n.barrier == "kv_empty") else [n]
    with pytest.raises(ProtocolError, match="role load waits on barrier s_full"):
        verify(_edit_role(ir, "load", extra))


def test_rowsum_race_of_one_tile_work_items_is_fixed():
    """With one K/V tile per work item the next work item's rowsum could overwrite the published
    one before the correction warps read it; the plan now has rowsum_free for it."""
    p = make_plan(b200c.load_schedule_file(ROOT / "examples/14_persistent.py"))
    b = p.barrier("rowsum_free")
    assert b.starts_free and b.consumers == ("softmax",) and b.producers[0].role == "correction"

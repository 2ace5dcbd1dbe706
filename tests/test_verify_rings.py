"""The protocol verifier's problem sizes follow the schedule's rings (b200c/codegen/verify.py
``problem_sizes``): at every legal ``kv_stages`` (1..8) and K/V token mode, on both backends, the
unedited IR passes and a slot index or phase parity edited to wrap one slot early is rejected."""
from msgspec.structs import replace

import pytest

import b200c
from b200c import ProtocolError, ScheduleError
from b200c.codegen import make_plan, sm90, tcgen05
from b200c.codegen.ir import Assign, PhaseRef, RingAdvance, Wait
from b200c.codegen.verify import _Model, _check, problem_sizes
from conftest import ROOT

SM100_BASES = ("06_load_pipeline", "07_compute_pipeline", "14_persistent", "18_tma_l2_promotion")
SM90_BASES = ("hopper/h04_kv_pipeline", "hopper/h11_persistent")


def _map(body, fn):
    out = []
    for n in body:
        if getattr(n, "body", ()):
            n = replace(n, body=_map(n.body, fn))
        out.extend(fn(n))
    return tuple(out)


def _edit_role(ir, role, fn):
    roles = tuple(replace(r, body=_map(r.body, fn)) if r.name == role else r for r in ir.roles)
    assert roles != ir.roles, f"role {role} unchanged"
    return replace(ir, roles=roles)


def _lower(base, target, **knobs):
    """The verified-later IR of example ``base`` with ``knobs`` (head_dim 128, else 64 when the ring
    does not fit), or None when the schedule is not legal."""
    s0 = b200c.load_schedule_file(ROOT / f"examples/{base}.py")
    be = tcgen05 if target == "sm100a" else sm90
    for d in (128, 64):
        try:
            s = s0.replace(head_dim=d, **knobs)
            return be.lower(s, make_plan(s, target))
        except ScheduleError:  # ResourceError, IssueOrderError: maybe legal at the smaller head_dim
            continue
    return None


def _configs():
    out = []
    for target, bases in (("sm100a", SM100_BASES), ("sm90a", SM90_BASES)):
        for base in bases:
            for tokens in ("paired", "separate"):
                for kv in range(1, 9):
                    out.append(pytest.param(target, base, tokens, kv, id=f"{base.split('/')[-1]}-{tokens}-kv{kv}"))
    return out


def _wrap_early(text: str, ring: str) -> str:
    """``x + 1 == RING ? 0u : x + 1`` -> wraps after RING - 1 slots."""
    assert f"+ 1 == {ring}" in text, text
    return text.replace(f"+ 1 == {ring}", f"+ 2 == {ring}")


def _mutations(ir):
    """(name, edited IR) for each way of wrapping the K/V ring one slot early that ``ir`` has."""
    out = []
    slot_early = lambda var: lambda n: [replace(n, expr=_wrap_early(n.expr, "KV_STAGES"))] if (  # noqa: E731
        isinstance(n, Assign) and n.target == var) else [n]
    out.append(("load slot", _edit_role(ir, "load", slot_early("slot"))))
    names = {r.name for r in ir.roles}
    if "mma" in names:  # tcgen05: the MMA warp's ring position
        out.append(("mma slot", _edit_role(ir, "mma", slot_early("next_slot"))))
        if ir.plan.kv_stages > 1:  # the phase bit of slot s taken from slot s mod (KV_STAGES - 1)
            parity = lambda n: [replace(n, phase=PhaseRef(n.phase.var, f"({n.phase.index}) % (KV_STAGES - 1)",  # noqa
                                                          n.phase.storage))] if (
                isinstance(n, Wait) and n.barrier == "kv_full") else [n]
            out.append(("mma parity", _edit_role(ir, "mma", parity)))
    if "consumer" in names:  # sm90: the consumers' ring position and parity (RingAdvance)
        early = lambda n: [replace(n, stages="KV_STAGES - 1")] if isinstance(n, RingAdvance) else [n]  # noqa: E731
        out.append(("consumer ring", _edit_role(ir, "consumer", early)))
    return out


@pytest.mark.parametrize("target,base,tokens,kv", _configs())
def test_ring_edited_to_wrap_early_is_rejected(target, base, tokens, kv):
    ir = _lower(base, target, kv_tokens=tokens, kv_stages=kv)
    if ir is None:
        pytest.skip(f"{base} with kv_tokens={tokens!r}, kv_stages={kv} is not a legal schedule")
    _check(ir)  # the unedited IR passes at every size
    for name, mutant in _mutations(ir):
        with pytest.raises(ProtocolError):
            _check(mutant)


def test_the_matrix_covers_every_legal_ring():
    """The matrix above is not mostly skips: it holds every kv_stages 1..8 in each token mode the
    backends generate. Left out, as the backends refuse them: sm100 paired rings of 7 and 8 slots
    (a slot holds K and V, 2 x 128 x 64 x 2 bytes at head_dim 64: with the Q tiles past the 227 KiB
    of SMEM) and sm90 paired tokens (its warp-specialized consumers take K and V apart)."""
    smem, slot, q_tile = 232448, 2 * 128 * 64 * 2, 128 * 64 * 2
    assert 6 * slot + q_tile <= smem < 7 * slot + q_tile
    for target, bases, paired in (("sm100a", SM100_BASES, range(1, 7)), ("sm90a", SM90_BASES, ())):
        for tokens, want in (("paired", set(paired)), ("separate", set(range(1, 9)))):
            legal = {kv for kv in range(1, 9) for base in bases
                     if _lower(base, target, kv_tokens=tokens, kv_stages=kv) is not None}
            assert legal == want, (target, tokens, sorted(legal))
    # one-slot rings of sm100 (kv_stages=1) come from the stages before the K/V pipeline
    ir = _lower("04_warp_specialization", "sm100a", kv_tokens="paired", kv_stages=1)
    assert ir is not None
    _check(ir)
    with pytest.raises(ProtocolError):
        _check(dict(_mutations(ir))["load slot"])


def test_issue_33_escape_is_caught():
    """Stage 7, paired tokens, D=64, kv_stages=6, the load role's slot wrapping one slot early: the
    old sizes (1, 2, 3, 5 tiles) never filled the ring, the ring-derived ones do."""
    ir = _lower("07_compute_pipeline", "sm100a", kv_tokens="paired", kv_stages=6)
    assert ir is not None and ir.plan.kv_stages == 6
    mutant = dict(_mutations(ir))["load slot"]
    for n_kv in (1, 2, 3, 5):  # what the verifier used to run: no violation shows
        for policy in ("in_order", "reverse", "random"):
            _Model(mutant, n_kv, 1).run(policy, seed=n_kv * 31 + 1)
    with pytest.raises(ProtocolError, match="kv_full|kv_empty|deadlock"):
        _check(mutant)


@pytest.mark.parametrize("tokens,per_tile", [("paired", 1), ("separate", 2)])
@pytest.mark.parametrize("kv", range(2, 9))
def test_problem_sizes_wrap_every_ring_twice(tokens, per_tile, kv):
    ir = _lower("18_tma_l2_promotion", "sm100a", kv_tokens=tokens, kv_stages=kv)
    if ir is None:
        pytest.skip("not a legal schedule")
    sizes = problem_sizes(ir.plan)
    tiles = {n for n, _ in sizes}
    works = {w for _, w in sizes}
    assert max(tiles) >= 2 * kv + 1
    for uses in (kv - 1, kv, kv + 1, 2 * kv, 2 * kv + 1):  # K/V ring uses around its length
        assert -(-uses // per_tile) in tiles, (uses, sorted(tiles))
    q = ir.plan.q_stages
    assert {q, q + 1, 2 * q + 1} <= tiles
    assert {1, 2, 3} <= works  # once-per-item phases wrap twice
    # one-tile work items until the K/V ring wrapped twice across them
    assert any(n == 1 and w * per_tile >= 2 * kv + 1 for n, w in sizes)
    assert list(sizes) == sorted(sizes, key=lambda s: (s[0] * s[1], s))

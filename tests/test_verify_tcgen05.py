"""The verifier's static tcgen05 memory-model checks (b200c/codegen/verify_tcgen05.py): every
sm_100a example passes, and deleting any fence or wait from a real example's IR is rejected with
a message naming the missing instruction, except the few that another fence or wait on every path
makes redundant (listed here with the reason, PTX ISA 9.7.16.6.3: an after-fence orders the
thread's later tcgen05 operations after every earlier synchronization; wait::ld/st wait for all
earlier loads/stores of the thread)."""
from msgspec.structs import replace

import pytest

from b200c.codegen.verify import _Model

import b200c
from b200c import ProtocolError
from b200c.codegen import make_plan, sm90, tcgen05
from b200c.codegen.ir import Arrive, Loop, Scope, Wait
from b200c.codegen.tcgen05.ir import Commit, CtaSync, MmaPV, RowmaxPass, TmemWait
from b200c.codegen.verify import verify
from b200c.codegen.verify_tcgen05 import check_tcgen05, uses_tcgen05
from conftest import EXAMPLES, HOPPER_EXAMPLES, ROOT, VARIANTS

SM100 = EXAMPLES + VARIANTS


def _ir(path):
    s = b200c.load_schedule_file(path)
    return tcgen05.lower(s, make_plan(s))


def _sites(body, pred, path=(), parents=()):
    """(index path, node, enclosing nodes) of every node of ``body`` that ``pred`` selects."""
    for i, n in enumerate(body):
        if pred(n):
            yield path + (i,), n, parents
        if getattr(n, "body", ()):
            yield from _sites(n.body, pred, path + (i,), parents + (n,))


def _edit(body, path, fn):
    i, n = path[0], body[path[0]]
    new = fn(n) if len(path) == 1 else (replace(n, body=_edit(n.body, path[1:], fn)),)
    return body[:i] + tuple(new) + body[i + 1:]


def _mutants(ir, pred, fn):
    """(role, node, enclosing nodes, mutated IR) for each node ``pred`` selects, edited by ``fn``."""
    for k, r in enumerate(ir.roles):
        for path, n, parents in _sites(r.body, pred):
            roles = list(ir.roles)
            roles[k] = replace(r, body=_edit(r.body, path, fn))
            yield r.name, n, parents, replace(ir, roles=tuple(roles))


# what deleting each kind of fence / wait must report
DELETIONS = {
    "fence_after": (lambda n: isinstance(n, Wait) and n.fence_after, lambda n: (replace(n, fence_after=False),),
                    "tcgen05.fence::after_thread_sync"),
    "fence_before": (lambda n: isinstance(n, Arrive) and n.fence_before, lambda n: (replace(n, fence_before=False),),
                     "tcgen05.fence::before_thread_sync"),
    "wait_ld": (lambda n: isinstance(n, TmemWait) and n.kind == "ld", lambda n: (), "tcgen05.wait::ld"),
    "wait_st": (lambda n: isinstance(n, TmemWait) and n.kind == "st", lambda n: (), "tcgen05.wait::st"),
    "cta_tcgen05_fences": (lambda n: isinstance(n, CtaSync) and n.tcgen05_fences,
                           lambda n: (replace(n, tcgen05_fences=False),), "tcgen05.fence::"),
    "cta_proxy_fence": (lambda n: isinstance(n, CtaSync) and n.proxy_fence, lambda n: (replace(n, proxy_fence=False),),
                        "fence.proxy.async"),
}


def _redundant(kind, role, node, parents) -> bool:
    """The deletions another fence or wait covers on every path (see the module docstring)."""
    if kind == "fence_after" and role == "mma" and node.barrier == "q_full":
        return True  # the first MMA of a work item follows the fenced wait for its K tile (kv_full)
    if kind == "fence_after" and role == "mma" and node.barrier == "kv_full" and any(
            isinstance(p, Scope) and any(isinstance(x, MmaPV) for x in p.body) for p in parents):
        return True  # a PV step: its fenced wait for P (p_ready / p_hi_ready) comes before the MMA
    if kind == "wait_st" and role == "cta":
        return True  # the CTA barrier that follows waits for the stores itself (tcgen05.wait::st)
    if kind == "wait_ld" and role == "softmax" and any(isinstance(p, Loop) and p.start == "w.n_full" for p in parents):
        return True  # masked tiles re-read every S column, each load waited, before the first P store
    return False


@pytest.mark.parametrize("path", SM100, ids=lambda p: p.stem)
def test_examples_pass(path):
    ir = _ir(path)
    assert uses_tcgen05(ir)
    check_tcgen05(ir, _Model)


@pytest.mark.parametrize("path", SM100, ids=lambda p: p.stem)
def test_each_deleted_fence_or_wait_is_rejected(path):
    ir = _ir(path)
    seen = 0
    for kind, (pred, fn, instr) in DELETIONS.items():
        for role, node, parents, mutant in _mutants(ir, pred, fn):
            seen += 1
            if _redundant(kind, role, node, parents):
                verify(mutant, cached=False)  # covered by another fence or wait: still correct
                continue
            with pytest.raises(ProtocolError) as e:
                verify(mutant, cached=False)
            msg = str(e.value)
            assert instr in msg and f"role {role}" in msg and " at " in msg, (kind, node.describe(), msg)
    assert seen >= 4, "the example has fences and waits to delete"


def test_every_kind_of_deletion_is_exercised():
    """The examples hold each kind of fence and wait the test deletes (and each one somewhere is
    not redundant)."""
    needed = set()
    for path in SM100:
        ir = _ir(path)
        for kind, (pred, fn, _) in DELETIONS.items():
            if any(not _redundant(kind, role, n, parents) for role, n, parents, _ in _mutants(ir, pred, fn)):
                needed.add(kind)
    assert needed == set(DELETIONS)


@pytest.mark.parametrize("stage", ["07_compute_pipeline", "14_persistent", "01_baseline"])
def test_mma_result_through_a_plain_arrive_is_rejected(stage):
    """A commit replaced by a plain arrive: the MMA's S reaches the softmax threads without
    tcgen05.commit."""
    ir = _ir(ROOT / f"examples/{stage}.py")
    mutants = list(_mutants(ir, lambda n: isinstance(n, Commit) and n.barrier == "s_full",
                            lambda n: (Arrive("s_full", n.index, by="thread"),)))
    assert mutants
    for role, _, _, mutant in mutants:
        with pytest.raises(ProtocolError, match=r"tcgen05\.commit"):
            verify(mutant, cached=False)


@pytest.mark.parametrize("stage", ["04_warp_specialization", "18_tma_l2_promotion"])
def test_each_deleted_commit_is_rejected(stage):
    ir = _ir(ROOT / f"examples/{stage}.py")
    mutants = list(_mutants(ir, lambda n: isinstance(n, Commit), lambda n: ()))
    assert len(mutants) >= 3
    for _, node, _, mutant in mutants:
        with pytest.raises(ProtocolError) as e:
            verify(mutant, cached=False)
        assert node.barrier in str(e.value) or "tcgen05.commit" in str(e.value), str(e.value)


def test_deferred_score_wait_relies_on_the_register_dependency():
    """Minor 15 reads the rowmax registers before its one tcgen05.wait::ld (a true register
    dependency is honoured, PTX ISA 9.7.16.6.4.5); the wait must still come before P overwrites S."""
    ir = _ir(ROOT / "examples/15_wide_deferred_score_loads.py")
    assert any(not n.wait_each for r in ir.roles for _, n, _ in _sites(r.body, lambda n: isinstance(n, RowmaxPass)))
    check_tcgen05(ir, _Model)
    # stage 10 keeps score columns in registers and stores their P first: deferring its waits without
    # the wait before the first P store is the anti-dependency hazard
    ir = _ir(ROOT / "examples/10_register_caching.py")
    mutant = next(m for role, _, _, m in _mutants(ir, lambda n: isinstance(n, RowmaxPass) and not n.mask,
                                                  lambda n: (replace(n, wait_each=False),)) if role == "softmax")
    with pytest.raises(ProtocolError, match=r"tcgen05\.wait::ld.*|anti-dependency"):
        verify(mutant, cached=False)


@pytest.mark.parametrize("path", HOPPER_EXAMPLES[:3] + HOPPER_EXAMPLES[-1:], ids=lambda p: p.stem)
def test_hopper_ir_is_not_checked_as_tcgen05(path):
    s = b200c.load_schedule_file(path)
    ir = sm90.lower(s, make_plan(s, "sm90a"))
    assert not uses_tcgen05(ir)
    verify(ir, cached=False)

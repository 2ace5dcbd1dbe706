"""Role ``mma`` (blog ch.4, 5, 6, 7, 12, 13, 14, minor 17): one warp; one
lane issues every tcgen05.mma and commit (single-thread issue, PTX
9.7.16.10.9).

Two ways to get there, chosen by measurement (static SASS of the K/V loop):
the whole warp runs the role, converged, and each MMA and commit elects its
issuer inside its asm, so ptxas keeps descriptors and slots in uniform
registers (stage 18: 239 instructions, FA4 241); but when the K/V ring's
phase bits are a runtime-indexed array (local memory, ``phase_tracking=
'array'`` before minor 17), per-lane local loads make that code non-uniform
(stage 12: 462), and one elected lane running the whole role is cheaper
(stage 12: 261).

The steady-state K/V iteration follows the schedule's issue order (ch.7); the
prologue peels the QKs that run one tile ahead and the epilogue drains the
last PVs. Each K/V token is waited on by its first consumer and released
(``kv_empty``) by its last one (ch.6); the last QK of a work item releases Q
(``q_free``, ch.14). Early PV (ch.13) splits each PV into the high P columns
(after ``p_hi_ready``) and the low ones (after ``p_lo_ready``).
"""
from __future__ import annotations

import re

from ...ir import Assign, Comment, Decl, If, Loop, PhaseDecl, RoleIR, Scope, Single, Wait, WorkLoop
from ..ir import Commit, IssueEnd, MmaPV, MmaQK
from ...roles.load import q_buf, setmaxnreg


def _term(k: int, j: str):
    """``k * j`` as readable C: None for j == 0, no parentheses around names."""
    if j == "0":
        return None
    t = j if re.fullmatch(r"\w+", j) else f"({j})"
    return t if k == 1 else f"{k} * {t}"


def warp_issue(lw) -> bool:
    """True: the whole warp runs the role and each MMA/commit elects its
    issuer; False: one elected lane runs the whole role (see the module doc)."""
    return lw.storage(lw.plan.kv_stages) != "array"


def _slot_var(order, token: str) -> str:
    return {"KV": "slot_kv", "K": "slot_k", "V": "slot_v"}[token]


def overlapped_tokens(order) -> tuple:
    """Token kinds (``"KV"``, ``"K"``, ``"V"``) of which two tiles are in use at once in the steady
    state: a consumer of tile i (offset 0) is issued after the first consumer of tile i+1 took its
    slot, e.g. paired tokens under ``P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)`` (P1V(i) reads K/V(i) after
    Q0K(i+1) took K/V(i+1)). Their steps of offset 1 keep the slot in ``<slot>_next``, those of
    offset 0 in ``<slot>``, which takes ``<slot>_next`` at the top of each iteration and before
    the epilogue."""
    if not order.lead:
        return ()
    out = []
    for token in dict.fromkeys(order.token_of(s) for s in order.steps):
        first = next(s for s in order.steps if order.token_of(s) == token and order.is_first_consumer(s))
        at = order.steps.index(first)
        if first.offset and any(order.token_of(s) == token and not s.offset for s in order.steps[at + 1:]):
            out.append(token)
    return tuple(out)


def _step(lw, order, st, j: str, label: str):
    s = lw.s
    e = warp_issue(lw)
    name = "mma"
    q = st.q
    nodes = []
    # K/V tokens are first consumed in token order (the load role loads them in that order), so the first
    # consumer of a token takes the ring's next slot; later consumers of the same token reuse it
    paired = lw.plan.kv_tokens == "paired"
    token = order.token_of(st)
    slot = _slot_var(order, token)
    if st.offset and token in overlapped_tokens(order):
        slot += "_next"  # the token of tile i+1, taken while that of tile i is still in use
    buf = f"SMEM_KV + {slot} * KV_SLOT_BYTES" + (" + TILE_BYTES" if paired and st.kind == "PV" else "")
    if order.is_first_consumer(st):
        nodes.append(Assign(slot, "next_slot"))
        nodes.append(Assign("next_slot", "next_slot + 1 == KV_STAGES ? 0u : next_slot + 1"))
        nodes.append(Wait("kv_full", slot, lw.phase("kv_full_ph", slot, lw.plan.kv_stages),
                          lw.site(name, "kv_full"), j, fence_after=True))
    release = (Commit("kv_empty", slot, elect=e),) if order.is_last_consumer(st) else ()
    if st.kind == "QK":
        issue = [MmaQK(q, f"TMEM_S({q})", f"kmajor_desc(c.smem + {q_buf(q)})", "k_desc", elect=e),
                 Commit("s_full", str(q), elect=e), *release]
        if lw.plan.persistent and order.is_last_qk(st):
            last = "w.n_kv == 1" if j == "0" else f"{j} == w.n_kv - 1"  # the last K/V tile of the work item
            issue.append(If(last, (Commit("q_free", elect=e),)))
        nodes += [Decl("const SmemDesc", "k_desc", f"kmajor_desc(c.smem + {buf})", model="0"), *issue]
        note = f"{label}: S{q} = Q{q} K({j})^T"
    else:
        nodes.append(Decl("const SmemDesc", "v_desc", f"mnmajor_desc(c.smem + {buf})", model="0"))
        pv = lambda lo, hi, acc: MmaPV(q, f"TMEM_O({q})", "v_desc", lo, hi, acc, p_col=f"TMEM_P({q})", elect=e)
        not_first_tile = "0" if j == "0" else f"{j} > 0"  # PV accumulates into O except on K/V tile 0
        # pv_done only for the last K/V tile (the epilogue reads O): for tile j < last, PqV(j) is issued
        # before Qq K(j+1) (the issue-order check guarantees it) and the s_full commit of that QK tracks
        # every earlier MMA of this thread (PTX 9.7.16.12.1), so "S(j+1) ready" already means "O stable"
        if j == "w.n_kv - 1":
            done = (Commit("pv_done", str(q), elect=e),)
        elif order.lead and not st.offset:
            done = ()  # PVs of offset 0 in a leading order run on the last tile only in the epilogue
        else:  # no lead, or a PV one tile ahead (prologue / steady state): it may be the last tile's
            last = "w.n_kv == 1" if j == "0" else f"{j} == w.n_kv - 1"
            done = (If(last, (Commit("pv_done", str(q), elect=e),)),)
        if s.early_pv_cols:
            tile = lw.plan.tile
            k_split = (tile.block_n - s.early_pv_cols) // tile.mma_k
            nodes.append(Wait("p_hi_ready", str(q), lw.phase("p_hi_ph", str(q), lw.plan.q_stages, True),
                              lw.site(name, "p_hi_ready"), j, fence_after=True))
            nodes.append(Comment(f"blog ch.13: PV on the {s.early_pv_cols} high P columns published first"))
            nodes.append(pv(k_split, tile.pv_k_steps, not_first_tile))
            nodes.append(Wait("p_lo_ready", str(q), lw.phase("p_lo_ph", str(q), lw.plan.q_stages, True),
                              lw.site(name, "p_lo_ready"), j, fence_after=True))
            nodes += [pv(0, k_split, "1"), *done, *release]
        else:
            nodes.append(Wait("p_ready", str(q), lw.phase("p_ready_ph", str(q), lw.plan.q_stages, True),
                              lw.site(name, "p_ready"), j, fence_after=True))
            nodes += [pv(0, lw.plan.tile.pv_k_steps, not_first_tile), *done, *release]
        note = f"{label}: O{q} += P{q} V({j})"
    return Scope(note, tuple(nodes))


def build(lw) -> RoleIR:
    """The ``mma`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`)."""
    s = lw.s
    name = "mma"
    role = lw.role_spec("mma")
    order = lw.plan.issue
    item = [Wait("q_full", None, lw.phase("q_full_ph"), lw.site(name, "q_full"), "-1", fence_after=True)]
    if order.lead:
        item.append(Comment("prologue (blog ch.7): QKs of K/V tile 0 run one iteration ahead"))
        item += [_step(lw, order, st, "0", st.label("0")) for st in order.prologue()]
        # two tiles of a token kind in use at once: the slot taken for tile i+1 becomes tile i's
        shift = tuple(Assign(_slot_var(order, t), _slot_var(order, t) + "_next") for t in overlapped_tokens(order))
        steady = shift + tuple(_step(lw, order, st, f"i + {st.offset}" if st.offset else "i", st.symbolic)
                               for st in order.steps)
        item.append(Loop("i", "0", f"w.n_kv - {order.lead}", steady,
                         "steady state: " + " ".join(st.symbolic for st in order.steps)))
        item.append(Comment("epilogue (blog ch.7): the steps of the last K/V tile not issued in the loop"))
        item += [*shift, *(_step(lw, order, st, "w.n_kv - 1", st.label("n-1")) for st in order.epilogue())]
    else:
        steady = tuple(_step(lw, order, st, "i", st.symbolic) for st in order.steps)
        item.append(Loop("i", "0", "w.n_kv", steady, "K/V tiles: " + " ".join(st.symbolic for st in order.steps)))
    p_var = "p_hi_ph" if s.early_pv_cols else "p_ready_ph"
    body = [
        *setmaxnreg(lw, role.regs),
        Comment("blog ch.4: one MMA warp; one lane issues every tcgen05.mma and tcgen05.commit"),
        PhaseDecl("q_full_ph", 1, 0, "scalar"),
        PhaseDecl("kv_full_ph", lw.plan.kv_stages, 0, lw.storage(lw.plan.kv_stages)),
        PhaseDecl(p_var, lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages, True)),
    ]
    if s.early_pv_cols:
        body.append(PhaseDecl("p_lo_ph", lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages, True)))
    e = warp_issue(lw)
    if e:
        note = ("the whole warp runs the role and waits; each tcgen05.mma and commit is issued by one lane "
                "(single-thread tcgen05.mma, PTX 9.7.16.10.9), elected inside its asm")
    else:
        note = ("one elected lane runs the whole role: it waits, issues every MMA and commit (single-thread "
                "tcgen05.mma, PTX 9.7.16.10.9); the K/V phase bits are a runtime-indexed array, whose "
                "per-lane loads would make a whole-warp loop non-uniform")
    body += [
        Comment(note),
        Single("warp" if e else "elect", (
            Decl("uint32_t", "next_slot", "0"),  # ring slot of the next K/V token
            *(Decl("uint32_t", v, "0") for v in
              (("slot_kv",) if lw.plan.kv_tokens == "paired" else ("slot_k", "slot_v"))),
            *(Decl("uint32_t", _slot_var(order, t) + "_next", "0") for t in overlapped_tokens(order)),
            WorkLoop(lw.plan.persistent, tuple(item)),
            IssueEnd(elect=e),
        )),
    ]
    return RoleIR(name, role.warps, tuple(body), regs=role.regs,
                  blog="ch.4, 5, 6, 7 (issue order), 13 (early PV), 14 (q_free), minor 17")

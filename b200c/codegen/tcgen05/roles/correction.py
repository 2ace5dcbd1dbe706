"""Role ``correction`` (blog ch.12-14): four warps shared by all Q stages.

Per K/V tile and Q stage: wait for the softmax warps' published rescale
factors, rescale O once the previous PV completed (skipped when no row of the
warp changed), then arrive "O safe" on the barrier PV waits on. After the
last tile: wait for the published rowsums (their own barrier, ``rowsum_ready``,
so no softmax warp can complete the last factor's phase early), normalize O
and store it (epilogue).
"""
from __future__ import annotations

from ...ir import Arrive, Comment, If, Loop, PhaseDecl, RoleIR, Wait, WorkLoop
from .. import softmax as sm
from ...roles.load import setmaxnreg


def pv_stage_order(order, q_stages: int) -> tuple:
    """The Q stages in the order the MMA warp issues their PVs of one K/V tile: the correction warps
    rescale O in that order, so the PV waiting for "O safe" is the one they finish next (a fixed
    0, 1, ... order deadlocked ``P1V(i) Q0K(i) P0V(i) Q1K(i+1)``: P1V(j) waited for a rescale of stage 1
    queued behind stage 0's, whose scores Q0K(j) the MMA issues after P1V(j); found by the schedule-space
    sweep)."""
    if order is None:
        return tuple(range(q_stages))
    pvs = sorted((s for s in order.steps if s.kind == "PV"), key=lambda s: (-s.offset, order.steps.index(s)))
    return tuple(s.q for s in pvs)


def build(lw) -> RoleIR:
    """The ``correction`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`)."""
    s = lw.s
    name = "correction"
    role = lw.role_spec("correction")
    o_safe = "p_hi_ready" if s.early_pv_cols else "p_ready"
    per_tile = []
    for q in pv_stage_order(lw.plan.issue, lw.plan.q_stages):
        per_tile += [
            Wait("stats_ready", str(q), lw.phase("stats_ph", str(q), lw.plan.q_stages, True), lw.site(name, "stats_ready"), "j",
                 fence_after=True),
            # PV(j-1) completed before S(j) was ready (see the MMA role), so the published factor of
            # tile j also says O is stable: no wait on pv_done until the epilogue
            sm.rescale_o(lw, str(q), "smem", skip_unit=True),  # skipped on tile 0 (O not written yet)
            # every thread arrives (no __syncwarp before a lane-0 arrival: 2 NOPs per tile fewer, measured)
            Arrive(o_safe, str(q), by="thread", fence_before=True),
        ]
    final = []
    for q in range(lw.plan.q_stages):
        final += [
            Wait("rowsum_ready", str(q), lw.phase("rowsum_ph", str(q), lw.plan.q_stages, True), lw.site(name, "rowsum_ready"),
                 "w.n_kv"),
            Wait("pv_done", str(q), lw.phase("pv_done_ph", str(q), lw.plan.q_stages, True), lw.site(name, "pv_done"), "w.n_kv",
                 fence_after=True),
            sm.epilogue(lw, str(q), "smem"),
        ]
        if lw.plan.persistent:
            final.append(Arrive("rowsum_free", str(q), by="thread"))
    body = (
        *setmaxnreg(lw, role.regs),
        Comment("blog ch.12: O correction split from softmax; also the epilogue"),
        PhaseDecl("stats_ph", lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages, True)),
        PhaseDecl("pv_done_ph", lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages, True)),
        PhaseDecl("rowsum_ph", lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages, True)),
        WorkLoop(lw.plan.persistent, (Loop("j", "0", "w.n_kv", tuple(per_tile), "K/V tiles"), *final)),
    )
    return RoleIR(name, role.warps, body, regs=role.regs, blog="ch.12-14")

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
from ..ir import Epilogue, RescaleO
from ...roles.load import setmaxnreg


def build(lw) -> RoleIR:
    """The ``correction`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`)."""
    s = lw.s
    name = "correction"
    role = lw.role_spec("correction")
    o_safe = "p_hi_ready" if s.early_pv_cols else "p_ready"
    per_tile = []
    for q in range(lw.plan.q_stages):
        p = lw.softmax_params(str(q))
        per_tile += [
            Wait("stats_ready", str(q), lw.phase("stats_ph", str(q), lw.plan.q_stages), lw.site(name, "stats_ready"), "j"),
            If("j > 0", (
                Wait("pv_done", str(q), lw.phase("pv_done_ph", str(q), lw.plan.q_stages), lw.site(name, "pv_done"), "j",
                     fence_after=True),
                RescaleO(p, "smem", skip_unit=True),
            )),
            Arrive(o_safe, str(q), by="warp", fence_before=True),
        ]
    final = []
    for q in range(lw.plan.q_stages):
        p = lw.softmax_params(str(q))
        final += [
            Wait("rowsum_ready", str(q), lw.phase("rowsum_ph", str(q), lw.plan.q_stages), lw.site(name, "rowsum_ready"),
                 "c.n_kv"),
            Wait("pv_done", str(q), lw.phase("pv_done_ph", str(q), lw.plan.q_stages), lw.site(name, "pv_done"), "c.n_kv",
                 fence_after=True),
            Epilogue(p, "smem"),
        ]
        if lw.plan.persistent:
            final.append(Arrive("rowsum_free", str(q), by="warp"))
    body = (
        *setmaxnreg(lw, role.regs),
        Comment("blog ch.12: O correction split from softmax; also the epilogue"),
        PhaseDecl("stats_ph", lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages)),
        PhaseDecl("pv_done_ph", lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages)),
        PhaseDecl("rowsum_ph", lw.plan.q_stages, 0, lw.storage(lw.plan.q_stages)),
        WorkLoop(lw.plan.persistent, (Loop("j", "0", "c.n_kv", tuple(per_tile), "K/V tiles"), *final)),
    )
    return RoleIR(name, role.warps, body, regs=role.regs, blog="ch.12-14")

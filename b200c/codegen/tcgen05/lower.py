"""Plan -> KernelIR for the tcgen05 backend: one builder per warp role
(``roles/<role>.py``; the load role is shared, b200c/codegen/roles/load.py)."""
from __future__ import annotations

from ..ir import KernelIR, RoleIR
from ..lowering import Lowering
from ..plan import Plan
from ..roles import load
from ..roles.load import setmaxnreg


def lower(schedule, plan: Plan, profile: bool = False) -> KernelIR:
    """Build every warp role's program for a plan. ``profile`` is never set here: the targets of
    this backend have ``caps.profile`` False (the tcgen05 templates have no trace stamps yet; the
    :class:`~b200c.codegen.ir.Stamp` node is shared, adding ``trace_stamp`` to b200c_ptx.cuh and
    spans to the roles is what remains), and :func:`b200c.codegen.lower` refuses it first."""
    from .roles import correction, cta, mma, softmax

    lw = Lowering(plan, schedule)
    roles = []
    if not plan.role_specs("load"):
        roles.append(cta.build(lw))
    else:
        roles.append(softmax.build(lw))
        if plan.role_specs("correction"):
            roles.append(correction.build(lw))
        roles.append(load.build(lw))
        roles.append(mma.build(lw))
        spare = plan.role_specs("spare")
        if spare:
            roles.append(RoleIR("spare", spare[0].warps, setmaxnreg(lw, spare[0].regs), regs=spare[0].regs,
                                blog="idle warps completing the last warpgroup for setmaxnreg"))
    return KernelIR(plan=plan, roles=tuple(roles), wait_sites=tuple(lw.sites))

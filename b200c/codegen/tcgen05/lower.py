"""Plan -> KernelIR for the tcgen05 backend: one builder per warp role
(``roles/<role>.py``; the load role is shared, b200c/codegen/roles/load.py)."""
from __future__ import annotations

from ..ir import KernelIR, RoleIR
from ..lowering import Lowering
from ..plan import Plan
from ..roles import load
from ..roles.load import setmaxnreg


def lower(schedule, plan: Plan) -> KernelIR:
    """Build every warp role's program for a plan."""
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

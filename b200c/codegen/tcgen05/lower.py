"""Plan -> KernelIR for the tcgen05 backend: one builder per warp role
(``roles/<role>.py``; the load role is shared, b200c/codegen/roles/load.py)."""
from __future__ import annotations

from ..ir import KernelIR, RoleIR
from ..lowering import Lowering
from ..plan import Plan
from ..roles import load
from ..roles.load import setmaxnreg
from .ir import SoftmaxParams


class TcLowering(Lowering):
    """Lowering state of the tcgen05 backend (adds the softmax parameters)."""

    def softmax_params(self, q: str) -> SoftmaxParams:
        """Softmax/correction/epilogue parameters for Q stage expression ``q``."""
        s = self.s
        return SoftmaxParams(
            q=q,
            s_col=f"TMEM_S({q})",
            o_col=f"TMEM_O({q})",
            p_col=f"TMEM_P({q})" if self.plan.tmem_array("P") is not None else None,
            p_storage=s.p_storage,
            p_buf="SMEM_KV" if s.p_storage == "smem" else None,
            exp2=s.exp2,
            sw_exp2_per16=s.sw_exp2_per16,
            s_cache_cols=s.s_cache_cols,
            s_load_cols=s.s_load_cols,
            deferred_s_wait=s.deferred_s_wait,
            rowmax_chains=s.rowmax_chains,
            split_rowsum=s.split_rowsum,
            rescale_threshold=s.rescale_threshold,
            swizzle=s.swizzle,
        )


def lower(schedule, plan: Plan) -> KernelIR:
    """Build every warp role's program for a plan."""
    from .roles import correction, cta, mma, softmax

    lw = TcLowering(plan, schedule)
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

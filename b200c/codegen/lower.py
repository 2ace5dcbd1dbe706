"""Plan -> KernelIR. Each warp role's program is built in ``roles/<role>.py``."""
from __future__ import annotations

from .ir import KernelIR, PhaseRef, RoleIR, SoftmaxParams
from .launch import WaitSite
from .plan import Plan


# wait-site ids start at a fixed base per role, so a change in one role does
# not renumber the waits of the others in neighbouring generated kernels
SITE_BASE = {"cta": 0, "softmax": 100, "correction": 200, "load": 300, "mma": 400}


class Lowering:
    """Shared state of one lowering: the plan and the wait-site table."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.s = plan.schedule
        self.sites: list = []

    def site(self, role: str, barrier: str) -> int:
        """A new wait-site id for ``role`` waiting on ``barrier``."""
        sid = SITE_BASE[role] + sum(1 for w in self.sites if w.role == role)
        self.sites.append(WaitSite(sid, role, barrier))
        return sid

    def phase(self, var: str, index: str | None = None, count: int = 1) -> PhaseRef:
        """PhaseRef of a barrier family with ``count`` instances: scalar for
        one instance, else the schedule's phase storage (array/bitmask)."""
        return PhaseRef(var, index if count > 1 else None, self.storage(count))

    def storage(self, count: int) -> str:
        """Phase-bit storage of a barrier family with ``count`` instances."""
        return "scalar" if count == 1 else self.s.phase_tracking

    def softmax_params(self, q: str) -> SoftmaxParams:
        """Softmax/correction/epilogue parameters for Q stage expression ``q``."""
        s = self.s
        return SoftmaxParams(
            q=q,
            s_col=f"TMEM_S({q})",
            o_col=f"TMEM_O({q})",
            p_col=f"TMEM_P({q})" if s.p_storage == "tmem" else None,
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


def lower(plan: Plan) -> KernelIR:
    """Build every role's program for a plan."""
    from .roles import correction, cta, load, mma, softmax

    lw = Lowering(plan)
    s = plan.schedule
    roles = []
    if not s.warp_specialized:
        roles.append(cta.build(lw))
    else:
        roles.append(softmax.build(lw))
        if s.correction_warps:
            roles.append(correction.build(lw))
        roles.append(load.build(lw))
        roles.append(mma.build(lw))
        spare = [r for r in plan.roles if r.name == "spare"]
        if spare:
            from .roles.common import setmaxnreg

            roles.append(RoleIR("spare", spare[0].warps, setmaxnreg(lw, spare[0].regs), regs=spare[0].regs,
                                blog="idle warps completing the last warpgroup for setmaxnreg"))
    return KernelIR(plan=plan, roles=tuple(roles), wait_sites=tuple(lw.sites))

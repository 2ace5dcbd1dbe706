"""Plan -> KernelIR for the sm_90a backend: the producer (roles/load.py),
the consumers and the baseline's single
warpgroup are in ``roles/``; the softmax and rescale functions are defined
once (``KernelIR.functions``) with the schedule's decisions made here."""
from __future__ import annotations

from ..ir import Decl, KernelIR, RoleIR
from ..lowering import Lowering
from ..plan import Plan
from ..roles import load
from ..mod_kernel import has_mods
from .softmax import apply_mods_fn, biased, rescale_fn, softmax_fn, store_fn


def _functions(s, plan) -> tuple:
    mods = (apply_mods_fn(plan),) if has_mods(plan.mods) else ()
    extra = (softmax_fn(s, row_bias=True),) if biased(plan) else ()
    # the masked tile's column compare: relative to the thread's first column only where measured to need it
    # (softmax_fn): one-CTA-per-item kernels with K/V tiles over 128 keys and no mods (h10: the absolute form
    # spilled 64 B with nvcc 13.5.37). Elsewhere the absolute form (nvcc 13.0.88: the relative one lengthened
    # the persistent head-dim-128 preset's hot loop from 646 to 659 instructions and spilled in mods builds)
    relative = not mods and not plan.persistent and s.block_n > 128
    masked = softmax_fn(s, masked=True, relative_limits=relative)
    return (softmax_fn(s), masked, *extra, *mods, rescale_fn(s),
            store_fn(s, plan.mods is not None and plan.mods.sinks, plan.split_kv))


def _traced(lw, role: RoleIR, track: str, writer: str) -> RoleIR:
    """A profiling build's role: its trace track (``track``, a C expression)
    and the one thread that writes it (``writer``)."""
    if not lw.profile:
        return role
    head = (Decl("const int", "trace_track", track), Decl("const bool", "trace_writer", writer),
            Decl("uint32_t", "trace_n", "0"))
    return RoleIR(role.name, role.warps, head + tuple(role.body), role.instances, role.regs, role.blog)


def lower(schedule, plan: Plan, profile: bool = False) -> KernelIR:
    """Build every warp role's program for a plan (``profile``: with trace stamps)."""
    from .roles import consumer, cta

    lw = Lowering(plan, schedule, profile=profile)
    roles = []
    tracks = []
    if not plan.role_specs("load"):
        roles.append(_traced(lw, cta.build(lw), "0", "threadIdx.x == 0"))
        tracks.append("warpgroup")
    else:
        roles.append(_traced(lw, load.build(lw, own_setmaxnreg=False), "0", "lane_id() == 0"))
        tracks.append("producer (load warp)")
        spare = plan.role_specs("spare")[0]
        roles.append(RoleIR("spare", spare.warps, (), regs=spare.regs,
                            blog="the producer warpgroup's other warps: only their register budget"))
        roles.append(_traced(lw, consumer.build(lw), "1 + q", "(threadIdx.x & 127) == 0"))
        tracks += [f"consumer {q}" for q in range(plan.q_stages)]
    return KernelIR(plan=plan, roles=tuple(roles), wait_sites=tuple(lw.sites),
                    trace_tracks=tuple(tracks) if profile else (), trace_events=tuple(lw.events),
                    functions=_functions(schedule, plan))

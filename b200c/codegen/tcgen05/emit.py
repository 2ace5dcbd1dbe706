"""KernelIR -> CUDA source of the tcgen05 backend.

``templates/kernel.cu.j2`` is the file skeleton (header, launch notes, the
inlined PTX helper header, plan constants, one function per warp role, the
entry point); ``templates/stmt/<NodeType>.j2`` (here or shared) renders one IR
node each. The file is split into ``// ==== section: NAME ====`` blocks so tests
can check which part a schedule change touched. The templates receive the plan
and the IR only.
"""
from __future__ import annotations

from pathlib import Path

from ..ir import KernelIR, SetMaxNReg
from ..render import environment, indent, render_block
from .. import mod_kernel
from ..signature import KERNEL_NAME, c_parameter_list
from ..work import decomposition, template_args
from ..work import params as work_params
from .text import TEXT

_HERE = Path(__file__).parent
_CUDA = _HERE.parent / "cuda"


def _env():
    return environment(str(_HERE / "templates"), tuple(sorted(TEXT.items())))


def _ptx_helpers() -> str:
    """Text of ``b200c_ptx.cuh`` with the shared ``b200c_common.cuh`` in place of its include (inlined)."""
    from ..cuda import header_text

    return header_text("b200c_ptx.cuh")


def _range_cond(warps) -> str:
    lo, hi = warps[0], warps[-1]
    if lo == hi:
        return f"warp == {lo}"
    return f"warp <= {hi}" if lo == 0 else f"warp >= {lo} && warp <= {hi}"


def _dispatch(ir: KernelIR) -> list:
    out = []
    for r in ir.roles:
        if r.instances:
            warps = [w for _, ws in r.instances for w in ws]
            # Q stage q owns warps 4q..4q+3 (one warpgroup each, the first warpgroups of the CTA)
            assert all(ws == tuple(range(4 * q, 4 * q + 4)) for q, ws in r.instances), r.instances
            out.append(dict(cond=_range_cond(warps), role=r.name, args=", (int)(warp / 4)"))
        else:
            out.append(dict(cond=_range_cond(r.warps), role=r.name, args=""))
    return out


def _where(r) -> str:
    if r.instances:
        return "; ".join(f"Q stage {q}: warps {w[0]}-{w[-1]}" for q, w in r.instances)
    return f"warp{'s' if len(r.warps) > 1 else ''} " + (f"{r.warps[0]}-{r.warps[-1]}" if len(r.warps) > 1 else str(r.warps[0]))


def emit(ir: KernelIR, launch) -> str:
    """Render the whole .cu file of a kernel IR (``launch``: its LaunchInfo)."""
    from ...version import __version__

    plan = ir.plan
    env = _env()
    roles = []
    for r in ir.roles:
        # setmaxnreg first: values computed before it and live across it were spilled (measured)
        lead = tuple(n for n in r.body[:1] if isinstance(n, SetMaxNReg))
        roles.append(dict(name=r.name, blog=r.blog, where=_where(r), per_q_stage=bool(r.instances),
                          rows=r.name in ("cta", "softmax", "correction"), pin_trow=r.name == "correction",
                          pin_bases=r.name == "mma",
                          prelude=indent(render_block(env, lead)), body=indent(render_block(env, r.body[len(lead):]))))
    params = mod_kernel.params(plan.mods) + work_params(decomposition(plan))
    text = env.get_template("kernel.cu.j2").render(
        plan=plan,
        li=launch,
        version=__version__,
        ptx_helpers=_ptx_helpers(),
        tmem={t.kind: t for t in plan.tmem},
        desc=plan.descriptors,
        roles=roles,
        dispatch=_dispatch(ir),
        alloc_warp=0,
        work=template_args(decomposition(plan)),
        kernel_name=KERNEL_NAME,
        entry_params=c_parameter_list(params, f"{KERNEL_NAME}("),
        mods=mod_kernel.template_args(plan.mods),
        params=params,
    )
    return text.rstrip() + "\n"

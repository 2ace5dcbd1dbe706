"""KernelIR -> CUDA source of the sm_90a backend.

``templates/kernel.cu.j2`` is the file skeleton (header, launch notes, the
inlined helper header ``cuda/b200c_sm90.cuh``, plan constants, the wgmma
wrappers and issue functions, the softmax functions, one function per warp
role, the entry point); ``templates/stmt/<NodeType>.j2`` (here, then the
shared folder) renders one IR node each. Sections are marked
``// ==== section: NAME ====`` like the tcgen05 files. The templates receive
the plan, the launch info and the IR only; every decision is made in Python.
"""
from __future__ import annotations

from pathlib import Path

from ..ir import KernelIR
from ..render import environment, indent, render_block
from .. import mod_kernel
from ..signature import KERNEL_NAME, c_parameter_list
from ..work import decomposition, template_args
from ..work import params as work_params
from .text import TEXT
from .wgmma import wrappers

_HERE = Path(__file__).parent
_CUDA = _HERE.parent / "cuda"


def _env():
    return environment(str(_HERE / "templates"), tuple(sorted(TEXT.items())))


def helper_header() -> str:
    """Text of ``b200c_sm90.cuh`` with the shared ``b200c_common.cuh`` in place of its include (inlined into
    every sm90a kernel)."""
    from ..cuda import header_text

    return header_text("b200c_sm90.cuh")


def _where(r) -> str:
    if r.instances:
        return "; ".join(f"consumer {q}: warps {w[0]}-{w[-1]}" for q, w in r.instances)
    return f"warp{'s' if len(r.warps) > 1 else ''} " + (f"{r.warps[0]}-{r.warps[-1]}" if len(r.warps) > 1
                                                        else str(r.warps[0]))


def _cond(warps) -> str:
    lo, hi = warps[0], warps[-1]
    if lo == hi:
        return f"warp == {lo}"
    return f"warp <= {hi}" if lo == 0 else f"warp >= {lo} && warp <= {hi}"


def _blocks(ir: KernelIR) -> list:
    """The entry's dispatch, one block per warpgroup kind: its register budget
    (setmaxnreg, PTX 9.7.19.5: every warp of the warpgroup executes the same
    instruction, ``.sync.aligned``; it sits inside the block so ptxas compiles
    each role under its own budget) and the roles it runs.

    Returns a list of ``dict(cond, who, budget, calls)``; ``budget`` is
    ``(inc|dec, regs)`` or None, ``calls`` ``(warp condition or "", statement)``."""
    plan = ir.plan
    entry = plan.limits.entry_registers(plan.threads)

    def budget(regs):
        if regs is None or regs == entry:
            return None
        return ("inc" if regs > entry else "dec", regs)

    blocks = []
    producer = [r for r in ir.roles if r.name in ("load", "spare")]
    if producer:
        calls = []
        for r in producer:
            if r.body:
                calls.append((_cond(r.warps), f"role_{r.name}(c);"))
            else:
                calls.append(("", f"// warps {r.warps[0]}-{r.warps[-1]} ({r.name}): nothing after the register budget"))
        blocks.append(dict(cond="wg == 0", who="producer warpgroup (FA3 §3: one warp issues TMA)",
                           budget=budget(producer[0].regs), calls=calls))
    for r in ir.roles:
        if r.instances:
            # consumer q owns warpgroup q + 1 (warps 4q+4 .. 4q+7)
            assert all(ws == tuple(range(4 * q + 4, 4 * q + 8)) for q, ws in r.instances), r.instances
            blocks.append(dict(cond="", who=f"{r.name} warpgroups 1..{len(r.instances)} (Q stage = wg - 1)",
                               budget=budget(r.regs), calls=[("", f"role_{r.name}(c, wg - 1);")]))
        elif r.name not in ("load", "spare"):
            blocks.append(dict(cond="", who=f"{r.name}: warps {r.warps[0]}-{r.warps[-1]}", budget=budget(r.regs),
                               calls=[("", f"role_{r.name}(c);")]))
    return blocks


def _scale_units(ir: KernelIR) -> dict:
    """The softmax scale in the exponent's units (blog ch.8: log2 units for ex2), as the entry computes it."""
    if ir.functions[0].mode == "ex2":
        return dict(note="log2: scale * log2(e), blog ch.8", expr="softmax_scale * 1.4426950408889634f")
    return dict(note="natural log", expr="softmax_scale")


def _rereads_consumer_index(ir: KernelIR) -> bool:
    """Whether a node prints a re-read of the consumer index (``consumer_index()``) for its ``q``."""
    def nodes(ns):
        for n in ns:
            yield n
            yield from nodes(n.children())
    return any(getattr(n, "printed", None) for r in ir.roles for n in nodes(r.body))


def emit(ir: KernelIR, launch) -> str:
    """Render the whole .cu file of a kernel IR (``launch``: its LaunchInfo)."""
    from ...version import __version__

    plan = ir.plan
    env = _env()
    roles = [dict(name=r.name, blog=r.blog, where=_where(r), per_q_stage=bool(r.instances),
                  accumulators=r.name in ("consumer", "cta"), body=indent(render_block(env, r.body)))
             for r in ir.roles if r.body]
    params = mod_kernel.params(plan.mods) + work_params(decomposition(plan))
    text = env.get_template("kernel.cu.j2").render(
        plan=plan,
        li=launch,
        ir=ir,
        version=__version__,
        helpers=helper_header(),
        wgmma_wrappers=wrappers(plan.tile.block_n, plan.tile.head_dim),
        desc=plan.descriptors,
        functions=render_block(env, ir.functions),
        roles=roles,
        blocks=_blocks(ir),
        entry_regs=plan.limits.entry_registers(plan.threads),
        traced=bool(ir.trace_tracks),
        consumer_index=_rereads_consumer_index(ir),
        scale_units=_scale_units(ir),
        kernel_name=KERNEL_NAME,
        params=params,
        work=template_args(decomposition(plan)),
        entry_params=c_parameter_list(params, f"{KERNEL_NAME}("),
        mods=mod_kernel.template_args(plan.mods),
    )
    return text.rstrip() + "\n"

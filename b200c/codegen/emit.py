"""KernelIR -> CUDA source through jinja2 templates.

``templates/kernel.cu.j2`` is the file skeleton (header, launch notes, the
inlined PTX helper header, plan constants, one function per warp role, the
entry point); ``templates/stmt/<NodeType>.j2`` renders one IR node each. The
file is split into ``// ==== section: NAME ====`` blocks so tests can check
which part a schedule change touched.
"""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from ..dsl.resources import TILE_BYTES, kv_slot_bytes
from .ir import KernelIR

_HERE = Path(__file__).parent


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
    )


def _indent(text: str, n: int = 2) -> str:
    pad = " " * n
    return "\n".join((pad + line) if line.strip() else "" for line in text.splitlines())


def render_block(nodes) -> str:
    """Render a list of IR nodes, children indented by two spaces."""
    out = []
    for node in nodes:
        tpl = _env().get_template(f"stmt/{type(node).__name__}.j2")
        body = _indent(render_block(node.children())) if node.children() else ""
        out.append(tpl.render(n=node, body=body).rstrip("\n"))
    return "\n".join(out)


def idesc_f16(m: int, n: int, a_mn_major: bool, b_mn_major: bool) -> int:
    """Instruction descriptor of tcgen05.mma kind::f16, BF16 x BF16 -> FP32
    (PTX 9.7.16.4.2 Table 42; sm100-facts.md §4): D fmt bits 4-5 = 1 (F32),
    A/B fmt bits 7-9/10-12 = 1 (BF16), transpose bits 15/16, N>>3 at 17,
    M>>4 at 24."""
    return (1 << 4) | (1 << 7) | (1 << 10) | (int(a_mn_major) << 15) | (int(b_mn_major) << 16) | \
        ((n >> 3) << 17) | ((m >> 4) << 24)


def descriptor_constants(swizzle: str) -> dict:
    """Canonical-layout constants matching the TMA slices (sm100-facts.md §3).

    No swizzle: TMA writes 16 slices of [128 rows][8 columns] (2048 B each);
    a K-major core matrix is 8 rows x 16 B, so SBO (8-row step) = 128 and LBO
    (next 8 columns) = 2048; one K=16 step spans two slices (+4096 B). V is
    MN-major: LBO (next 8 K rows) = 128, SBO (next 8 N columns) = 2048, and a
    K step is 16 rows (+256 B).
    128B swizzle: 2 slices of [128 rows][64 columns] (16384 B each); K-major
    SBO = 1024 (8 rows of 128 B), LBO unused (16), K step +32 B inside a row
    and +16 KiB per slice; V MN-major LBO = 16384 (next 64 N columns), SBO =
    1024 (next 8 K rows), K step +2048 B.
    """
    if swizzle == "128B":
        return dict(
            swizzle_code=2, k_lbo=16, k_sbo=1024, mn_lbo=16384, mn_sbo=1024,
            k_step="(uint32_t)(kk / 4) * 16384u + (uint32_t)(kk % 4) * 32u",
            mn_step="(uint32_t)kk * 2048u",
            k_offset="(uint32_t)(col / 64) * 16384u + row * 128u + ((((uint32_t)(col % 64) / 8u) ^ (row % 8u)) * 16u)",
            tma=dict(slices=2, inner=64, slice_bytes=16384),
        )
    return dict(
        swizzle_code=0, k_lbo=2048, k_sbo=128, mn_lbo=128, mn_sbo=2048,
        k_step="(uint32_t)kk * 4096u",
        mn_step="(uint32_t)kk * 256u",
        k_offset="(uint32_t)(col / 8) * 2048u + row * 16u",
        tma=dict(slices=16, inner=8, slice_bytes=2048),
    )


def _ptx_helpers() -> str:
    text = (_HERE / "cuda" / "b200c_ptx.cuh").read_text()
    return text.rstrip("\n")


def _range_cond(warps) -> str:
    lo, hi = warps[0], warps[-1]
    if lo == hi:
        return f"warp == {lo}"
    return f"warp <= {hi}" if lo == 0 else f"warp >= {lo} && warp <= {hi}"


def _tmem_formulas(plan) -> dict:
    """C expressions of the TMEM column of S, P and O of Q stage ``q``, read off
    the plan's TMEM map (first column + per-stage stride)."""
    cols = {}
    for r in plan.tmem:
        cols.setdefault(r.name[0], {})[r.q_stage] = (r.col, r.ncols)
    out = {}
    for kind, by_q in cols.items():
        base = by_q[0][0]
        stride = by_q[1][0] - base if 1 in by_q else (plan.schedule.block_n if kind in "SP" else by_q[0][1])
        if kind == "O":
            out[kind] = f"{base}u + (uint32_t)q * {stride}u"
        elif kind == "P":
            out[kind] = f"(uint32_t)q * {stride}u + {base}u"
        else:
            out[kind] = f"{base}u + (uint32_t)q * {stride}u" if base else f"(uint32_t)q * {stride}u"
    return out


def _dispatch(ir: KernelIR) -> list:
    out = []
    for r in ir.roles:
        if r.instances:
            for q, warps in r.instances:
                out.append(dict(cond=_range_cond(warps), role=r.name, targs=f"<{q}>"))
        else:
            out.append(dict(cond=_range_cond(r.warps), role=r.name, targs=""))
    return out


def _where(r) -> str:
    if r.instances:
        return "; ".join(f"Q stage {q}: warps {w[0]}-{w[-1]}" for q, w in r.instances)
    return f"warp{'s' if len(r.warps) > 1 else ''} " + (f"{r.warps[0]}-{r.warps[-1]}" if len(r.warps) > 1 else str(r.warps[0]))


def emit(ir: KernelIR) -> str:
    """Render the whole .cu file of a kernel IR."""
    from .. import __version__

    plan = ir.plan
    s = plan.schedule
    d = descriptor_constants(s.swizzle)
    d["idesc_qk"] = idesc_f16(128, 128, False, False)
    d["idesc_pv"] = idesc_f16(128, 128, False, True)
    roles = [
        dict(name=r.name, blog=r.blog, where=_where(r), templated=bool(r.instances),
             rows=r.name in ("cta", "softmax", "correction"), body=_indent(render_block(r.body)))
        for r in ir.roles
    ]
    tmem = _tmem_formulas(plan)
    text = _env().get_template("kernel.cu.j2").render(
        s=s,
        plan=plan,
        li=plan.launch_info(ir),
        version=__version__,
        ptx_helpers=_ptx_helpers(),
        tile_bytes=TILE_BYTES,
        kv_slot_bytes=kv_slot_bytes(s),
        tmem_s=tmem["S"],
        tmem_p=tmem.get("P"),
        tmem_o=tmem["O"],
        num_barriers=sum(b.count for b in plan.barriers),
        tma=d["tma"],
        desc=d,
        roles=roles,
        dispatch=_dispatch(ir),
        alloc_warp=0,
    )
    return text.rstrip() + "\n"

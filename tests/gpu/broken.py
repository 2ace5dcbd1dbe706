"""Deliberately broken kernels, built only by tests: IR transforms that drop a
hand-off so the bounded waits must name the stuck role and barrier."""
from __future__ import annotations

import msgspec

from b200c.codegen.ir import Arrive, KernelIR


def _drop(body, barrier):
    out = []
    for n in body:
        if isinstance(n, Arrive) and n.barrier == barrier:
            continue
        if getattr(n, "body", ()):
            n = msgspec.structs.replace(n, body=tuple(_drop(n.body, barrier)))
        out.append(n)
    return tuple(out)


def broken_kernel(schedule_path, role: str, barrier: str):
    """GeneratedKernel of a schedule file whose ``role`` never arrives on
    ``barrier``, emitted WITHOUT the protocol verifier (which rejects it), so
    the bounded waits of the emulation target must name the hang at run time."""
    import b200c
    from b200c.codegen import GeneratedKernel, make_plan
    from b200c.codegen.targets import resolve
    from b200c.codegen.launch import launch_info

    s = b200c.load_schedule_file(schedule_path)
    plan = make_plan(s)
    backend = resolve("sm100a").backend_module()
    ir = drop_arrive(backend.lower(s, plan), role, barrier)
    li = launch_info(plan, ir)
    return GeneratedKernel(backend.emit(ir, li), li)


def drop_arrive(ir: KernelIR, role: str, barrier: str) -> KernelIR:
    """Copy of ``ir`` in which ``role`` never arrives on ``barrier``."""
    roles = tuple(msgspec.structs.replace(r, body=_drop(r.body, barrier)) if r.name == role else r for r in ir.roles)
    if roles == ir.roles:
        raise ValueError(f"role {role!r} has no arrive on {barrier!r}")
    return msgspec.structs.replace(ir, roles=roles)

"""Deliberately broken kernels, built only by tests: IR transforms that drop a
hand-off so the bounded waits must name the stuck role and barrier."""
from __future__ import annotations

import dataclasses

from b200c.codegen.ir import Arrive, KernelIR


def _drop(body, barrier):
    out = []
    for n in body:
        if isinstance(n, Arrive) and n.barrier == barrier:
            continue
        if getattr(n, "body", ()):
            n = dataclasses.replace(n, body=tuple(_drop(n.body, barrier)))
        out.append(n)
    return tuple(out)


def drop_arrive(ir: KernelIR, role: str, barrier: str) -> KernelIR:
    """Copy of ``ir`` in which ``role`` never arrives on ``barrier``."""
    roles = tuple(dataclasses.replace(r, body=_drop(r.body, barrier)) if r.name == role else r for r in ir.roles)
    if roles == ir.roles:
        raise ValueError(f"role {role!r} has no arrive on {barrier!r}")
    return dataclasses.replace(ir, roles=roles)

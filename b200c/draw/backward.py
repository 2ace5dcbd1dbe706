"""The :class:`~b200c.draw.timeline.Timeline` of a backward schedule: the sm_90a backward kernel's warp
roles (the producer thread and the consumer warpgroups) over a few visits of one work item (one K/V
tile), cut into steps and placed in columns as the forward's picture is (:mod:`b200c.draw.timeline`).

The steps come from the same barrier-protocol model that checks the generated kernel
(:func:`b200c.codegen.verify.protocol_trace` of :func:`b200c.codegen.sm90.backward.backward_kernel_ir`),
so the arrows are the kernel's hand-offs: ``kv_full`` (K and V once per item), ``q_full`` / ``q_empty``
(the Q / dO / LSE / D ring) and the named barrier ``ds_ready`` (every warpgroup's dS^T rows in shared
memory before dQ reads them). The SMEM map is the layout's regions; there is no TMEM on sm_90a.
"""
from __future__ import annotations

from .timeline import Lane, SmemBlock, Timeline, _check_iterations, _columns, _edges, _group, numbered


def backward_timeline(schedule, target: str = "auto", iterations: int = 3) -> Timeline:
    """The picture's content for a :class:`b200c.dsl.backward_schedule.BackwardSchedule`.

    Args:
        schedule: a BackwardSchedule.
        target: ``"auto"`` (the first target with a backward design: sm90a) or a target name.
        iterations: visits (Q tiles) of the work item to unroll, 1 .. 6.

    Raises:
        DrawError: ``iterations`` out of range.
        ScheduleError / ResourceError / BackwardNotSupportedError: as
            :func:`b200c.codegen.sm90.backward.backward_layout`; ProtocolError: a broken barrier protocol.
    """
    from ..codegen import hardware
    from ..codegen.sm90.backward import backward_kernel_ir, backward_layout
    from ..codegen.targets import AUTO, REGISTRY, resolve_or_auto
    from ..codegen.verify import protocol_trace

    _check_iterations(iterations)
    t = resolve_or_auto(target)
    if t == AUTO:
        t = next(x for x in REGISTRY if x.backward)
    lay = backward_layout(schedule, t.name)
    ir = backward_kernel_ir(schedule, t.name)
    events = protocol_trace(ir, iterations, 1)
    groups = _group(events)
    step_of = {seq: gi for gi, g in enumerate(groups) for seq, _ in g[3]}
    edges = _edges(events, step_of, ir.plan)
    columns = _columns(groups, edges)
    lanes = _lanes(ir)
    steps, edges = numbered(groups, edges, columns, lanes, [_label(g) for g in groups])
    smem = tuple(SmemBlock(name, off, size, what) for name, off, size, what in lay.regions)
    backend = t.backend.rsplit(".", 1)[-1]  # the backend's short name, as a forward plan gives it ("sm90")
    return Timeline(name=lay.name, blog_stage=0, backend=backend, iterations=iterations, lanes=tuple(lanes),
                    steps=steps, edges=edges, smem=smem, smem_bytes=lay.smem_bytes,
                    smem_limit=hardware.SM90.smem_bytes, tmem=(), tmem_alloc=0, tmem_limit=0,
                    unit="visits (Q tiles) of one work item (one K/V tile), backward",
                    registers=f"none ({backend}): S^T, dP^T, dK, dV\nand dQ live in registers")


def _lanes(ir) -> list:
    lanes = []
    for role in ir.roles:
        if role.instances:
            for q, warps in role.instances:
                lanes.append(Lane(f"{role.name}[{q}]", role.name, q,
                                  f"consumer warpgroup {q}\n(warps {warps[0]}-{warps[-1]})"))
        else:
            lanes.append(Lane(role.name, role.name, None, f"{role.name}\n(warp {role.warps[0]})"))
    return lanes


def _visit(evs) -> str:
    for _, e in evs:
        for el in e.path[1:]:
            if el.startswith("v="):
                return el[2:]
    return ""


def _label(group) -> str:
    """A step's caption: the producer's loads (``load K, V``; ``load Q, dO (v)``: with the visit's LSE and D),
    a consumer's visit ``v`` (S^T, dP^T, dV, dK, dS^T, then dQ after ``ds_ready``)."""
    _, role, _, evs = group
    v = _visit(evs)
    if role == "load":
        return "load K, V" if any(e.barrier == "kv_full" for _, e in evs) else f"load Q, dO ({v})"
    return f"visit ({v})" if v else "wait K, V"


__all__ = ["backward_timeline"]

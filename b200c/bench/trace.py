"""Measured timelines: a profiling build stamps each warp role's steps with
``%globaltimer`` (IR node :class:`b200c.codegen.ir.Stamp`), and this module
turns the buffer into a Chrome/Perfetto trace JSON with one process per CTA
and one track per warp-role instance (producer, consumer 0, consumer 1, ...),
so a user sees where each role waits (open it in ui.perfetto.dev or
chrome://tracing), plus an optional timeline picture.

Buffer layout (written by ``trace_stamp_to`` in b200c_sm90.cuh): CTAs x
tracks x capacity 64-bit records ``(ns << 8) | event``; unused records are 0.
The shift keeps the timer modulo 2^56 ns (about 2.3 years), enough for
differences within one launch. %globaltimer's resolution is the driver's
(tens of ns to 1 us on some systems): spans shorter than that show as 0.
The event table (id -> span name, B/E edge) and the track names come from
the kernel's LaunchInfo (``trace_events``, ``trace_tracks``).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

DEFAULT_CTAS = 2
DEFAULT_CAPACITY = 16384


def decode(records, tracks: tuple, events: tuple, ctas: int, capacity: int) -> list:
    """Chrome trace events of a record buffer (a sequence of ints, length
    ``ctas * len(tracks) * capacity``); timestamps in microseconds from the first record."""
    out = []
    t0 = min((r >> 8 for r in records if r), default=0)
    for cta in range(ctas):
        out.append({"name": "process_name", "ph": "M", "pid": cta, "args": {"name": f"CTA {cta}"}})
        for ti, tname in enumerate(tracks):
            out.append({"name": "thread_name", "ph": "M", "pid": cta, "tid": ti, "args": {"name": tname}})
            base = (cta * len(tracks) + ti) * capacity
            for n in range(capacity):
                r = records[base + n]
                if not r:
                    break
                ev = r & 0xFF
                if ev >= len(events):
                    continue
                name, edge = events[ev]
                out.append({"name": name, "ph": edge, "ts": ((r >> 8) - t0) / 1000.0, "pid": cta, "tid": ti})
    return out


def write_trace(trace_events: list, path, meta: dict | None = None) -> None:
    """Chrome trace JSON (``{"traceEvents": [...], "displayTimeUnit": "ns"}``)."""
    Path(path).write_text(json.dumps({"traceEvents": trace_events, "displayTimeUnit": "ns",
                                      "otherData": meta or {}}))


def spans(trace_events: list) -> list:
    """``(pid, tid, name, start_us, end_us)`` of every closed B/E pair."""
    open_ = {}
    out = []
    for e in trace_events:
        if e.get("ph") == "B":
            open_.setdefault((e["pid"], e["tid"]), []).append(e)
        elif e.get("ph") == "E":
            stack = open_.get((e["pid"], e["tid"]), [])
            if stack:
                b = stack.pop()
                out.append((e["pid"], e["tid"], b["name"], b["ts"], e["ts"]))
    return out


def plot_timeline(trace_events: list, path, title: str = "", max_us: float | None = None) -> None:
    """A picture of the spans (one row per CTA x track), matplotlib Agg."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace_events if e.get("name") == "thread_name"}
    rows = sorted(names)
    sp = spans(trace_events)
    kinds = sorted({s[2] for s in sp})
    cmap = plt.get_cmap("tab20")
    color = {k: cmap(i % 20) for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(14, 0.5 * len(rows) + 1.5))
    for y, key in enumerate(rows):
        segs = [(a, b - a, name) for pid, tid, name, a, b in sp if (pid, tid) == key and (max_us is None or a < max_us)]
        for name in kinds:
            xs = [(a, w) for a, w, n in segs if n == name]
            if xs:
                ax.broken_barh(xs, (y - 0.4, 0.8), color=color[name])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"CTA {pid} {names[(pid, tid)]}" for pid, tid in rows], fontsize=8)
    ax.set_xlabel("microseconds")
    if max_us:
        ax.set_xlim(0, max_us)
    ax.legend(handles=[matplotlib.patches.Patch(color=color[k], label=k) for k in kinds], fontsize=7, ncol=6,
              loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def profile(schedule, shape, out_path, *, ctas: int = DEFAULT_CTAS, capacity: int = DEFAULT_CAPACITY,
            target: str = "sm90a", png: str | None = None) -> dict:
    """Build ``schedule`` with trace stamps for ``target``, run it once on
    random inputs of ``shape``, write the trace JSON (and a picture).

    Returns a summary ``{"events": n, "tracks": [...], "path": ...}``.

    Raises:
        TargetError: the target's backend has no stamps (sm100a/tcgen05 today).
        UnsupportedDeviceError, BuildError, LaunchError: as ``b200c.attention``.
    """
    import torch

    from ..codegen import generate
    from ..runtime import driver
    from ..runtime.build import build
    from ..runtime.op import device_capability
    from .run import make_inputs

    dev = torch.cuda.current_device()
    cap, name = device_capability(dev)
    from ..codegen.targets import schedule_target

    resolved = driver.resolve_target(target, cap, name, schedule_target(schedule))
    gen = generate(schedule, resolved, profile=True)
    lk = driver.load(build(gen, resolved), dev)
    info = lk.built.launch
    n = ctas * len(info.trace_tracks) * capacity
    buf = torch.zeros(n, dtype=torch.int64, device=f"cuda:{dev}")
    for gname, data in (("b200c_trace", struct.pack("<Q", buf.data_ptr())), ("b200c_trace_cap", struct.pack("<i", capacity)),
                        ("b200c_trace_ctas", struct.pack("<i", ctas))):
        if not driver._set_global(lk.module, gname, data):
            from ..errors import LaunchError

            raise LaunchError(f"profiling build of {schedule.name!r} lacks the global {gname}")
    inputs = make_inputs(shape, f"cuda:{dev}")
    q, k, v = inputs.q, inputs.k, inputs.v
    from ..runtime.api import attention_generated

    # the same LoadedKernel (driver.load caches per cubin and device), so the trace globals set above apply
    attention_generated(q, k, v, gen, target=resolved, causal=shape.causal)
    driver.synchronize(dev)
    records = [int(x) & 0xFFFFFFFFFFFFFFFF for x in buf.cpu().tolist()]
    evs = decode(records, info.trace_tracks, info.trace_events, ctas, capacity)
    meta = {"schedule": schedule.name, "shape": shape.label, "device": name, "ctas": ctas, "capacity": capacity,
            "note": "%globaltimer stamps of a profiling build (one thread per warp-role instance)"}
    write_trace(evs, out_path, meta)
    if png:
        plot_timeline(evs, png, f"{schedule.name} on {name}, {shape.label}")
    return {"events": sum(1 for e in evs if e.get("ph") in ("B", "E")), "tracks": list(info.trace_tracks),
            "path": str(out_path)}

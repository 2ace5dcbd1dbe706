"""Where one call's GPU time goes: the kernels it launches and each one's time (``torch.profiler``), for
``b200c bench --backward --kernels`` (b200c's preprocess, main and postprocess kernels next to the
baselines' own kernels).

Each timed call is preceded by the bench's L2 flush, as in :func:`b200c.bench.timing.time_ms`; the flush's
own kernels (counted by profiling the flush alone first) are left out of the result by position, so a call
that launches a kernel of the same name keeps it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelTime:
    """One GPU kernel of a call: ``name`` (shortened: no template or parameter list), ``per_call`` (its
    launches per call) and ``us`` (its mean device time per launch, microseconds)."""

    name: str
    per_call: float
    us: float

    @property
    def us_per_call(self) -> float:
        """Its device time per call, microseconds (``per_call * us``)."""
        return self.per_call * self.us


def short_name(name: str, width: int = 60) -> str:
    """A kernel's name without its parameter or template list (``void f<int>(float*)`` -> ``f``), at most
    ``width`` characters."""
    base = name.split("(")[0].split("<")[0].strip()
    base = base.split(" ")[-1] if base else name
    return base[:width] or name[:width]


def summarize(events, calls: int, lead: int = 0) -> list:
    """``events``: ``(kernel name, device microseconds)`` of every kernel (and copy or memset) launched by
    ``calls`` calls, in launch order, each call's kernels preceded by ``lead`` kernels that are not the
    call's (the L2 flush), which are left out. Returns one :class:`KernelTime` per distinct kernel name, in
    order of first launch, labelled with its short name (its name up to the parameter list where two share
    a short name).

    Raises:
        ValueError: ``calls`` < 1, or ``lead`` > 0 with a count of events that is not ``calls`` equal
            groups of at least ``lead`` + 1 (a call whose kernels vary from call to call).
    """
    if calls < 1:
        raise ValueError(f"calls must be >= 1 (got {calls})")
    events = list(events)
    if lead:
        group, rest = divmod(len(events), calls)
        if rest or group <= lead:
            raise ValueError(f"{len(events)} kernels over {calls} calls with {lead} flush kernels before each: "
                             "the calls did not launch the same kernels")
        events = [e for i, e in enumerate(events) if i % group >= lead]
    order, times = [], {}
    for name, us in events:  # grouped by the full name: two kernels of one short name stay apart
        if name not in times:
            order.append(name)
            times[name] = []
        times[name].append(float(us))
    shorts = [short_name(n) for n in order]
    shown = [sh if shorts.count(sh) == 1 else n.split("(")[0].removeprefix("void ").strip()[:100]
             for sh, n in zip(shorts, order)]
    return [KernelTime(label, len(times[n]) / calls, sum(times[n]) / len(times[n])) for label, n in zip(shown, order)]


def _cuda_kernels(prof) -> list:
    """``(name, device us)`` of the profile's GPU kernels and copies, in order of their start."""
    ev = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    return [(e.name, e.device_time) for e in ev]


def kernel_times(fn, *, calls: int = 10, warmup: int = 3, device=None) -> list:
    """Profile ``calls`` calls of ``fn()`` (which enqueues GPU work on the current stream), each after an L2
    flush, and return :func:`summarize`'s list (the flush's kernels left out). Needs a CUDA GPU; raises
    whatever ``fn`` raises."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from .timing import _flush_buffer

    device = device if device is not None else torch.cuda.current_device()
    flush = _flush_buffer(device)
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        flush.zero_()
        torch.cuda.synchronize(device)
    lead = len(_cuda_kernels(p))
    if lead < 1:  # zero_() launches a kernel: a profile without it cannot be split into calls
        raise ValueError("the profiler recorded no GPU activity for the L2 flush alone")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(calls):
            flush.zero_()
            fn()
        torch.cuda.synchronize(device)
    return summarize(_cuda_kernels(p), calls, lead)


def describe(kernels: list) -> str:
    """One line: each kernel's time per call (``x2`` where a call launches it twice) and their sum."""
    parts = [f"{k.name} {k.us_per_call:,.1f} us" + (f" (x{k.per_call:g})" if k.per_call != 1 else "")
             for k in kernels]
    total = sum(k.us_per_call for k in kernels)
    return "; ".join(parts) + f"; sum {total:,.1f} us"


__all__ = ["KernelTime", "short_name", "summarize", "kernel_times", "describe"]

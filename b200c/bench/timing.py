"""Timing on the GPU: CUDA events around each run, L2 flushed before each one
(a 256 MiB write evicts the 50-60 MB L2 of an H100/H200/B200), warm-up runs
first, the median of the timed runs reported."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

FLUSH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Timing:
    """Milliseconds of the timed runs: median (reported), min, and every run."""

    median_ms: float
    min_ms: float
    runs_ms: tuple


_flush = {}


def _flush_buffer(device):
    import torch

    if device not in _flush:
        _flush[device] = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    return _flush[device]


def time_ms(fn, *, warmup: int = 5, iters: int = 30, device=None) -> Timing:
    """Time ``fn()`` (which enqueues GPU work on the current stream).

    ``warmup`` untimed runs, then ``iters`` runs each preceded by an L2 flush
    and bracketed by CUDA events; returns their median. Raises whatever
    ``fn`` raises."""
    import torch

    device = device if device is not None else torch.cuda.current_device()
    flush = _flush_buffer(device)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    runs = tuple(s.elapsed_time(e) for s, e in events)
    return Timing(statistics.median(runs), min(runs), runs)


def time_interleaved(fns, *, warmup: int = 5, iters: int = 30, device=None) -> list:
    """Time several functions side by side: each round runs every ``fns[i]()`` once, in order, each
    preceded by an L2 flush and bracketed by CUDA events; returns one :class:`Timing` per function.
    The GPU's clock drifts with its power and temperature over a run (a cold H200 ran the same kernel
    ~10 % faster in the first burst after an idle gap than a second later), so kernels compared by a
    ratio are timed in the same rounds rather than one after the other. Raises whatever a function
    raises."""
    import torch

    device = device if device is not None else torch.cuda.current_device()
    flush = _flush_buffer(device)
    for _ in range(warmup):
        for fn in fns:
            fn()
    torch.cuda.synchronize(device)
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
              for _ in range(iters)]
    for row in events:
        for fn, (start, end) in zip(fns, row):
            flush.zero_()
            start.record()
            fn()
            end.record()
    torch.cuda.synchronize(device)
    out = []
    for i in range(len(fns)):
        runs = tuple(row[i][0].elapsed_time(row[i][1]) for row in events)
        out.append(Timing(statistics.median(runs), min(runs), runs))
    return out

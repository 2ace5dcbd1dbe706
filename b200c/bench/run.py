"""The measurement loop: per shape, every baseline and every schedule, one row each."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from ..errors import B200cError
from .baselines import REFERENCE, baselines
from .timing import time_ms


@dataclass
class Row:
    """One measured kernel on one shape.

    Attributes:
        kernel: schedule name or baseline name.
        kind: ``"b200c"`` or ``"baseline"``.
        source: the schedule file ("" for baselines).
        stage: the schedule's ``blog_stage`` (None for baselines).
        shape: ``BxHxS``; seq: S.
        ms: median milliseconds (None if it failed); tflops: 4 B H S^2 D / time.
        pct: percent of the reference baseline (cuDNN) on the same shape, same run.
        correct: b200c kernels: FlashAttention's rule on (batch 0, head 0) against FP32
            attention (max|out - ref| <= 2 max|sdpa - ref| + 1e-3); None when not checked.
        max_err, tol: the numbers of that check.
        error: why the kernel could not run ("" if it ran).
    """

    kernel: str
    kind: str
    source: str
    stage: Optional[int]
    shape: str
    seq: int
    ms: Optional[float] = None
    tflops: Optional[float] = None
    pct: Optional[float] = None
    correct: Optional[bool] = None
    max_err: Optional[float] = None
    tol: Optional[float] = None
    error: str = ""
    runs_ms: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """Plain dict (JSON/CSV)."""
        return asdict(self)


def make_inputs(shape, device, seed: int = 0):
    """Random BF16 q, k, v of logical shape (B, H, S, D) on ``device``."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(shape.batch, shape.heads, shape.seq, shape.head_dim, generator=g, device=device,
                             dtype=torch.bfloat16) for _ in range(3))


def check_head(out, q, k, v) -> tuple:
    """(max_err, tol) of FlashAttention's rule on batch 0, head 0: the error of
    ``out`` against FP32 attention vs twice that of torch SDPA (BF16) + 1e-3."""
    import torch
    import torch.nn.functional as F

    qs, ks, vs = (t[:1, :1] for t in (q, k, v))
    scale = q.shape[-1] ** -0.5
    ref = torch.softmax((qs.float() @ ks.float().transpose(-1, -2)) * scale, dim=-1) @ vs.float()
    sd = F.scaled_dot_product_attention(qs, ks, vs)
    tol = 2 * (sd.float() - ref).abs().max().item() + 1e-3
    err = (out[:1, :1].float() - ref).abs().max().item()
    return err, tol


def measure(schedules, shapes, device, *, target: str = "auto", timer=time_ms, warmup: int = 5, iters: int = 30,
            check: bool = True, progress: bool = True, with_baselines: bool = True) -> list:
    """Measure every baseline and schedule on every shape.

    Args:
        schedules: ``(source path, Schedule)`` pairs.
        shapes: :class:`~b200c.bench.shapes.Shape` s.
        device: the :class:`~b200c.bench.device.Device`.
        target: b200c target (``auto``: sm90a on Hopper, sm100a on a B200).
        timer: ``timer(fn, warmup=, iters=) -> Timing`` (mocked in CPU tests).
        check: run the correctness check of each b200c kernel before timing it.
        progress: a tqdm progress bar on stderr.

    Returns:
        list of :class:`Row`; failures are rows with ``error`` set.
    """
    from ..runtime.api import attention

    bar = None
    if progress:
        from tqdm import tqdm

        n_base = len(baselines_names(device)) if with_baselines else 0
        bar = tqdm(total=len(shapes) * (n_base + len(schedules)), unit="kernel", desc="b200c bench", leave=False)
    rows = []
    for shape in shapes:
        q, k, v = make_inputs(shape, f"cuda:{device.index}")
        if with_baselines:
            for name, fn in baselines(q, k, v, device.capability):
                if bar is not None:
                    bar.set_postfix_str(f"{name} {shape.label}")
                rows.append(_time_one(name, "baseline", "", None, shape, fn, timer, warmup, iters))
                if bar is not None:
                    bar.update(1)
        for src, sched in schedules:
            if bar is not None:
                bar.set_postfix_str(f"{sched.name} {shape.label}")
            fn = lambda s=sched: attention(q, k, v, schedule=s, target=target)  # noqa: E731
            row = Row(sched.name, "b200c", str(src), sched.blog_stage, shape.label, shape.seq)
            try:
                out = fn()  # builds (cached on disk) and loads on the first call
                if check:
                    row.max_err, row.tol = check_head(out, q, k, v)
                    row.correct = bool(row.max_err <= row.tol)
                row = _time_one(sched.name, "b200c", str(src), sched.blog_stage, shape, fn, timer, warmup, iters,
                                base=row)
            except B200cError as e:
                row.error = str(e)
            rows.append(row)
            if bar is not None:
                bar.update(1)
        del q, k, v
    if bar is not None:
        bar.close()
    add_percentages(rows)
    return rows


def baselines_names(device) -> list:
    """Names of the baselines on this device (without building inputs)."""
    from .baselines import SDPA_BACKENDS, fa4_available

    return [n for n, _ in SDPA_BACKENDS] + (["FlashAttention-4"] if fa4_available(device.capability) else [])


def _time_one(name, kind, src, stage, shape, fn, timer, warmup, iters, base=None) -> Row:
    row = base if base is not None else Row(name, kind, src, stage, shape.label, shape.seq)
    try:
        t = timer(fn, warmup=warmup, iters=iters)
        row.ms = t.median_ms
        row.runs_ms = list(t.runs_ms)
        row.tflops = shape.tflops(t.median_ms)
    except B200cError as e:
        row.error = str(e)
    except RuntimeError as e:  # e.g. an SDPA backend that does not support the shape/GPU
        row.error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return row


def add_percentages(rows: list) -> None:
    """Fill ``pct``: TFLOPS as a percentage of the reference baseline on the same shape."""
    ref = {r.shape: r.tflops for r in rows if r.kernel == REFERENCE and r.tflops}
    for r in rows:
        if r.tflops and r.shape in ref and ref[r.shape] and not math.isnan(r.tflops):
            r.pct = 100.0 * r.tflops / ref[r.shape]

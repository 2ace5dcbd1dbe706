"""The measurement loop: per shape, every baseline and every schedule, one row each."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from ..errors import B200cError
from .baselines import REFERENCE, baselines, fa4_available, fa4_name
from .timing import time_ms

DEFAULT = "b200c default"  # the row of schedule=None


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


class Inputs:
    """The tensors of one shape: logical (B, H, S, D) q and (B, H_kv, S_kv, D) k, v, BF16; for a varlen
    shape packed (total, H, D) tensors and the int32 ``cu_seqlens``."""

    def __init__(self, shape, device, seed: int = 0):
        import torch

        self.shape = shape
        g = torch.Generator(device=device).manual_seed(seed)

        def rnd(*size):
            return torch.randn(*size, generator=g, device=device, dtype=torch.bfloat16)

        if shape.varlen:
            total = sum(shape.lengths)
            self.q = rnd(total, shape.heads, shape.head_dim)
            self.k, self.v = rnd(total, shape.h_kv, shape.head_dim), rnd(total, shape.h_kv, shape.head_dim)
            cu = [0]
            for n in shape.lengths:
                cu.append(cu[-1] + n)
            self.cu = torch.tensor(cu, dtype=torch.int32, device=device)
        else:
            self.q = rnd(shape.batch, shape.heads, shape.seq, shape.head_dim)
            self.k = rnd(shape.batch, shape.h_kv, shape.s_kv, shape.head_dim)
            self.v = rnd(shape.batch, shape.h_kv, shape.s_kv, shape.head_dim)
            self.cu = None

    def b200c(self, schedule, target):
        """A callable running b200c on these inputs (``schedule``: a Schedule, or None: the built-in one)."""
        from ..runtime.api import attention, attention_varlen

        s = self.shape
        if s.varlen:
            n = max(s.lengths)
            return lambda: attention_varlen(self.q, self.k, self.v, self.cu, self.cu, n, n, schedule=schedule,
                                            causal=s.causal, target=target, check_seqlens=False)
        if s.window:
            return lambda: attention(self.q, self.k, self.v, schedule=schedule, causal=s.causal, target=target,
                                     window_size=(s.window, 0))
        return lambda: attention(self.q, self.k, self.v, schedule=schedule, causal=s.causal, target=target)

    def first_head(self, out):
        """(q, k, v, out) of sequence 0, head 0 as (1, 1, S, D) tensors (the correctness check)."""
        if self.shape.varlen:
            n = self.shape.lengths[0]
            pick = lambda t: t[:n, :1].transpose(0, 1)[None]  # noqa: E731
            return pick(self.q), pick(self.k), pick(self.v), pick(out)
        return self.q[:1, :1], self.k[:1, :1], self.v[:1, :1], out[:1, :1]


def make_inputs(shape, device, seed: int = 0):
    """The :class:`Inputs` of ``shape`` on ``device``."""
    return Inputs(shape, device, seed)


def check_head(out, inputs) -> tuple:
    """(max_err, tol) of FlashAttention's rule on sequence 0, head 0: the error of ``out`` against FP32
    attention (with the causal mask, bottom-right aligned, and its window) vs twice that of torch SDPA
    (BF16, the same explicit mask) + 1e-3."""
    import torch
    import torch.nn.functional as F

    qs, ks, vs, os_ = inputs.first_head(out)
    scale = qs.shape[-1] ** -0.5
    sq, skv = qs.shape[2], ks.shape[2]
    mask = None
    if inputs.shape.causal:
        r = torch.arange(sq, device=qs.device)[:, None]
        c = torch.arange(skv, device=qs.device)[None, :]
        mask = c <= r + (skv - sq)
        if inputs.shape.window:
            mask &= c >= r + (skv - sq) - inputs.shape.window
    sc = (qs.float() @ ks.float().transpose(-1, -2)) * scale
    if mask is not None:
        sc = sc.masked_fill(~mask, float("-inf"))
    p = torch.softmax(sc, dim=-1).nan_to_num(0.0)  # rows that see no key: 0
    ref = p @ vs.float()
    sd = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask).nan_to_num(0.0)
    tol = 2 * (sd.float() - ref).abs().max().item() + 1e-3
    err = (os_.float() - ref).abs().max().item()
    return err, tol


def measure(schedules, shapes, device, *, target: str = "auto", timer=time_ms, warmup: int = 5, iters: int = 30,
            check: bool = True, progress: bool = True, with_baselines: bool = True) -> list:
    """Measure every baseline and schedule on every shape.

    Args:
        schedules: ``(source path, Schedule)`` pairs; a Schedule of None is the built-in one of the
            target for each shape's head dim (``b200c.attention(schedule=None)``, row name ``b200c default``).
        shapes: :class:`~b200c.bench.shapes.Shape` s.
        device: the :class:`~b200c.bench.device.Device`.
        target: b200c target (``auto``: sm90a on Hopper, sm100a on a B200).
        timer: ``timer(fn, warmup=, iters=) -> Timing`` (mocked in CPU tests).
        check: run the correctness check of each b200c kernel before timing it.
        progress: a tqdm progress bar on stderr.

    Returns:
        list of :class:`Row`; failures are rows with ``error`` set.
    """
    bar = None
    if progress:
        from tqdm import tqdm

        n_base = len(baselines_names(device)) if with_baselines else 0
        bar = tqdm(total=len(shapes) * (n_base + len(schedules)), unit="kernel", desc="b200c bench", leave=False)
    rows = []
    for shape in shapes:
        inputs = make_inputs(shape, f"cuda:{device.index}")
        if with_baselines:
            fa4 = fa4_name(device.capability)
            if fa4 is not None and not fa4_available(device.capability):
                rows.append(Row(fa4, "baseline", "", None, shape.label, shape.seq, error=FA4_MISSING))
            for name, fn in baselines(inputs, device.capability):
                if bar is not None:
                    bar.set_postfix_str(f"{name} {shape.label}")
                rows.append(_time_one(name, "baseline", "", None, shape, fn, timer, warmup, iters))
                if bar is not None:
                    bar.update(1)
        for src, sched in schedules:
            name = DEFAULT if sched is None else sched.name
            if bar is not None:
                bar.set_postfix_str(f"{name} {shape.label}")
            fn = inputs.b200c(sched, target)
            row = Row(name, "b200c", str(src), None if sched is None else sched.blog_stage, shape.label, shape.seq)
            try:
                out = fn()  # builds (cached on disk) and loads on the first call
                if check:
                    row.max_err, row.tol = check_head(out, inputs)
                    row.correct = bool(row.max_err <= row.tol)
                row = _time_one(name, "b200c", str(src), row.stage, shape, fn, timer, warmup, iters, base=row)
            except B200cError as e:
                row.error = str(e)
            rows.append(row)
            if bar is not None:
                bar.update(1)
        del inputs
    if bar is not None:
        bar.close()
    add_percentages(rows)
    return rows


def baselines_names(device) -> list:
    """Names of the baselines on this device (without building inputs)."""
    from .baselines import SDPA_BACKENDS, fa4_available, fa4_name

    return [n for n, _ in SDPA_BACKENDS] + ([fa4_name(device.capability)] if fa4_available(device.capability) else [])


FA4_MISSING = "not installed (flash-attn-4: pip install flash-attn-4; never needed by b200c itself)"


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

"""The backward table of ``b200c bench --backward``: the time of the backward pass alone (dQ, dK, dV from
dO) of b200c's sm90a backward kernels next to cuDNN's and FlashAttention-2's backward (torch SDPA with the
backend forced) and FA4's (``flash_attn.cute``, where it imports), in one run.

Each baseline builds its autograd graph once (inputs that require grad, one forward) and is timed on
``torch.autograd.grad(out, (q, k, v), dO, retain_graph=True)``: the backward kernels alone. b200c is timed
on :func:`b200c.runtime.backward_launch.attention_backward` with its own forward's O and LSE (its three
kernels: preprocess, main, postprocess). TFLOPS = 2.5 x the forward's FLOPs over the backward's time (the
forward counts 4 H D per attending query-key pair, so causal is about half; FlashAttention's convention).
Before timing, b200c's dQ, dK, dV are compared with cuDNN's on the same inputs (max |difference| over the
largest |gradient|, at most :data:`MAX_REL_DIFF`); a varlen batch's, on its first sequence, with cuDNN's
dense backward of that sequence alone (a sequence's gradients do not depend on the others).

Shapes: the forward bench's syntax (:mod:`b200c.bench.shapes`); the named set ``backward`` is head dims
64, 128 and 256, dense and causal, at 2K, 8K and 16K (32K tokens per call, 16 heads), GQA 32/8 causal at
8K and the FA4 varlen batch (b200c: :func:`b200c.attention_varlen` with the LSE, then
:func:`b200c.runtime.backward_launch.attention_backward_varlen`). What b200c's backward does not cover is a
"not supported yet" cell with the reason under the table, not a failure.

Backward schedule files given to ``b200c bench --backward`` are timed beside the built-in schedule, one
column ``b200c:<schedule name>`` each (their head_dim set to each shape's), checked against cuDNN the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import B200cError
from .shapes import BACKWARD_SHAPES

MAX_REL_DIFF = 2e-2  # b200c's gradients against cuDNN's, relative to the largest |gradient| (both BF16)


@dataclass
class BackwardRow:
    """One kernel's backward on one shape: ``ms`` (median), ``tflops``, ``error`` ("" when it ran),
    ``unsupported`` (a kernel that does not take this input yet: not a failure), ``rel_diff`` (b200c: the
    gradients against cuDNN's)."""

    kernel: str
    shape: str
    ms: float | None = None
    tflops: float | None = None
    error: str = ""
    unsupported: bool = False
    rel_diff: float | None = None
    runs_ms: list = field(default_factory=list)
    check_error: str = ""  # the correctness check could not run (the row is timed, not checked)
    kernels: list = field(default_factory=list)  # --kernels: its GPU kernels (b200c.bench.kernel_times.KernelTime)
    kernels_error: str = ""  # --kernels: why its kernels could not be listed (the row stays timed)


def _grad_timer(out, inputs, dout):
    import torch

    def run():
        return torch.autograd.grad(out, inputs, dout, retain_graph=True)

    return run


def kernels(inputs, capability: tuple, dout, schedules=()) -> list:
    """``(name, make)`` of every backward on this device for output gradient ``dout`` (like ``inputs.q``):
    ``make()`` builds the graph and returns the callable to time (raising what the kernel refuses); every
    callable returns ``(dQ, dK, dV)``. ``schedules``: BackwardSchedules to time beside the built-in one,
    each a column ``b200c:<its name>`` (its head_dim set to the shape's, as b200c.attention_backward does)."""
    import torch

    from .baselines import fa4_available, fa4_name, first_output

    s = inputs.shape
    out = []
    if not s.varlen:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def sdpa(backend):
            def make():
                q, k, v = (t.detach().requires_grad_() for t in (inputs.q, inputs.k, inputs.v))
                kw = {"enable_gqa": True} if s.h_kv != s.heads else {}
                with sdpa_kernel(getattr(SDPBackend, backend)):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=s.causal, **kw)
                return _grad_timer(o, (q, k, v), dout)
            return make

        out += [("cuDNN", sdpa("CUDNN_ATTENTION")), ("FlashAttention-2", sdpa("FLASH_ATTENTION"))]
    name = fa4_name(capability)
    if name is not None and fa4_available(capability):
        def fa4():
            from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

            q, k, v = (t.detach().requires_grad_() for t in (inputs.q, inputs.k, inputs.v))
            if s.varlen:
                o = flash_attn_varlen_func(q, k, v, cu_seqlens_q=inputs.cu, cu_seqlens_k=inputs.cu, causal=s.causal)
                g = dout
            else:  # BSHD views of the BHSD tensors
                o = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=s.causal)
                g = dout.transpose(1, 2)
            o = first_output(o)
            return _grad_timer(o, (q, k, v), g)
        out.append((name, fa4))

    def ours(schedule=None):
        from ..runtime.api import attention
        from ..runtime.backward_launch import attention_backward

        if s.varlen:
            from ..runtime.api import attention_varlen
            from ..runtime.backward_launch import attention_backward_varlen

            n = max(s.lengths)
            cu = inputs.cu
            o, lse = attention_varlen(inputs.q, inputs.k, inputs.v, cu, cu, n, n, causal=s.causal, return_lse=True)
            return lambda: attention_backward_varlen(inputs.q, inputs.k, inputs.v, o, dout, lse, cu, cu, n, n,
                                                     causal=s.causal, schedule=schedule)
        o, lse = attention(inputs.q, inputs.k, inputs.v, causal=s.causal, return_lse=True)
        return lambda: attention_backward(inputs.q, inputs.k, inputs.v, o, dout, lse, causal=s.causal,
                                          schedule=schedule)
    out.append(("b200c", ours))
    for sched in schedules:
        out.append((f"b200c:{sched.name}", lambda sched=sched: ours(sched)))
    return out


def ours_column(name: str) -> bool:
    """Whether a column of the table is b200c's (the built-in schedule's, or ``b200c:<schedule name>``)."""
    return name == "b200c" or name.startswith("b200c:")


def _first_sequence_diff(inputs, grads, dout, backend: str = "CUDNN_ATTENTION") -> float:
    """A varlen batch's gradients of its first sequence against cuDNN's dense backward of that sequence alone
    (torch SDPA with ``backend`` forced, (1, H, n, D) views, GQA through ``enable_gqa``)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    s = inputs.shape
    n = s.lengths[0]
    q, k, v = (t[:n].transpose(0, 1)[None].contiguous().requires_grad_() for t in (inputs.q, inputs.k, inputs.v))
    kw = {"enable_gqa": True} if s.h_kv != s.heads else {}
    with sdpa_kernel(getattr(SDPBackend, backend)):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=s.causal, **kw)
    ref = torch.autograd.grad(o, (q, k, v), dout[:n].transpose(0, 1)[None].contiguous())
    return _rel_diff([g[:n].transpose(0, 1)[None] for g in grads], ref)


def _rel_diff(a, b) -> float:
    return max(float((x.float() - y.float()).abs().max()) / max(float(y.float().abs().max()), 1e-30)
               for x, y in zip(a, b))


def measure(shapes, device, *, timer, warmup: int = 5, iters: int = 30, make_inputs=None, kernels_of=kernels,
            check: bool = True, kernel_times=None, schedules=()) -> list:
    """One :class:`BackwardRow` per (shape, kernel) (``timer(fn, warmup=, iters=) -> Timing``;
    ``make_inputs`` and ``kernels_of`` are replaced in CPU tests). ``schedules``: BackwardSchedules timed
    beside the built-in one (:func:`kernels`), each checked as it is. ``kernel_times``: None, or
    ``kernel_times(fn) -> [KernelTime]`` (:func:`b200c.bench.kernel_times.kernel_times`), called once per
    timed row after its timing, its result in the row's ``kernels``."""
    from ..errors import BackwardNotSupportedError
    from .run import make_inputs as default_inputs

    make_inputs = make_inputs or default_inputs
    rows = []
    for shape in shapes:
        inputs = make_inputs(shape, f"cuda:{device.index}")
        dout = _dout(inputs)
        fns = {}
        for name, make in (kernels_of(inputs, device.capability, dout, schedules) if schedules else
                           kernels_of(inputs, device.capability, dout)):
            row = BackwardRow(name, shape.label)
            try:
                fns[name] = fn = make()
                if check and ours_column(name) and "cuDNN" in fns:
                    row.rel_diff = _rel_diff(fn(), fns["cuDNN"]())
                elif check and ours_column(name) and shape.varlen:
                    try:
                        row.rel_diff = _first_sequence_diff(inputs, fn(), dout)
                    except RuntimeError as e:  # no reference on this device: the row is timed, unchecked
                        row.check_error = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                t = timer(fn, warmup=warmup, iters=iters)
                row.ms, row.runs_ms = t.median_ms, list(t.runs_ms)
                row.tflops = 2.5 * shape.flops / (t.median_ms * 1e-3) / 1e12
                if kernel_times is not None:
                    try:
                        row.kernels = list(kernel_times(fn))
                    except (ValueError, RuntimeError) as e:  # uneven calls, a profiler failure: timed, not itemised
                        row.kernels_error = str(e)
            except BackwardNotSupportedError as e:
                row.unsupported, row.error = True, str(e)
            except (B200cError, RuntimeError, NotImplementedError, TypeError, ValueError) as e:
                row.error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            rows.append(row)
        del inputs, fns
    return rows


def _dout(inputs):
    """One output gradient per shape (seeded), shared by every kernel so their gradients compare."""
    import torch

    g = torch.Generator(device=inputs.q.device).manual_seed(1)
    return torch.randn(inputs.q.shape, generator=g, device=inputs.q.device, dtype=inputs.q.dtype)


def markdown(rows: list, meta: dict) -> str:
    """One line per shape, one column per kernel: TFLOPS (b200c: and % of cuDNN)."""
    shapes, names = [], []
    for r in rows:
        if r.shape not in shapes:
            shapes.append(r.shape)
        if r.kernel not in names:
            names.append(r.kernel)
    by = {(r.kernel, r.shape): r for r in rows}
    out = [f"Backward pass alone, measured by `b200c bench --backward` on {meta.get('device', '?')} "
           f"({meta.get('date', '')}): TFLOPS = 2.5 x the forward's FLOPs / median time over "
           f"{meta.get('iters', '?')} runs; (x%) = of cuDNN in the same run.", "",
           "| shape | " + " | ".join(names) + " |", "|" + "---|" * (1 + len(names))]
    notes = []
    for shape in shapes:
        cells = []
        ref = by.get(("cuDNN", shape))
        for n in names:
            r = by.get((n, shape))
            if r is None:
                cells.append("-")
            elif r.unsupported:
                cells.append("not supported yet")
                notes.append(f"- {n} {shape}: {r.error}")
            elif r.error:
                cells.append("failed")
                notes.append(f"- {n} {shape}: {r.error}")
            else:
                t = f"{r.tflops:.0f}"
                if ours_column(n) and ref is not None and ref.tflops:
                    t += f" ({100 * r.tflops / ref.tflops:.0f}%)"
                if r.rel_diff is not None and r.rel_diff > MAX_REL_DIFF:
                    t += " WRONG"
                if r.check_error:
                    t += " (unchecked)"
                    notes.append(f"- {n} {shape}: not checked: {r.check_error}")
                cells.append(t)
        out.append(f"| {shape} | " + " | ".join(cells) + " |")
    out += ["", "Notes:"] + notes if notes else []
    timed = [r for r in rows if r.kernels or r.kernels_error]
    if timed:
        from .kernel_times import describe

        out += ["", "GPU kernels of each call (torch.profiler, each call after an L2 flush; microseconds per call):", ""]
        out += [f"- {r.shape}, {r.kernel} ({r.ms * 1e3:,.1f} us timed): "
                + (describe(r.kernels) if r.kernels else f"not listed: {r.kernels_error}") for r in timed]
    return "\n".join(out) + "\n"


__all__ = ["BACKWARD_SHAPES", "BackwardRow", "MAX_REL_DIFF", "kernels", "measure", "markdown", "ours_column"]

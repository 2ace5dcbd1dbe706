#!/usr/bin/env python3
"""Host time per cached attention call: b200c next to torch SDPA, in one run.

    python scripts/host_overhead.py --target sm90a --schedule examples/hopper/h11_persistent.py   # Hopper GPU
    python scripts/host_overhead.py                 # target emulate (see below)
    python scripts/host_overhead.py --stub-driver   # CPU only: the Python-side path with the driver stubbed

On a Hopper GPU the host path is measured with a native sm90a kernel: the
emulated sm_100a kernel (target emulate) runs longer than a launch takes, so
the launch queue fills and those rows include waiting for the GPU (measured
on the H200: 2000 emulated calls spent 415 us each inside the launch).
Each b200c row's note gives its ratio to the SDPA row measured the same way
(eager, compiled, graph-replayed) in the same run; rows a target refuses
(sm90a: causal, LSE, GQA) are listed with the reason instead of a time.

Method (issue 11): a 1x1x128x128 bf16 problem, so the kernel is negligible
next to the host work; each row issues ``--calls`` (200) asynchronous calls
and divides the host time by the count; the median of ``--reps`` (5) such
runs is reported. On a GPU the rows are interleaved: each of the ``--reps``
rounds times every row once, in table order, so a slow moment of a shared
machine lands on all rows alike. The device is synchronised between runs,
never inside.
Rows: torch SDPA; ``b200c.attention`` with a Schedule object, with the
schedule file's path, with ``layout="bshd"`` and with causal + LSE + GQA
(two query heads on one K/V head); ``torch.ops.b200c.attention`` called
directly; ``b200c.scaled_dot_product_attention`` (the drop-in, its built-in
schedule); a ``torch.compile(fullgraph=True)`` function (and torch SDPA compiled
the same way); one call captured in a CUDA graph and replayed (SDPA the same way). Each b200c row is
checked against SDPA's output once before it is timed. The drop-in's other call kinds
(:func:`dropin_cases`), each next to torch SDPA's call of the same kind: causal, GQA, a boolean
key-padding mask, an additive mask, and ``b200c.attention_varlen`` of two sequences (against SDPA once
per sequence). Decoding calls (:func:`decode_cases`): the step
transformers makes (one query row, 8 query heads on 2 K/V heads, 256 cached keys, a boolean
``attn_mask`` of (B, 1, 1, S_kv)) through torch SDPA and through the drop-in, and
``b200c.attention_with_kvcache`` on the same cache (with its default one-synchronisation input check
and with ``check_inputs=False``, what a serving loop that guarantees its tables uses).

Where a compiled call's time goes: the row "torch.compile floor: a Python
custom op" is an op with b200c's schema, registered the same way, that only
allocates its output: the cost of any op written in Python in a compiled
graph (the dispatcher's call into Python). "launch alone" times the cached
launch every b200c row ends in (``Entry.call``: allocate the output, write
its pointer, ``cuLaunchKernel``), and "cuLaunchKernel alone" the driver call.
b200c's compiled row minus the floor is the op's own work per call.

Without a CUDA GPU it prints that it skipped and exits 0; ``--stub-driver``
then times the per-call Python path on CPU tensors with every driver call,
the kernel build and the device rule stubbed (b200c.runtime.fake_driver).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_SCHEDULE = ROOT / "examples" / "07_compute_pipeline.py"
_bench_lib = None  # the torch.library.Library of the floor op (_floor_op), kept alive


def per_call_us(fn, calls: int, reps: int, sync) -> float:
    """Median over ``reps`` of (host time of ``calls`` back-to-back calls) / ``calls``, in microseconds."""
    fn()
    sync()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter_ns()
        times.append((t1 - t0) / calls / 1e3)
    sync()
    return statistics.median(times)


def table(rows: list[tuple[str, float | None, str]]) -> str:
    w = max(len(r[0]) for r in rows)
    lines = [f"{'call':<{w}}  {'host us/call':>12}  note", f"{'-' * w}  {'-' * 12}  ----"]
    for name, us, note in rows:
        val = f"{us:12.1f}" if us is not None else f"{'-':>12}"
        lines.append(f"{name:<{w}}  {val}  {note}")
    return "\n".join(lines)


def dropin_cases(device, target):
    """``(name, fn, reference name or None)`` of the drop-in's call kinds on ``device``
    (issue 50 step 5), each after the torch SDPA call of the same kind: causal, GQA (two query heads on one
    K/V head, ``enable_gqa``), a boolean key-padding mask (B, 1, 1, S_kv), an additive float mask
    (B, 1, S_q, S_kv), and a varlen batch of two sequences (``b200c.attention_varlen``; its reference is
    torch SDPA on each sequence, one call each)."""
    import torch
    import torch.nn.functional as F

    import b200c

    g = torch.Generator(device="cpu").manual_seed(2)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device, torch.bfloat16)

    q, k, v = rand(1, 1, 128, 128), rand(1, 1, 128, 128), rand(1, 1, 128, 128)
    q2 = rand(1, 2, 128, 128)
    pad = torch.ones(1, 1, 1, 128, dtype=torch.bool, device=device)
    pad[..., 112:] = False
    add = (torch.randn(1, 1, 128, 128, generator=g) * 0.5).to(device, torch.bfloat16)
    qv, kv, vv = rand(128, 1, 128), rand(128, 1, 128), rand(128, 1, 128)
    cu = torch.tensor([0, 48, 128], dtype=torch.int32, device=device)

    def per_sequence():  # torch's nearest call: SDPA per sequence of the varlen batch
        return torch.cat([F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1)[None] for t in (qv, kv, vv)))[0]
                          .transpose(0, 1) for a, b in ((0, 48), (48, 128))])

    sd = b200c.scaled_dot_product_attention
    kinds = (
        ("causal", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda: sd(q, k, v, is_causal=True, target=target)),
        ("GQA 2/1", lambda: F.scaled_dot_product_attention(q2, k, v, enable_gqa=True),
         lambda: sd(q2, k, v, enable_gqa=True, target=target)),
        ("bool key-padding mask", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=pad),
         lambda: sd(q, k, v, attn_mask=pad, target=target)),
        ("additive mask", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=add),
         lambda: sd(q, k, v, attn_mask=add, target=target)),
    )
    out = []
    for kind, ref_fn, fn in kinds:
        ref_name = f"torch SDPA {kind}"
        out += [(ref_name, ref_fn, None), (f"b200c.scaled_dot_product_attention {kind}", fn, ref_name)]
    out += [("torch SDPA per sequence (varlen, 2 sequences)", per_sequence, None),
            ("b200c.attention_varlen (2 sequences)",
             lambda: b200c.attention_varlen(qv, kv, vv, cu, cu, 80, 80, target=target),
             "torch SDPA per sequence (varlen, 2 sequences)")]
    return out


def decode_cases(device, target):
    """``(name, fn, reference name or None, b200c output or None)`` of the decoding rows on ``device``."""
    import torch
    import torch.nn.functional as F

    import b200c

    g = torch.Generator(device="cpu").manual_seed(1)
    qd = torch.randn(1, 8, 1, 128, generator=g).to(device, torch.bfloat16)  # (B, H, S_q, D)
    kd, vd = (torch.randn(1, 2, 256, 128, generator=g).to(device, torch.bfloat16) for _ in range(2))
    mask = torch.ones(1, 1, 1, 256, dtype=torch.bool, device=device)
    q_bshd, k_cache, v_cache = qd.transpose(1, 2), kd.transpose(1, 2).contiguous(), vd.transpose(1, 2).contiguous()
    lens = torch.full((1,), 256, dtype=torch.int32, device=device)
    ref = "torch SDPA decode step (bool mask, GQA 8/2, 256 keys)"
    return [
        (ref, lambda: F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask, enable_gqa=True), None),
        ("b200c.scaled_dot_product_attention decode step (bool mask)",
         lambda: b200c.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask, enable_gqa=True, target=target), ref),
        ("b200c.attention_with_kvcache (256 cached keys)",
         lambda: b200c.attention_with_kvcache(q_bshd, k_cache, v_cache, cache_seqlens=lens, target=target), ref),
        ("b200c.attention_with_kvcache(check_inputs=False)",
         lambda: b200c.attention_with_kvcache(q_bshd, k_cache, v_cache, cache_seqlens=lens, target=target,
                                              check_inputs=False), ref),
    ]


def gpu_rows(args) -> list[tuple[str, float | None, str]]:
    import torch
    import torch.nn.functional as F

    import b200c

    sync = torch.cuda.synchronize
    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, 1, 128, 128, generator=g).to(dev, torch.bfloat16) for _ in range(3))
    path = str(args.schedule)
    sched = b200c.load_schedule_file(path)
    tgt = args.target
    ref = F.scaled_dot_product_attention(q, k, v)
    rows = []

    def check(name, out, ref=ref):
        sync()
        err = (out.float() - ref.float()).abs().max().item()
        if not err <= 2e-2:
            raise SystemExit(f"host_overhead: {name} differs from SDPA by {err:.3e} (> 2e-2): not timing a wrong result")
        return f"max|out - sdpa| = {err:.1e}"

    timed = []  # (index into rows, fn, ref): measured together at the end, interleaved

    def row(name, fn, note="", ref=None):
        """Add a row to time; ``ref``: the row its ratio is taken to (the SDPA measured the same way)."""
        fn()
        sync()
        timed.append((len(rows), fn, ref))
        rows.append((name, None, note))

    def refused(name, make):
        """Rows the target refuses (sm90a: causal, LSE, GQA; the drop-in's built-in sm100a schedule) are listed, not timed."""
        try:
            return make()
        except (b200c.ScheduleError, b200c.LaunchError, NotImplementedError, b200c.FallbackWarning) as e:
            rows.append((name, None, f"not on target {tgt}: {str(e).splitlines()[0][:90]}"))
            return None

    S = "torch SDPA"
    row(S, lambda: F.scaled_dot_product_attention(q, k, v), "reference")
    note = check("b200c Schedule", b200c.attention(q, k, v, schedule=sched, target=tgt))  # builds on first use
    row("b200c.attention(schedule=Schedule)", lambda: b200c.attention(q, k, v, schedule=sched, target=tgt), note, S)
    from b200c.dsl import load_with_dependencies

    n_files = len(load_with_dependencies(path)[1])
    note = check("b200c path", b200c.attention(q, k, v, schedule=path, target=tgt))
    row("b200c.attention(schedule=path)", lambda: b200c.attention(q, k, v, schedule=path, target=tgt),
        f"{note}; {n_files} files checked per call ({Path(path).name})", S)
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    note = check("b200c bshd", b200c.attention(qs, ks, vs, schedule=sched, target=tgt, layout="bshd").transpose(1, 2))
    row("b200c.attention(layout='bshd')",
        lambda: b200c.attention(qs, ks, vs, schedule=sched, target=tgt, layout="bshd"), note, S)
    q2 = torch.cat([q, q], dim=1)  # two query heads on k, v's one head
    ref_gqa = F.scaled_dot_product_attention(q2, k.expand(1, 2, 128, 128), v.expand(1, 2, 128, 128), is_causal=True)
    out = refused("b200c.attention(causal, return_lse, GQA)",
                  lambda: b200c.attention(q2, k, v, schedule=sched, target=tgt, causal=True, return_lse=True))
    if out is not None:
        note = check("b200c causal", out[0], ref_gqa)
        row("b200c.attention(causal, return_lse, GQA)",
            lambda: b200c.attention(q2, k, v, schedule=sched, target=tgt, causal=True, return_lse=True), note, S)
    js = sched.to_json()
    scale = 128 ** -0.5
    op = torch.ops.b200c.attention
    note = check("torch.ops", op(q, k, v, js, scale, tgt))
    row("torch.ops.b200c.attention", lambda: op(q, k, v, js, scale, tgt), note + "; through the dispatcher", S)
    out = refused("b200c.scaled_dot_product_attention", lambda: b200c.scaled_dot_product_attention(q, k, v, target=tgt))
    if out is not None:
        note = check("b200c sdpa", out)
        row("b200c.scaled_dot_product_attention", lambda: b200c.scaled_dot_product_attention(q, k, v, target=tgt),
            note + "; the drop-in, built-in schedule", S)

    def fn(q, k, v):
        return b200c.attention(q, k, v, schedule=sched, target=tgt)

    compiled, backend = None, None
    for backend in ("inductor", "aot_eager"):
        try:
            torch._dynamo.reset()
            compiled = torch.compile(fn, fullgraph=True, backend=backend)
            note = check("compiled", compiled(q, k, v))
            break
        except Exception as e:  # noqa: BLE001 - e.g. no triton for inductor: try the next backend
            print(f"torch.compile backend {backend}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            compiled = None
    if compiled is not None:
        b = "torch.compile(fullgraph=True): torch SDPA"
        compiled_sdpa = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), fullgraph=True,
                                      backend=backend)
        row(b, lambda: compiled_sdpa(q, k, v), f"reference for the rows below; backend {backend}")
        row("torch.compile(fullgraph=True)", lambda: compiled(q, k, v), f"{note}; backend {backend}", b)
        floor_op = _floor_op()
        floor = torch.compile(lambda q, k, v: floor_op(q, k, v, js, scale, tgt), fullgraph=True, backend=backend)
        row("torch.compile floor: a Python custom op", lambda: floor(q, k, v),
            "same schema and registration, only allocates the output: what any op written in Python pays", b)
    else:
        rows.append(("torch.compile(fullgraph=True)", None, "failed (see stderr)"))

    for name, call in (("CUDA graph replay: torch SDPA", lambda: F.scaled_dot_product_attention(q, k, v)),
                       ("CUDA graph replay: b200c", lambda: b200c.attention(q, k, v, schedule=sched, target=tgt))):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                call()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = call()
        graph.replay()
        note = check(name, out) if "b200c" in name else "reference"
        row(name, graph.replay, note, "CUDA graph replay: torch SDPA" if "b200c" in name else None)

    refs = {}
    for name, call, ref_name in dropin_cases(dev, tgt):
        if ref_name is None:
            refs[name] = call()
            row(name, call, "reference for the next row")
            continue
        with warnings.catch_warnings():  # a drop-in call that falls back to torch is listed, not timed
            warnings.simplefilter("error", b200c.FallbackWarning)
            out = refused(name, call)
        if out is not None:
            row(name, call, check(name, out, refs[ref_name]), ref_name)

    dec = decode_cases(dev, tgt)
    dec_ref = dec[0][1]()
    for name, call, ref_name in dec:
        if ref_name is None:
            row(name, call, "reference for the decoding rows")
            continue
        out = refused(name, call)
        if out is not None:
            got = out.transpose(1, 2) if "kvcache" in name else out
            row(name, call, check(name, got, dec_ref), ref_name)

    from b200c.runtime import launcher

    entry = launcher._entries[next(iter(launcher._entries))]
    row("launch alone: Entry.call (allocate out + cuLaunchKernel)", lambda: entry.call(q, None),
        "the cached launch that every b200c row above ends in", S)
    cu, stream = entry._cu, torch.cuda.current_stream().cuda_stream
    row("cuLaunchKernel alone (cuda-bindings)",
        lambda: cu.cuLaunchKernel(entry.lk.function, entry.grid, 1, 1, entry.block, 1, 1, entry.smem, stream,
                                  entry.params_addr, 0),
        "the driver call itself (the parameter block as the last call left it: same stream, same output size)", S)

    # every row timed in each of --reps rounds, rows interleaved within a round (a slow
    # moment of the machine hits every row alike); the median round per row is reported
    samples = {i: [] for i, _, _ in timed}
    for _ in range(args.reps):
        for i, fn, _ in timed:
            samples[i].append(per_call_us(fn, args.calls, 1, sync))
    by_name = {}
    for i, _, ref in timed:
        name, _, note = rows[i]
        us = statistics.median(samples[i])
        by_name[name] = us
        if ref is not None and ref in by_name:
            note = f"{us / by_name[ref]:.2f}x {ref}; {note}"
        rows[i] = (name, us, note)
    return rows


def _floor_op():
    """``torch.ops.b200c_bench.empty_like``: the schema of ``b200c::attention`` registered the same
    way (torch.library.Library, CompositeExplicitAutograd), returning ``torch.empty_like(q)``."""
    import torch

    global _bench_lib
    _bench_lib = torch.library.Library("b200c_bench", "DEF")
    _bench_lib.define("empty_like(Tensor q, Tensor k, Tensor v, str schedule_json, float softmax_scale, str target, "
                      "bool causal=False) -> Tensor")
    _bench_lib.impl("empty_like", lambda q, *rest, **kw: torch.empty_like(q), "CompositeExplicitAutograd")
    torch.library.register_fake("b200c_bench::empty_like", lambda q, *rest, **kw: torch.empty_like(q), lib=_bench_lib)
    return torch.ops.b200c_bench.empty_like.default


def stub_rows(args) -> list[tuple[str, float | None, str]]:
    import torch

    import b200c
    from b200c.runtime import fake_driver

    q, k, v = (torch.randn(1, 1, 128, 128).to(torch.bfloat16) for _ in range(3))
    path = str(args.schedule)
    sched = b200c.load_schedule_file(path)
    from b200c.dsl import load_with_dependencies

    n_files = len(load_with_dependencies(path)[1])
    rows = []
    nop = lambda: None  # noqa: E731
    with fake_driver.install(target=args.target) as fd:
        b200c.attention(q, k, v, schedule=sched, target=args.target)
        q2 = torch.cat([q, q], dim=1)
        b200c.attention(q2, k, v, schedule=sched, target=args.target, causal=True, return_lse=True)
        b200c.scaled_dot_product_attention(q, k, v, target=args.target)
        fd.record = False
        js = sched.to_json()
        qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
        cases = [
            ("floor: torch.empty_like(q)", lambda: torch.empty_like(q), "the output allocation alone"),
            ("b200c.attention(schedule=Schedule)", lambda: b200c.attention(q, k, v, schedule=sched, target=args.target), ""),
            ("b200c.attention(schedule=path)", lambda: b200c.attention(q, k, v, schedule=path, target=args.target),
             f"{n_files} files checked per call ({Path(path).name})"),
            ("b200c.attention(layout='bshd')",
             lambda: b200c.attention(qs, ks, vs, schedule=sched, target=args.target, layout="bshd"), ""),
            ("b200c.attention(causal, return_lse, GQA)",
             lambda: b200c.attention(q2, k, v, schedule=sched, target=args.target, causal=True, return_lse=True), ""),
            ("torch.ops.b200c.attention", lambda: torch.ops.b200c.attention(q, k, v, js, 0.1, args.target),
             "through the dispatcher"),
            ("b200c.scaled_dot_product_attention", lambda: b200c.scaled_dot_product_attention(q, k, v, target=args.target),
             "the drop-in, built-in schedule"),
        ]
        def fn(q, k, v):
            return b200c.attention(q, k, v, schedule=sched, target=args.target)

        compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
        compiled(q, k, v)
        cases.append(("torch.compile(fullgraph=True)", lambda: compiled(q, k, v), "backend aot_eager"))
        floor = torch.compile(lambda q: torch.empty_like(q), fullgraph=True, backend="aot_eager")
        floor(q)
        cases.append(("floor: torch.compile of torch.empty_like(q)", lambda: floor(q),
                      "backend aot_eager: the compiled call's own cost"))
        floor_op = _floor_op()
        floor2 = torch.compile(lambda q, k, v: floor_op(q, k, v, js, 0.1, args.target), fullgraph=True,
                               backend="aot_eager")
        floor2(q, k, v)
        cases.append(("floor: torch.compile of a Python custom op", lambda: floor2(q, k, v),
                      "backend aot_eager: b200c's schema and registration, only allocates the output"))
        assert fd.loads == 2, fd.loads  # the schedule's kernel and the drop-in's
        for name, fn, ref_name in dropin_cases("cpu", args.target):
            with warnings.catch_warnings():  # builds (stubbed) and caches the launch; b200c's rows never fall back
                warnings.simplefilter("error", b200c.FallbackWarning)
                fn()
            cases.append((name, fn, "drop-in call kinds" if ref_name else "torch's math path on the CPU"))
        for name, fn, ref_name in decode_cases("cpu", args.target):
            fn()  # builds (stubbed) and caches the launch
            cases.append((name, fn, "decoding" if ref_name else "decoding: torch's math path on the CPU"))
        loads = fd.loads
        for name, fn, note in cases:
            rows.append((name, per_call_us(fn, args.calls, args.reps, nop), note))
        assert fd.loads == loads, (loads, fd.loads)  # every timed call hit the caches
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200, help="asynchronous calls per timed run (default 200)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs; the median is reported (default 5)")
    ap.add_argument("--schedule", type=Path, default=DEFAULT_SCHEDULE, help="schedule file (default: example 07)")
    ap.add_argument("--target", default="emulate", help="b200c target (default emulate: the H200's)")
    ap.add_argument("--stub-driver", action="store_true",
                    help="without a GPU: time the Python-side path on CPU with the driver stubbed")
    args = ap.parse_args()

    import torch

    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {args.calls} calls x {args.reps} runs "
          f"(median), 1x1x128x128 bf16, schedule {args.schedule.name}, target {args.target}")
    if torch.cuda.is_available():
        from b200c.runtime import driver

        from b200c.runtime import api

        print(f"device: {torch.cuda.get_device_name()}, CUDA driver {driver.driver_version()}, "
              f"torch CUDA {torch.version.cuda}; direct eager path (no dispatcher): "
              f"{'on' if api.DIRECT_PATH else 'OFF (this torch lacks the internals it checks)'}")
        print(table(gpu_rows(args)))
        return 0
    print("host_overhead: skipped: no CUDA GPU (torch.cuda.is_available() is False)")
    if args.stub_driver:
        print("CPU only, driver calls stubbed (no kernel runs; not comparable to GPU numbers):")
        print(table(stub_rows(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

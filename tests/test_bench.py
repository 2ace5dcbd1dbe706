"""``b200c bench`` on a CPU machine: argument handling, the refusal without a
GPU, and every output format, with the device, the timing function and the
kernels replaced by stand-ins (the real timing runs on the GPU machine)."""
import csv
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from b200c.bench import report, run, trace
from b200c.bench.cli import run_bench, validate_args
from b200c.bench.device import Device
from b200c.bench.shapes import BLOG_SHAPES, Shape, parse_shapes
from b200c.bench.timing import Timing
from b200c.errors import ScheduleError
from conftest import HOPPER_EXAMPLES, ROOT


def _args(**kw):
    base = dict(files=[str(p) for p in HOPPER_EXAMPLES[-2:]], shapes="blog", target="auto", iters=3, warmup=1,
                no_baselines=False, no_check=False, csv=None, json=None, md=None, png=None, profile=None,
                profile_ctas=2, quiet=True)
    base.update(kw)
    return SimpleNamespace(**base)


def test_shapes():
    assert parse_shapes("blog") == BLOG_SHAPES
    assert [s.label for s in parse_shapes("1x16x32768, 2x8x1024x128")] == ["1x16x32768", "2x8x1024"]
    assert all(s.batch * s.seq == 32768 and s.heads == 16 and s.head_dim == 128 for s in BLOG_SHAPES)
    assert Shape(8, 16, 4096).tflops(1.0) == pytest.approx(4 * 8 * 16 * 4096 ** 2 * 128 / 1e-3 / 1e12)
    with pytest.raises(ScheduleError, match="BxH"):
        parse_shapes("8x16")
    gqa, cross, var = parse_shapes("2x32/8x8192c,8x16x1024:8192x64,varlen:100+300x16/4c")
    assert (gqa.heads, gqa.h_kv, gqa.causal, gqa.label) == (32, 8, True, "2x32/8x8192 causal")
    assert (cross.seq, cross.s_kv, cross.head_dim) == (1024, 8192, 64)
    assert var.lengths == (100, 300) and var.batch == 2 and var.seq == 300 and var.h_kv == 4
    # FLOPs count the attending (query, key) pairs: brute force for a causal S_q != S_kv and a varlen batch
    from b200c.bench.shapes import visible_pairs

    brute = sum(1 for r in range(100) for c in range(300) if c <= r + 200)
    assert visible_pairs(100, 300, True) == brute and visible_pairs(300, 100, True) == sum(
        1 for r in range(300) for c in range(100) if c <= r - 200)
    assert var.flops == 4 * 16 * 128 * (visible_pairs(100, 100, True) + visible_pairs(300, 300, True))
    with pytest.raises(ScheduleError, match="multiple of H_kv"):
        parse_shapes("1x6/4x128")
    assert len(parse_shapes("hopper")) == 23


def test_validate_args(tmp_path):
    schedules, shapes = validate_args(_args())
    assert [s.name for _, s in schedules] == ["hopper_block_n_176", "hopper_persistent"] and len(shapes) == 3
    with pytest.raises(ScheduleError, match="--iters"):
        validate_args(_args(iters=0))
    with pytest.raises(ScheduleError, match="does not exist"):
        validate_args(_args(csv=str(tmp_path / "nope" / "x.csv")))


def test_refuses_without_gpu_in_one_line():
    r = subprocess.run([sys.executable, "-m", "b200c.cli", "bench", str(HOPPER_EXAMPLES[0])], capture_output=True,
                       text=True, cwd=ROOT)
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("b200c: error: b200c bench needs a CUDA GPU"), r.stderr


class _FakeTorchRun:
    """Stand-ins for the GPU parts of run.measure: inputs, kernels, check."""

    def __init__(self, monkeypatch, fail=None):
        import b200c

        self.calls = []
        monkeypatch.setattr(run, "make_inputs", lambda shape, dev, seed=0: SimpleNamespace(
            shape=shape, q=shape, k=shape, v=shape, cu=None,
            b200c=lambda sched, target: lambda: attention(shape, shape, shape, schedule=sched, target=target)))
        monkeypatch.setattr(run, "baselines", lambda inputs, cap: [("cuDNN", lambda: None),
                                                                   ("FlashAttention-2", lambda: None),
                                                                   ("efficient", lambda: None)])
        monkeypatch.setattr(run, "check_head", lambda out, inputs: (0.002, 0.004))
        monkeypatch.setattr(run, "fa4_available", lambda cap: False)  # hermetic: the FA4 column "not installed"

        def attention(q, k, v, *, schedule, target):
            self.calls.append((schedule.name, target))
            if fail and schedule.name == fail:
                raise b200c.BuildError("nvcc failed (stand-in)")
            return None

        self.attention = attention


def _timer(fn, *, warmup, iters):
    return Timing(2.0, 1.9, tuple([2.0] * iters))


def test_outputs(monkeypatch, tmp_path):
    _FakeTorchRun(monkeypatch)
    md = tmp_path / "progression.md"
    md.write_text("# title\n\nintro\n\n<!-- b200c bench: begin -->\nold\n<!-- b200c bench: end -->\n\ntail\n")
    args = _args(csv=str(tmp_path / "b.csv"), json=str(tmp_path / "b.json"), md=str(md), png=str(tmp_path / "b.png"))
    dev = Device(0, "NVIDIA H200 (stand-in)", (9, 0), 132)
    assert run_bench(args, timer=_timer, device=dev) == 0
    rows = list(csv.DictReader(open(tmp_path / "b.csv")))
    assert len(rows) == 3 * (3 + 1 + 2)  # 3 SDPA backends, the FA4-sm90 column ("not installed"), 2 schedules
    assert {x["error"][:13] for x in rows if x["kernel"] == "FA4-sm90"} == {"not installed"}
    r = next(x for x in rows if x["kernel"] == "hopper_persistent" and x["seq"] == "4096")
    assert float(r["tflops"]) == pytest.approx(Shape(8, 16, 4096).tflops(2.0)) and float(r["pct"]) == 100.0
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["meta"]["device"].startswith("NVIDIA H200") and len(next(r for r in data["rows"] if r["kernel"] == "cuDNN")["runs_ms"]) == 3
    text = md.read_text()
    assert text.startswith("# title") and text.rstrip().endswith("tail") and "old" not in text
    assert "| 11 | hopper_persistent |" in text and "(100%)" in text and "torch SDPA cuDNN" in text
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_failed_kernel_is_reported_and_sets_the_status(monkeypatch, capsys):
    _FakeTorchRun(monkeypatch, fail="hopper_persistent")
    dev = Device(0, "stand-in", (9, 0), 132)
    assert run_bench(_args(shapes="8x16x4096"), timer=_timer, device=dev) == 1
    out = capsys.readouterr().out
    assert "| 11 | hopper_persistent | failed |" in out and "nvcc failed (stand-in)" in out


def test_trace_decode_and_outputs(tmp_path):
    events = (("wait K", "B"), ("wait K", "E"), ("softmax", "B"), ("softmax", "E"))
    tracks = ("producer (load warp)", "consumer 0")
    cap, ctas = 4, 1
    t0 = 1_700_000_000_000_000_000
    rec = [0] * (ctas * len(tracks) * cap)

    def put(track, n, ns, ev):
        rec[track * cap + n] = (((t0 + ns) << 8) | ev) & 0xFFFFFFFFFFFFFFFF

    put(1, 0, 0, 0)
    put(1, 1, 500, 1)
    put(1, 2, 600, 2)
    put(1, 3, 2600, 3)
    evs = trace.decode(rec, tracks, events, ctas, cap)
    sp = trace.spans(evs)
    assert [(s[2], s[3], s[4]) for s in sp] == [("wait K", 0.0, 0.5), ("softmax", 0.6, 2.6)]
    names = [e["args"]["name"] for e in evs if e["ph"] == "M"]
    assert names == ["CTA 0", "producer (load warp)", "consumer 0"]
    trace.write_trace(evs, tmp_path / "t.json", {"schedule": "x"})
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"][3]["ph"] == "B"
    trace.plot_timeline(evs, tmp_path / "t.png", "x")
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_markdown_orders_stages():
    rows = [run.Row("cuDNN", "baseline", "", None, "8x16x4096", 4096, 1.0, 600.0, 100.0),
            run.Row("b", "b200c", "b.py", 2, "8x16x4096", 4096, 1.0, 300.0, 50.0, True),
            run.Row("a", "b200c", "a.py", 1, "8x16x4096", 4096, 1.0, 200.0, 33.3, False)]
    text = report.markdown(rows, {"device": "d", "iters": 3})
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert lines[1].startswith("|  | torch SDPA cuDNN | 600") and "| 1 | a | 200 (33%) WRONG |" in lines[2]


def test_time_interleaved_runs_the_functions_in_rounds(monkeypatch):
    """Each round runs every function once in order, bracketed by its own events; each function's
    Timing is the median over the rounds of its own events (CUDA stand-ins: the events read a clock
    that each function advances by its own amount)."""
    import torch

    from b200c.bench import timing

    clock = [0.0]
    calls = []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = clock[0]

        def elapsed_time(self, end):
            return end.t - self.t

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(timing, "_flush_buffer", lambda device: torch.zeros(4))

    def fn(name, ms):
        def run():
            calls.append(name)
            clock[0] += ms + len(calls) * 1e-3  # drift: later runs are slower
        return run

    a, b = timing.time_interleaved([fn("a", 2.0), fn("b", 5.0)], warmup=1, iters=3, device=0)
    assert calls == ["a", "b"] * 4
    assert [round(x, 3) for x in a.runs_ms] == [2.003, 2.005, 2.007]
    assert [round(x, 3) for x in b.runs_ms] == [5.004, 5.006, 5.008]
    assert round(a.median_ms, 3) == 2.005 and round(b.min_ms, 3) == 5.004


def test_fa4_shape_set_and_window_shapes():
    from b200c.bench.shapes import FA4_SHAPES, visible_pairs

    fa4 = parse_shapes("fa4")
    assert fa4 == FA4_SHAPES and len(fa4) == 10
    labels = [s.label for s in fa4]
    assert labels[:5] == ["4x16x8192", "4x16x8192 causal", "2x32/8x8192 causal", "8x16x4096 D64 causal", "1x40x16384"]
    assert labels[6:] == ["4x16x4096:77", "1x40x32760:512", "16x16x1024 causal", "4x16x8192 causal window 1023"]
    var = fa4[5]
    assert var.causal and len(var.lengths) == 24 and min(var.lengths) == 256 and max(var.lengths) == 8192
    (w,) = parse_shapes("4x16x8192cw1023")
    assert w == fa4[9] and w.window == 1023
    with pytest.raises(ScheduleError, match="goes with the causal mask"):
        parse_shapes("4x16x8192w1023")
    # a window's visible pairs, brute force: row r sees keys r - 3 .. r (S_q == S_kv) and, S_q < S_kv,
    # r + 5 - 3 .. r + 5
    assert visible_pairs(10, 10, True, 3) == sum(1 for r in range(10) for c in range(10) if r - 3 <= c <= r)
    assert visible_pairs(10, 15, True, 3) == sum(1 for r in range(10) for c in range(15) if r + 2 <= c <= r + 5)
    assert w.flops == 4 * 16 * 4 * 128 * visible_pairs(8192, 8192, True, 1023)


class _Inputs:
    def __init__(self, shape):
        import torch

        self.shape = shape
        self.q = self.k = self.v = torch.zeros(1, 1, 1, 1)
        self.cu = torch.zeros(2, dtype=torch.int32)


def test_fa4_column_when_flash_attn_cute_imports(monkeypatch):
    import types

    from b200c.bench import baselines as bl

    calls = []
    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = lambda q, k, v, **kw: (calls.append(("dense", kw)), None)[1:]
    cute.flash_attn_varlen_func = lambda q, k, v, **kw: (calls.append(("varlen", kw)), None)[1:]
    pkg = types.ModuleType("flash_attn")
    pkg.cute = cute
    monkeypatch.setitem(sys.modules, "flash_attn", pkg)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    assert bl.fa4_available((9, 0)) and bl.fa4_name((9, 0)) == "FA4-sm90"
    assert not bl.fa4_available((8, 0))
    dense, var, win = parse_shapes("2x4/2x256c,varlen:100+300x16c,4x16x8192cw1023")
    names = [n for n, _ in bl.baselines(_Inputs(dense), (9, 0))]
    assert names == ["cuDNN", "FlashAttention-2", "efficient", "FA4-sm90"]
    assert [n for n, _ in bl.baselines(_Inputs(var), (9, 0))][-1] == "FA4-sm90"
    win_names = [n for n, _ in bl.baselines(_Inputs(win), (9, 0))]
    assert "cuDNN" not in win_names and win_names[-1] == "FA4-sm90"  # no SDPA backend takes a window
    dict(bl.baselines(_Inputs(win), (9, 0)))["FA4-sm90"]()
    dict(bl.baselines(_Inputs(var), (9, 0)))["FA4-sm90"]()
    assert calls[0] == ("dense", {"causal": True, "window_size": (1023, 0)})
    assert calls[1][0] == "varlen" and calls[1][1]["causal"] is True


def test_fa4_column_says_not_installed(monkeypatch):
    from b200c.bench import baselines as bl

    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import fails
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    assert not bl.fa4_available((9, 0))
    dev = Device(0, "NVIDIA H100", (9, 0), 132)
    shapes = parse_shapes("1x2x128")

    class FakeInputs(_Inputs):
        def b200c(self, schedule, target):
            return lambda: None

    monkeypatch.setattr(run, "make_inputs", lambda shape, device, seed=0: FakeInputs(shape))
    monkeypatch.setattr(run, "baselines", lambda inputs, cap: [])
    rows = run.measure([], shapes, dev, timer=lambda fn, warmup, iters: Timing(1.0, 1.0, (1.0,)), progress=False)
    (row,) = rows
    assert row.kernel == "FA4-sm90" and row.error.startswith("not installed")
    text = report.markdown(rows, {"device": "H100"})
    assert "| not installed |" in text and "Failures:" not in text and "FA4-sm90: not installed" in text


def test_decode_baselines_and_table(monkeypatch):
    import types

    import torch

    from b200c.bench import decode

    monkeypatch.setitem(sys.modules, "flash_attn", None)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    gqa, mha_causal, paged = decode.parse_cases("1x32/8:1024,4x32/32:512q4,2x32/8:512p16")
    z = torch.zeros(1, 1, 1, 1)
    names = lambda c, causal, cap=(9, 0), pg=None: [(n, fn is None) for n, fn in  # noqa: E731
                                                    decode.baselines(c, z, z, z, causal, cap, pg)]
    # GQA: cuDNN with enable_gqa and on expanded K/V; FA4-sm90 "not installed" here (None)
    assert names(gqa, False) == [("cuDNN", False), ("cuDNN expanded", False), ("FlashAttention-2", False),
                                 ("FA4-sm90", True)]
    assert names(mha_causal, True, (8, 0)) == [("FlashAttention-2", False)]  # causal: no cuDNN; no FA4 on 8.0
    calls = []
    cute = types.ModuleType("flash_attn.cute")
    cute.flash_attn_func = lambda q, k, v, **kw: calls.append(("dense", kw)) or (q,)
    cute.flash_attn_varlen_func = lambda q, k, v, **kw: calls.append(("paged", sorted(kw))) or (q,)
    pkg = types.ModuleType("flash_attn")
    pkg.cute = cute
    monkeypatch.setitem(sys.modules, "flash_attn", pkg)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    fa4 = dict(decode.baselines(paged, z, z, z, False, (9, 0), (z, z, z, z)))["FA4-sm90"]
    fa4()
    dict(decode.baselines(gqa, z, z, z, False, (9, 0)))["FA4-sm90"]()
    assert calls == [("paged", ["causal", "page_table", "seqused_k"]), ("dense", {"causal": False})]
    row = dict(case="1x32/8:1024", bytes=4e6, b200c_us=2.0, b200c_gbs=2000.0, copy_gbs=2500.0,
               baselines={"cuDNN": dict(us=1.6, gbs=2500.0), "FlashAttention-2": dict(us=2.2, gbs=1800.0)},
               not_run=["FA4-sm90", "cuDNN expanded (RuntimeError: no plan)"], max_err_vs_fa2=1e-3)
    decode.add_ratios(row)
    assert row["best"] == "cuDNN" and row["of_best"] == pytest.approx(0.8) and row["of_copy"] == pytest.approx(0.8)
    text = decode.markdown([row])
    assert "| cuDNN GB/s | cuDNN expanded GB/s | FlashAttention-2 GB/s | FA4-sm90 GB/s |" in text
    assert "| 2500 | - | 1800 | not installed |" in text and "80 % (cuDNN)" in text
    assert "- 1x32/8:1024: cuDNN expanded (RuntimeError: no plan) not run" in text


def test_backward_table(monkeypatch):
    import torch

    from b200c.bench import backward
    from b200c.errors import BackwardNotSupportedError

    shapes = parse_shapes("backward")
    assert len(shapes) == 20 and shapes[-1].varlen and shapes[-2].label == "2x32/8x8192 causal"
    assert {(s.head_dim, s.causal) for s in shapes[:18]} == {(d, c) for d in (64, 128, 256) for c in (False, True)}
    assert all(s.batch * s.seq == 32768 for s in shapes[:18])
    grads = (torch.ones(2), torch.ones(2), torch.ones(2))

    def kernels_of(inputs, cap, dout):
        assert dout.shape == inputs.q.shape
        d = inputs.shape.head_dim

        def ours():
            if d != 128:
                raise BackwardNotSupportedError(f"head dim {d} (only 128 yet)")
            return lambda: (grads[0] * 1.01, grads[1], grads[2])  # 1 % off cuDNN's: within MAX_REL_DIFF
        return [("cuDNN", lambda: lambda: grads), ("b200c", ours)]

    dev = Device(0, "NVIDIA H100", (9, 0), 132)
    picked = parse_shapes("16x16x2048x64,4x16x8192")
    fake_inputs = lambda shape, device, seed=0: SimpleNamespace(shape=shape, q=torch.zeros(1, 2, 3, 4))  # noqa: E731
    rows = backward.measure(picked, dev, timer=lambda fn, warmup, iters: Timing(2.0, 1.9, (2.0,)),
                            make_inputs=fake_inputs, kernels_of=kernels_of)
    by = {(r.kernel, r.shape): r for r in rows}
    assert by[("b200c", "16x16x2048 D64")].unsupported and "head dim 64" in by[("b200c", "16x16x2048 D64")].error
    ours = by[("b200c", "4x16x8192")]
    assert ours.rel_diff == pytest.approx(0.01) and ours.tflops == pytest.approx(2.5 * Shape(4, 16, 8192).flops / 2e-3 / 1e12)
    text = backward.markdown(rows, {"device": "H100", "iters": 3})
    assert "| 16x16x2048 D64 | " in text and "not supported yet" in text and "head dim 64 (only 128 yet)" in text
    assert "(100%)" in text and "WRONG" not in text
    if not torch.cuda.is_available():  # no GPU here: the one-line refusal
        r = subprocess.run([sys.executable, "-m", "b200c", "bench", "--backward"], capture_output=True, text=True,
                           cwd=ROOT)
        assert r.returncode == 2 and r.stderr.startswith("b200c: error: b200c bench needs a CUDA GPU"), r.stderr


def test_backward_varlen_check_compares_the_first_sequence():
    """The varlen row's check (no cuDNN varlen baseline): the first sequence's dQ, dK, dV against a dense
    backward of that sequence alone (here torch's math backend on the CPU). Gradients from a per-sequence
    autograd reference pass; one element off in sequence 0 is seen; a change in sequence 1 is not its business."""
    import torch
    import torch.nn.functional as F

    from b200c.bench import backward

    torch.manual_seed(0)
    shape = parse_shapes("varlen:48+80x4/2c")[0]
    total = 128
    q = torch.randn(total, 4, 64)
    k, v = torch.randn(total, 2, 64), torch.randn(total, 2, 64)
    dout = torch.randn(total, 4, 64)
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    for lo, hi in ((0, 48), (48, 128)):
        xs = [t[lo:hi].transpose(0, 1)[None].clone().requires_grad_() for t in (q, k, v)]
        o = F.scaled_dot_product_attention(*xs, is_causal=True, enable_gqa=True)
        for g, r in zip(grads, torch.autograd.grad(o, xs, dout[lo:hi].transpose(0, 1)[None])):
            g[lo:hi] = r[0].transpose(0, 1)
    inputs = SimpleNamespace(shape=shape, q=q, k=k, v=v)
    assert backward._first_sequence_diff(inputs, grads, dout, backend="MATH") < 1e-5
    off = [g.clone() for g in grads]
    off[1][5, 1, 7] += 0.5 * float(grads[1].abs().max())
    assert backward._first_sequence_diff(inputs, off, dout, backend="MATH") == pytest.approx(0.5, rel=1e-3)
    off = [g.clone() for g in grads]
    off[0][100] += 1.0  # sequence 1
    assert backward._first_sequence_diff(inputs, off, dout, backend="MATH") < 1e-5


def test_kernel_times_summarize_drops_each_calls_flush_by_position():
    """Per-kernel times of a call (b200c bench --backward --kernels): the flush's kernels before each call are
    left out by position, so a call's own kernel of the same name (a fill) is kept; names lose their
    template and parameter lists; a kernel launched twice per call counts twice."""
    from b200c.bench.kernel_times import describe, short_name, summarize

    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>(int, T1, T2)"
    events = []
    for i in range(3):
        events += [(fill, 40.0), ("b200c_bwd_pre", 100.0 + i), (fill, 2.0), ("b200c_bwd_main(float*)", 900.0),
                   ("b200c_bwd_main(float*)", 300.0), ("b200c_bwd_post", 120.0)]
    ks = summarize(events, calls=3, lead=1)
    assert [k.name for k in ks] == ["b200c_bwd_pre", "at::native::vectorized_elementwise_kernel", "b200c_bwd_main",
                                    "b200c_bwd_post"]
    assert ks[0].us == pytest.approx(101.0) and ks[0].per_call == 1
    assert ks[1].us == pytest.approx(2.0)  # the call's own fill, not the flush's 40 us
    assert ks[2].per_call == 2 and ks[2].us_per_call == pytest.approx(1200.0)
    assert describe(ks).endswith("sum 1,423.0 us") and "b200c_bwd_main 1,200.0 us (x2)" in describe(ks)
    assert short_name("void f<int>(float*)") == "f"
    with pytest.raises(ValueError, match="did not launch the same kernels"):
        summarize(events[:-1], calls=3, lead=1)
    with pytest.raises(ValueError, match="calls must be >= 1"):
        summarize(events, calls=0)


def test_backward_table_lists_each_calls_kernels():
    import torch

    from b200c.bench import backward
    from b200c.bench.kernel_times import KernelTime

    grads = (torch.ones(2), torch.ones(2), torch.ones(2))
    seen = []

    def per_kernel(fn):
        seen.append(fn)
        return [KernelTime("pre", 1, 95.0), KernelTime("main", 1, 1500.0)]

    def kernels_of(inputs, cap, dout):
        return [("cuDNN", lambda: lambda: grads), ("b200c", lambda: lambda: grads)]

    dev = Device(0, "NVIDIA H100", (9, 0), 132)
    fake_inputs = lambda shape, device, seed=0: SimpleNamespace(shape=shape, q=torch.zeros(1, 2, 3, 4))  # noqa: E731
    rows = backward.measure(parse_shapes("4x16x8192"), dev, timer=lambda fn, warmup, iters: Timing(2.0, 1.9, (2.0,)),
                            make_inputs=fake_inputs, kernels_of=kernels_of, kernel_times=per_kernel)
    assert len(seen) == 2 and all(r.kernels for r in rows)
    text = backward.markdown(rows, {"device": "H100", "iters": 3})
    assert "- 4x16x8192, b200c (2,000.0 us timed): pre 95.0 us; main 1,500.0 us; sum 1,595.0 us" in text
    plain = backward.measure(parse_shapes("4x16x8192"), dev, timer=lambda fn, warmup, iters: Timing(2.0, 1.9, (2.0,)),
                             make_inputs=fake_inputs, kernels_of=kernels_of)
    assert "GPU kernels of each call" not in backward.markdown(plain, {"device": "H100", "iters": 3})

    def uneven(fn):
        raise ValueError("7 kernels over 3 calls")
    rows = backward.measure(parse_shapes("4x16x8192"), dev, timer=lambda fn, warmup, iters: Timing(2.0, 1.9, (2.0,)),
                            make_inputs=fake_inputs, kernels_of=kernels_of, kernel_times=uneven)
    assert all(r.tflops and not r.error for r in rows)  # still timed: only the listing is missing
    assert "- 4x16x8192, b200c (2,000.0 us timed): not listed: 7 kernels over 3 calls" in backward.markdown(rows, {})


def test_bench_kernels_needs_backward():
    r = subprocess.run([sys.executable, "-m", "b200c", "bench", "default", "--kernels"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 2 and "--kernels lists the GPU kernels of the backward table" in r.stderr, r.stderr


@pytest.mark.parametrize("argv,msg", [
    (["--backward", "--decode", "default"], "--decode and --backward are two tables"),
    (["--backward", "--csv", "b.csv"], "b200c bench --backward does not use --csv: it takes --shapes"),
    (["--backward", "--png", "b.png", "--no-baselines"], "does not use --png, --no-baselines"),
    (["--backward", "--target", "sm100a"], "does not use --target sm100a"),
    (["--decode", "default", "--shapes", "4x16x8192"], "b200c bench --decode does not use --shapes: it takes --iters"),
])
def test_decode_and_backward_tables_refuse_options_they_would_drop(argv, msg):
    """From a new-user trial: with --backward, --csv / --png / --profile / --no-baselines / --target sm100a were
    accepted and never used, and --backward --decode silently ran the decode table only."""
    r = subprocess.run([sys.executable, "-m", "b200c", "bench", *argv], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_backward_md_keeps_the_text_around_the_markers(monkeypatch, tmp_path):
    """From a new-user trial: --md with --backward overwrote the whole file; it now replaces only what lies
    between the '<!-- b200c bench -->' markers, as the forward table does."""
    from b200c.bench import backward, report

    monkeypatch.setattr(backward, "measure", lambda *a, **k: [backward.BackwardRow("b200c", "4x16x8192", ms=2.0,
                                                                                     tflops=500.0)])
    md = tmp_path / "doc.md"
    md.write_text(f"# notes\n\nbefore\n{report.MD_BEGIN}\nold table\n{report.MD_END}\nafter\n")
    dev = Device(0, "NVIDIA H100", (9, 0), 132)
    assert run_bench(_args(files=[], backward=True, shapes=None, md=str(md)), timer=_timer, device=dev) == 0
    text = md.read_text()
    assert text.startswith("# notes\n\nbefore\n") and text.endswith(f"{report.MD_END}\nafter\n")
    assert "old table" not in text and "| 4x16x8192 | 500 |" in text


def test_backward_table_takes_sm90a_under_any_spelling():
    """A reviewer found --backward --target sm_90a refused as an unused option (sm_90a names sm90a)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("with a GPU this would run the backward bench; the refusal is checked without one")
    r = subprocess.run([sys.executable, "-m", "b200c", "bench", "--backward", "--target", "sm_90a"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "does not use" not in r.stderr and "needs a CUDA GPU" in r.stderr, r.stderr


def test_kernel_times_keep_two_kernels_of_one_short_name_apart():
    from b200c.bench.kernel_times import summarize

    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T1, T2)"
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, T1, T2)"
    ks = summarize([(fill, 3.0), (add, 5.0)] * 2, calls=2)
    assert [(k.per_call, k.us) for k in ks] == [(1, 3.0), (1, 5.0)]
    assert ks[0].name.startswith("at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor")


def test_backward_table_times_backward_schedule_files(monkeypatch, tmp_path):
    """A new-user trial: `b200c bench --backward my_bwd.py` was refused ('give no schedule files'), so a backward
    schedule of one's own could not be timed next to the built-in one and cuDNN. Each file is now a column
    b200c:<name>, checked against cuDNN like the built-in one; a forward schedule file and two files of one
    name are refused."""
    import torch

    from b200c.bench import backward

    seen = {}
    real_measure = backward.measure

    def measure(shapes, dev, **kw):
        seen.update(kw)
        grads = (torch.ones(2), torch.ones(2), torch.ones(2))

        def kernels_of(inputs, cap, dout, schedules=()):
            out = [("cuDNN", lambda: lambda: grads), ("b200c", lambda: lambda: grads)]
            return out + [(f"b200c:{s.name}", lambda: lambda: (grads[0] * 1.5, grads[1], grads[2])) for s in schedules]
        fake_inputs = lambda shape, device, seed=0: SimpleNamespace(shape=shape, q=torch.zeros(1, 2, 3, 4))  # noqa: E731
        return real_measure(shapes, dev, timer=kw["timer"], make_inputs=fake_inputs, kernels_of=kernels_of,
                            schedules=kw["schedules"])

    monkeypatch.setattr(backward, "measure", measure)
    mine = tmp_path / "my_bwd.py"
    mine.write_text("import b200c\nschedule = b200c.default_backward_schedule(128).replace(name='mine', "
                    "dq_reduction='deterministic')\n")
    dev = Device(0, "NVIDIA H100", (9, 0), 132)
    out = tmp_path / "t.md"
    rc = run_bench(_args(files=[str(mine)], backward=True, shapes="4x16x8192", md=str(out)), timer=_timer, device=dev)
    assert [s.name for s in seen["schedules"]] == ["mine"] and seen["schedules"][0].dq_reduction == "deterministic"
    text = out.read_text()
    assert "| shape | cuDNN | b200c | b200c:mine |" in text and "WRONG" in text  # its dQ is 50 % off: flagged
    assert rc == 1  # a wrong b200c column fails the command
    fwd = str(ROOT / "examples" / "07_compute_pipeline.py")
    with pytest.raises(ScheduleError, match="--backward takes backward schedule files .* defines a Schedule"):
        run_bench(_args(files=[fwd], backward=True, shapes="4x16x8192"), timer=_timer, device=dev)
    with pytest.raises(ScheduleError, match="names are the table's columns and must differ"):
        run_bench(_args(files=[str(mine), str(mine)], backward=True, shapes="4x16x8192"), timer=_timer, device=dev)

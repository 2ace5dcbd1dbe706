"""Programmable attention on the GPU, timed side by side in one run: b200c (score_mod / mask_mod /
window_size compiled into the kernel of the device's built-in schedule) against FlexAttention
(torch.compile'd ``flex_attention`` with the same functions and a ``create_block_mask`` block mask)
and, where it has the feature, cuDNN through torch SDPA (dense, causal). CUDA events, L2 flushed,
median of the timed runs, the kernels of a row timed in the same rounds (b200c.bench.timing.time_interleaved:
the GPU's clock drifts over a run). TFLOPS count the score entries that take part
(4 * D flops each: QK and PV), so masked rows compare the work that has to be done. Each b200c
output is checked against FlexAttention's (max |difference| printed).

Two columns measure b200c against itself: "vs dense" is the time of b200c's dense kernel on the same
K/V tiles (the schedule the row's call picks), timed in the same rounds, over the row's time; "per tile" is the row's time per K/V tile it
computes (tiles the block mask does not skip, counted from the kernel's work decomposition) over the
dense kernel's time per tile: 1.00 is time proportional to the tiles computed.

    python scripts/bench_mods.py [--shape 4x16x8192x128] [--iters 20] [--md table.md]
"""
import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rows(torch, B, H, S, dev):
    """(name, b200c kwargs, flex score_mod, flex mask_mod, cudnn?) per row."""
    import b200c.mods as mods

    docs = (torch.arange(S, device=dev) * 8 // S).int()
    lengths = torch.tensor([S - (3 * S // 4) * i // max(B - 1, 1) for i in range(B)], device=dev).int()  # S..S/4
    slopes = mods.alibi_slopes(H).to(dev)

    def causal(b, h, q, kv):
        return q >= kv

    def window(b, h, q, kv):
        return (q >= kv) & (q - kv <= 1024)

    from b200c.dsl.presets import default_schedule

    mods_preset = default_schedule(128, "hopper", mods=True)  # what calls with mask_mods run (128-row K/V tiles)
    return [
        ("dense", {}, None, None, "dense"),
        ("dense, the mods preset's tiles (no mod)", dict(schedule=mods_preset), None, None, None),
        ("causal", dict(causal=True), None, causal, "causal"),
        ("sliding window 1024 (causal)", dict(window_size=(1024, 0)), None, window, None),
        ("softcap 30", dict(score_mod=mods.softcap(30.0)), mods.softcap(30.0), None, None),
        ("ALiBi", dict(score_mod=mods.alibi(slopes)), mods.alibi(slopes), None, None),
        ("document mask (8 documents)", dict(mask_mod=mods.document(docs)), None, mods.document(docs), None),
        (f"key padding (lengths {', '.join(str(int(x)) for x in lengths)})",
         dict(mask_mod=mods.key_padding(lengths)), None, mods.key_padding(lengths), None),
    ]


def visible_entries(torch, mask_mod, B, H, S, dev) -> int:
    if mask_mod is None:
        return B * H * S * S
    total = 0
    q = torch.arange(S, device=dev)[:, None]
    kv = torch.arange(S, device=dev)[None, :]
    for b in range(B):
        m = mask_mod(torch.tensor(b, device=dev), torch.tensor(0, device=dev), q, kv)
        total += int(m.expand(S, S).sum()) * H
    return total


def row_schedule(q, kw):
    """The schedule a row's b200c call runs (its own, or the built-in one its mods pick: the call's traced
    mods with small_indices, as the runtime compiles them for these sizes)."""
    import msgspec

    from b200c.codegen.mods import light
    from b200c.dsl.mods import trace_mods
    from b200c.runtime.api import default_schedule_for

    if "schedule" in kw:
        return kw["schedule"]
    if not any(x in kw for x in ("score_mod", "mask_mod", "window_size")):
        return default_schedule_for(q)
    if "window_size" in kw:
        return default_schedule_for(q, mods=True)
    ms, _ = trace_mods(score_mod=kw.get("score_mod"), mask_mod=kw.get("mask_mod"))
    return default_schedule_for(q, mods=not light(msgspec.structs.replace(ms, small_indices=True)))


def tiles_computed(torch, schedule, mask_mod, B, H, S, dev) -> int:
    """K/V tiles the kernel computes over all work items: every tile (no mask), or those the block mask
    keeps (b200c.runtime.block_mask.kv_ranges on the schedule's work decomposition)."""
    from b200c.codegen.work import WorkDecomposition
    from b200c.runtime.block_mask import kv_ranges

    work = WorkDecomposition(schedule.block_m, schedule.block_n, schedule.q_stages)
    if mask_mod is None:
        return work.num_work(B, H, S) * -(-S // schedule.block_n)
    r = kv_ranges(mask_mod, work, batch=B, heads=H, heads_kv=H, seq_q=S, seq_kv=S, device=dev)
    return int((r[:, 3] - r[:, 0]).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4x16x8192x128", help="BxHxSxD (default 4x16x8192x128, the issue's shape)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--md", help="also write the table here (markdown)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():  # one line, no traceback (as scripts/host_overhead.py)
        print("bench_mods: needs a CUDA GPU (torch.cuda.is_available() is False); run it on the GPU machine")
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    import b200c
    from b200c.bench.timing import time_interleaved

    B, H, S, D = (int(x) for x in args.shape.split("x"))
    dev = "cuda"
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    flex = torch.compile(flex_attention)
    name = torch.cuda.get_device_name()
    lines = [f"b200c vs FlexAttention (torch {torch.__version__}, torch.compile'd) and cuDNN, {name}, "
             f"B={B} H={H} S={S} D={D}, median of {args.iters} runs (CUDA events, L2 flushed); TFLOPS over the score "
             "entries that take part", "",
             "| row | b200c TFLOPS | FlexAttention TFLOPS | b200c / Flex | cuDNN TFLOPS | b200c / cuDNN | vs dense | "
             "per tile | max abs diff vs Flex |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    with torch.no_grad():
        # the GPU's clock settles under load within a few seconds (the first timing of a cold H200 ran ~10 %
        # faster than the same kernel a second later): warm it up before the first row
        t_end = time.perf_counter() + 5.0
        while time.perf_counter() < t_end:
            for _ in range(10):
                b200c.attention(q, k, v)
            torch.cuda.synchronize()
        for row, kw, score_mod, mask_mod, cudnn in rows(torch, B, H, S, dev):
            work = 4 * D * visible_entries(torch, mask_mod, B, H, S, dev)

            def ours(kw=kw):
                return b200c.attention(q, k, v, **kw)

            bm = None
            if mask_mod is not None:
                uses_b = "padding" in row
                bm = create_block_mask(mask_mod, B if uses_b else None, None, S, S, device=dev)

            def theirs(score_mod=score_mod, bm=bm):
                return flex(q, k, v, score_mod=score_mod, block_mask=bm)

            o1, o2 = ours(), theirs()
            diff = float((o1.float() - o2.float()).abs().max())
            sched = row_schedule(q, kw)
            tiles, dense_tiles = (tiles_computed(torch, sched, m, B, H, S, dev) for m in (mask_mod, None))

            def dense(sched=sched):
                return b200c.attention(q, k, v, schedule=sched)

            def cud(causal=cudnn == "causal"):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            fns = [dense, ours, theirs] + ([cud] if cudnn else [])
            times = [x.median_ms for x in time_interleaved(fns, iters=args.iters)]
            t0, t1, t2 = times[:3]
            tf1, tf2 = work / t1 / 1e9, work / t2 / 1e9
            c_tf = c_ratio = "-"
            if cudnn:
                c_tf, c_ratio = f"{work / times[3] / 1e9:.0f}", f"{times[3] / t1:.2f}"
            per_tile = (t1 / tiles) / (t0 / dense_tiles)
            line = (f"| {row} | {tf1:.0f} | {tf2:.0f} | {t2 / t1:.2f} | {c_tf} | {c_ratio} | {t0 / t1:.2f} | "
                    f"{per_tile:.2f} | {diff:.2e} |")
            lines.append(line)
            print(line, flush=True)
    if args.md:
        Path(args.md).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Programmable attention on the GPU, timed side by side in one run: b200c (score_mod / mask_mod /
window_size compiled into the kernel of the device's built-in schedule) against FlexAttention
(torch.compile'd ``flex_attention`` with the same functions and a ``create_block_mask`` block mask)
and, where it has the feature, cuDNN through torch SDPA (dense, causal). CUDA events, L2 flushed,
median of the timed runs (b200c.bench.timing). TFLOPS count the score entries that take part
(4 * D flops each: QK and PV), so masked rows compare the work that has to be done. Each b200c
output is checked against FlexAttention's (max |difference| printed).

    python scripts/bench_mods.py [--shape 4x16x8192x128] [--iters 20] [--md table.md]
"""
import argparse
import sys
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

    mods_preset = default_schedule(128, "hopper", mods=True)  # what calls with mods run (128-row K/V tiles)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4x16x8192x128", help="BxHxSxD (default 4x16x8192x128, the issue's shape)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--md", help="also write the table here (markdown)")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    import b200c
    from b200c.bench.timing import time_ms

    B, H, S, D = (int(x) for x in args.shape.split("x"))
    dev = "cuda"
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    flex = torch.compile(flex_attention)
    name = torch.cuda.get_device_name()
    lines = [f"b200c vs FlexAttention (torch {torch.__version__}, torch.compile'd) and cuDNN, {name}, "
             f"B={B} H={H} S={S} D={D}, median of {args.iters} runs (CUDA events, L2 flushed); TFLOPS over the score "
             "entries that take part", "",
             "| row | b200c TFLOPS | FlexAttention TFLOPS | b200c / Flex | cuDNN TFLOPS | b200c / cuDNN | max abs diff vs Flex |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    with torch.no_grad():
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
            t1 = time_ms(ours, iters=args.iters).median_ms
            t2 = time_ms(theirs, iters=args.iters).median_ms
            tf1, tf2 = work / t1 / 1e9, work / t2 / 1e9
            c_tf = c_ratio = "-"
            if cudnn:
                def cud(causal=cudnn == "causal"):
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                t3 = time_ms(cud, iters=args.iters).median_ms
                c_tf, c_ratio = f"{work / t3 / 1e9:.0f}", f"{t3 / t1:.2f}"
            line = f"| {row} | {tf1:.0f} | {tf2:.0f} | {t2 / t1:.2f} | {c_tf} | {c_ratio} | {diff:.2e} |"
            lines.append(line)
            print(line, flush=True)
    if args.md:
        Path(args.md).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

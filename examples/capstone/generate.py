"""The capstone's generation run: a Llama-3-8B-like decoder from transformers (32 query heads and 8 K/V
heads of 128, hidden 4096, random BF16 weights, a few layers) generating tokens with its KV cache through
``generate()`` (greedy), once with torch's SDPA and once with every attention call through b200c's SDPA
drop-in (``F.scaled_dot_product_attention = b200c.scaled_dot_product_attention``). Prints the attention
calls b200c served (and any fallback with its reason), tokens per second of both (the whole ``generate()``
call, prefill included, and the decoding steps alone: the time of N + 1 tokens minus that of 1, over N)
and how many greedy tokens agree with torch's.

    pip install -e ".[capstone]" && python examples/capstone/generate.py --batch 1 --prompt 32768 --new 64
    python examples/capstone/generate.py --batch 32 --prompt 4096 --new 64
"""
from __future__ import annotations

import argparse
import sys
import time


def build(layers: int, device: str, tiny: bool = False):
    """The model (random BF16 weights) and its config; ``tiny``: a few-parameter config (CPU tests)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if tiny:
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, num_hidden_layers=layers, vocab_size=100, max_position_embeddings=4096)
    else:
        cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                          head_dim=128, num_hidden_layers=layers, vocab_size=32000, max_position_embeddings=131072,
                          rope_theta=500000.0)
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    return model.to(dtype=torch.bfloat16).eval(), cfg


def run(model, ids, new: int, through_b200c: bool):
    """``(tokens, seconds)`` of one greedy ``generate()`` of ``new`` tokens."""
    import torch
    import torch.nn.functional as F

    import b200c

    original = F.scaled_dot_product_attention
    if through_b200c:
        F.scaled_dot_product_attention = b200c.scaled_dot_product_attention
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                                 pad_token_id=0)
        torch.cuda.synchronize()
        return out[:, ids.shape[1]:], time.perf_counter() - t0
    finally:
        F.scaled_dot_product_attention = original


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32768)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--runs", type=int, default=2, help="timed rounds (median), after one warm-up round")
    a = ap.parse_args(argv)
    from harness import missing

    why = missing("transformers")
    if why:
        print(f"generate.py: {why}", file=sys.stderr)
        return 2
    import statistics

    import torch

    from b200c.runtime import sdpa

    model, cfg = build(a.layers, "cuda")
    ids = torch.randint(1, cfg.vocab_size, (a.batch, a.prompt), generator=torch.Generator().manual_seed(1)).cuda()
    run(model, ids, 2, True)  # warm-up: builds and loads the kernels
    run(model, ids, 2, False)
    sdpa.calls.clear()
    tok_b, _ = run(model, ids, a.new, True)
    counted = dict(sdpa.calls)
    tok_t, _ = run(model, ids, a.new, False)
    times = {True: {1: [], a.new + 1: []}, False: {1: [], a.new + 1: []}}
    for r in range(a.runs):
        for which in ((True, False) if r % 2 == 0 else (False, True)):
            for n in (1, a.new + 1):
                times[which][n].append(run(model, ids, n, which)[1])
    med = {w: {n: statistics.median(v) for n, v in d.items()} for w, d in times.items()}
    served = counted.pop("b200c", 0)
    fallen = sum(counted.values())
    agree = float((tok_b == tok_t).float().mean())
    first = int((tok_b != tok_t).any(0).nonzero()[0]) if agree < 1 else a.new
    print(f"decoder 32/8 x 128, {a.layers} layers, batch {a.batch}, prompt {a.prompt}, {a.new} new tokens")
    print(f"  {served} of {served + fallen} attention calls on b200c"
          + (f"; fallbacks: {', '.join(f'{k} x{v}' for k, v in counted.items())}" if counted else ""))
    print(f"  greedy tokens equal to torch's: {100 * agree:.1f} % (first difference at step {first})")
    for label, n in (("generate()", a.new + 1), ("decoding steps", None)):
        if n is None:
            tb = (med[True][a.new + 1] - med[True][1]) / a.new
            tt = (med[False][a.new + 1] - med[False][1]) / a.new
            tps_b, tps_t = a.batch / tb, a.batch / tt
        else:
            tps_b, tps_t = a.batch * n / med[True][n], a.batch * n / med[False][n]
        print(f"  {label}: torch SDPA {tps_t:.1f} tokens/s, b200c {tps_b:.1f} tokens/s ({tps_b / tps_t:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The capstone's second model: a causal GQA decoder from transformers (the Llama architecture: 16 query
heads and 8 K/V heads of 128, random weights) at prefill, B = 2, S = 4096, with every attention call through
b200c's SDPA drop-in (``attn_implementation="sdpa"``). Prints the calls b200c served vs fell back (with
each reason), the output's distance to torch SDPA's next to FlashAttention-2's, and the forward times.

    pip install -e ".[capstone]" && python examples/capstone/decoder.py --layers 8 [--pad 1024]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def build(layers: int, device: str, batch: int = 2, seq: int = 4096, tiny: bool = False, pad: int = 0):
    """(model, forward) of the decoder with random BF16 weights; ``tiny``: a few-parameter config (CPU tests);
    ``pad``: the last sequence of the batch ends ``pad`` tokens early (right padding: transformers then passes
    a 4-D causal + padding ``attn_mask`` to SDPA instead of ``is_causal``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if tiny:
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, num_hidden_layers=layers, vocab_size=100, max_position_embeddings=seq)
    else:
        cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_attention_heads=16, num_key_value_heads=8,
                          head_dim=128, num_hidden_layers=layers, vocab_size=32000, max_position_embeddings=seq)
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    model = model.to(dtype=torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(1)).to(device)

    mask = None
    if pad:
        mask = torch.ones(batch, seq, dtype=torch.long, device=device)
        mask[-1, seq - pad:] = 0

    def forward():
        return model(input_ids=ids, attention_mask=mask, use_cache=False).logits

    return model, forward


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pad", type=int, default=0,
                    help="right-pad the last sequence by this many tokens (a padded batch: masked attention calls)")
    a = ap.parse_args(argv)
    from harness import missing

    why = missing("transformers")
    if why:
        print(f"decoder.py: {why}", file=sys.stderr)
        return 2
    from harness import compare

    _, forward = build(a.layers, "cuda", a.batch, a.seq, pad=a.pad)
    padded = f", last sequence padded by {a.pad}" if a.pad else ""
    compare(f"Llama-architecture GQA decoder (16/8 heads of 128), {a.layers} layers, prefill {a.batch}x{a.seq}"
            f"{padded}", forward, a.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The blog's capstone on Hopper: diffusers' LTX-2 video transformer (``LTX2VideoTransformer3DModel``) at its
published width (32 heads x 128) with random weights (no weights can be downloaded here), ``--layers`` of
its 48 layers, at the blog's 10-second video shape (249 frames at 768 x 512: 32 latent frames of 24 x 16
tokens = 12,288 video tokens), with every attention call through b200c's SDPA drop-in. Prints the calls
b200c served vs fell back (with each reason; LTX-2's text/audio cross-attention passes an additive
key-padding mask, which b200c runs as a score_mod adding it), the output's distance to torch SDPA's next
to FlashAttention-2's, and the forward time of both.

    pip install -e ".[capstone]" && python examples/capstone/ltx2.py --layers 4
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def build(layers: int, device: str, tiny: bool = False):
    """(model, forward) of LTX-2 with random BF16 weights; ``tiny``: a few-parameter config (CPU tests)."""
    import torch
    from diffusers import LTX2VideoTransformer3DModel

    torch.manual_seed(0)
    if tiny:
        cfg = dict(num_layers=layers, num_attention_heads=2, attention_head_dim=32, cross_attention_dim=64,
                   caption_channels=48, in_channels=16, out_channels=16, audio_in_channels=16, audio_out_channels=16,
                   audio_num_attention_heads=2, audio_attention_head_dim=16, audio_cross_attention_dim=32)
        frames, h, w, text, audio = 2, 4, 4, 8, 8
    else:
        cfg = dict(num_layers=layers)  # the published config otherwise: 32 x 128 video heads, 4096 cross dim
        frames, h, w, text, audio = 32, 16, 24, 1024, 251  # 10.4 s: 249 frames -> 32 latent frames of 16 x 24
    with torch.device(device):  # random weights made on the GPU (billions of parameters: fast there)
        model = LTX2VideoTransformer3DModel(**cfg)
    model = model.to(dtype=torch.bfloat16).eval()
    c = model.config
    n = frames * h * w
    g = torch.Generator(device="cpu").manual_seed(1)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=torch.bfloat16)

    inputs = dict(hidden_states=r(1, n, c.in_channels), audio_hidden_states=r(1, audio, c.audio_in_channels),
                  encoder_hidden_states=r(1, text, c.caption_channels),
                  audio_encoder_hidden_states=r(1, text, c.caption_channels),
                  timestep=torch.full((1, n), 500.0, device=device), audio_timestep=torch.full((1,), 500.0, device=device),
                  encoder_attention_mask=torch.ones(1, text, device=device),
                  audio_encoder_attention_mask=torch.ones(1, text, device=device),
                  num_frames=frames, height=h, width=w, audio_num_frames=audio, return_dict=False)

    def forward():
        out = model(**inputs)
        return out[0] if isinstance(out, (tuple, list)) else out

    return model, forward


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4, help="of the model's 48 (default 4)")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    from harness import missing

    why = missing("diffusers")
    if why:
        print(f"ltx2.py: {why}", file=sys.stderr)
        return 2
    from harness import compare

    _, forward = build(a.layers, "cuda")
    compare(f"LTX-2 video transformer, {a.layers} of 48 layers, 12288 video tokens", forward, a.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

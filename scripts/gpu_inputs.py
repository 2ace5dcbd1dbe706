"""The GPU jobs' shared inputs: named shapes, the randn inputs with large and late logits, and the FP32
reference attention (scripts/gpu_job.py, hopper_job.py, race_probe.py import it; it imports none of them)."""
from __future__ import annotations


SHAPES = {
    # name: (B, H, S, note)
    "s128": (1, 2, 128, "one K/V iteration"),
    "s256": (1, 3, 256, ""),
    "s384": (2, 1, 384, "odd Q-tile count (half-empty last work item)"),
    "odd_work": (1, 133, 256, "133 work items (not a multiple of the SM count)"),
    "4k": (8, 16, 4096, "blog shape"),
    "8k": (4, 16, 8192, "blog shape"),
    "16k": (2, 16, 16384, "blog shape"),
}
GROUPS = {"small": ["s128", "s256", "s384", "odd_work"], "blog": ["4k", "8k", "16k"]}


def make_inputs(B, H, S, seed, device):
    """randn Q/K/V (B, H, S, 128) BF16; q scaled x4 so logits are large (rescale
    threshold), and for every 7th row the largest logit sits in the last K/V
    tile (the row max arrives late)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(B, H, S, 128, generator=g) * 4.0
    k = torch.randn(B, H, S, 128, generator=g)
    v = torch.randn(B, H, S, 128, generator=g)
    rows = torch.arange(0, S, 7)
    late = S - 1 - (rows % 128)  # a key in the last K/V tile
    k[:, :, late, :] = q[:, :, rows, :] / q[:, :, rows, :].norm(dim=-1, keepdim=True) * 6.0
    return [t.to(device=device, dtype=torch.bfloat16) for t in (q, k, v)]


def reference(q, k, v, scale):
    """FP32 attention from the BF16 inputs, chunked over (batch, head)."""
    import torch

    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(q.shape[0]):
        for h0 in range(0, q.shape[1], 4):
            qs, ks, vs = (t[b, h0:h0 + 4].float() for t in (q, k, v))
            p = torch.softmax((qs @ ks.transpose(-1, -2)) * scale, dim=-1)
            out[b, h0:h0 + 4] = p @ vs
    return out

"""A score_mod and a mask_mod for `b200c compile --score-mod / --mask-mod` (the README's example):

    b200c compile examples/hopper/h11_persistent.py --score-mod examples/mods/my_mods.py:my_bias \
        --mask-mod examples/mods/my_mods.py:local

The table lives on the CPU: compiling only traces the functions (its values are a kernel argument at run
time, so they never change the kernel)."""
import torch

table = torch.randn(16, 64, 64)  # a tiled bias: one value per (head, 64-query tile, 64-key tile)


def my_bias(score, b, h, q_idx, kv_idx):
    """score_mod(score, b, h, q_idx, kv_idx) -> score: the scaled FP32 score plus the tile's bias."""
    return score + table[h, q_idx // 64, kv_idx // 64]


def local(b, h, q_idx, kv_idx):
    """mask_mod(b, h, q_idx, kv_idx) -> bool: the keys within 128 positions of each query."""
    return (q_idx - kv_idx).abs() <= 128

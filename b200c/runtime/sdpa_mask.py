"""torch SDPA's ``attn_mask`` as b200c mods: a boolean mask is a mask_mod (True: take part in
attention), an additive float mask a score_mod (``score + mask``) plus a mask_mod (``mask > -inf``,
so tiles the mask hides entirely are skipped and fully masked rows give 0, not NaN). The mask keeps
its own shape and strides: dimensions of size 1 (broadcast over B, H or S_q, e.g. a key-padding
mask (B, 1, 1, S_kv)) are indexed with 0, so neither the kernel nor the block mask reads more than
the mask holds. The functions are cached per mask tensor (pointer, shape, strides, dtype), so a
model that passes one mask to every layer traces them once.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import torch

_cache: "OrderedDict" = OrderedDict()
_lock = threading.Lock()
_MAX = 32


def mask_problem(attn_mask, query, key):
    """(key, message) when b200c cannot take ``attn_mask`` for these inputs, else None."""
    if not isinstance(attn_mask, torch.Tensor):
        return "attn_mask:type", f"attn_mask is a {type(attn_mask).__name__}, not a tensor"
    if attn_mask.dtype not in (torch.bool, query.dtype, torch.float32, torch.float16):
        return f"attn_mask:dtype:{attn_mask.dtype}", (f"attn_mask has dtype {attn_mask.dtype} (b200c takes a bool mask "
                                                      "or an additive float mask)")
    if attn_mask.device != query.device:
        return "attn_mask:device", f"attn_mask is on {attn_mask.device}, query on {query.device}"
    if attn_mask.dim() > 4:
        return "attn_mask:rank", f"attn_mask is {attn_mask.dim()}-D (broadcastable to (B, H, S_q, S_kv) needed)"
    want = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    shape = (1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)
    for n, (m, w) in enumerate(zip(shape, want)):
        if m not in (1, w):
            return "attn_mask:shape", (f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to (B, H, S_q, "
                                       f"S_kv) = {want} (dim {n - 4 + attn_mask.dim()})")
    return None


def mods_of_mask(attn_mask):
    """``(score_mod, mask_mod)`` of an SDPA ``attn_mask`` (checked by :func:`mask_problem`)."""
    key = (attn_mask.data_ptr(), tuple(attn_mask.shape), attn_mask.stride(), attn_mask.dtype, attn_mask.device)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit[1]
    m = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)) if attn_mask.dim() < 4 else attn_mask
    sizes = tuple(m.shape)
    fns = _functions(m, sizes)
    with _lock:
        _cache[key] = (attn_mask, fns)  # the mask stays alive while its functions are cached
        while len(_cache) > _MAX:
            _cache.popitem(last=False)
    return fns


def _functions(m, sizes):
    # dims of size 1 are indexed with 0: the mask is read where it has data, never broadcast by a copy
    def at(b, h, q_idx, kv_idx):
        return m[b if sizes[0] > 1 else 0, h if sizes[1] > 1 else 0, q_idx if sizes[2] > 1 else 0,
                 kv_idx if sizes[3] > 1 else 0]

    if m.dtype == torch.bool:
        def sdpa_bool_mask(b, h, q_idx, kv_idx):
            return at(b, h, q_idx, kv_idx)

        return None, sdpa_bool_mask

    def sdpa_additive_mask(score, b, h, q_idx, kv_idx):
        return score + at(b, h, q_idx, kv_idx).float()

    def sdpa_additive_visible(b, h, q_idx, kv_idx):
        return at(b, h, q_idx, kv_idx) > float("-inf")

    return sdpa_additive_mask, sdpa_additive_visible


__all__ = ["mask_problem", "mods_of_mask"]

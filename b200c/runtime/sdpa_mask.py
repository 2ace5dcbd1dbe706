"""torch SDPA's ``attn_mask`` as b200c mods: a boolean mask is a mask_mod (True: take part in
attention; the block mask skips the K/V tiles it hides entirely), an additive float mask a score_mod
(``score + mask``, a bias added to every score: no block mask is computed and no tile is skipped; -inf
entries give weight 0 and rows that are -inf everywhere give O = 0, LSE = -inf, where torch's result
depends on its backend and version).

The kernel adds the bias in raw score units (``fmaf(mask, 1 / softmax_scale, s)``), so entries below
about -3.4e38 * softmax_scale (transformers' dtype minimum, -3.39e38, at any head dim) become -inf: rows
hidden entirely by such finite entries give O = 0, where torch's math gives the mean of V over all keys
(those are padding rows a model discards); rows they hide in part are unaffected.

Why no mask_mod for additive masks: models' masks are mostly finite (diffusers' -10000) and hide no tile,
and on the H200 (the tree of e9c3177, one interleaved run, LTX-2's masked cross-attention: 1x32x12288
queries, 1024 keys, D 128) the kernel with the mask_mod `mask > -inf` took 571 us against 536 with the
score_mod alone, plus ~30 small torch kernels per call for its block mask. A boolean mask keeps the tile
skipping. Per-head, per-row and one-element additive masks are light mods
(:func:`b200c.codegen.mods.light`): the dense presets' tiles, the bias handed to the softmax per row.

The mask keeps its own shape and strides: dimensions of size 1 (broadcast over B, H or S_q, e.g. a
key-padding mask (B, 1, 1, S_kv)) are indexed with 0, so neither the kernel nor the block mask reads more
than the mask holds. Models make a new mask tensor per forward (or per layer), so nothing is keyed by the
tensor: the functions are traced once per mask *pattern* (boolean or additive, its dtype, which
dimensions have size 1) and each call only puts its mask in as the captured tensor (a kernel argument)
and, for a boolean mask, its own block mask (measured on the H200: tracing per call made LTX-2's 4-layer
forward 242.6 ms against torch's 103.1).
"""
from __future__ import annotations

import functools
import threading

import torch

_patterns: dict = {}  # (dtype, broadcast dims) -> (ModSet, mask_uses, its JSON)
_lock = threading.Lock()


@functools.cache
def _mods_modules():
    """b200c.dsl.mods and ModCall, imported by the first masked call (not by the drop-in's import: a model
    without masks never loads the mods machinery) and not again per call."""
    from ..dsl import mods as dsl_mods
    from .mod_call import ModCall

    return dsl_mods, ModCall


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


def _functions(m, sizes):
    # dims of size 1 are indexed with 0: the mask is read where it has data, never broadcast by a copy. A
    # mask of one element is indexed with b * 0: with constant indices the tracer would read its value once
    # and compile it into the kernel (the next call's mask has other values)
    one = all(n == 1 for n in sizes)

    def at(b, h, q_idx, kv_idx):  # a dimension of size 0 (an empty batch) is indexed by its variable too
        return m[b if sizes[0] != 1 else b * 0 if one else 0, h if sizes[1] != 1 else 0,
                 q_idx if sizes[2] != 1 else 0, kv_idx if sizes[3] != 1 else 0]

    if m.dtype == torch.bool:
        def sdpa_bool_mask(b, h, q_idx, kv_idx):
            return at(b, h, q_idx, kv_idx)

        return None, sdpa_bool_mask

    def sdpa_additive_mask(score, b, h, q_idx, kv_idx):
        return score + at(b, h, q_idx, kv_idx).float()

    return sdpa_additive_mask, None


def mod_call_of_mask(attn_mask):
    """The :class:`~b200c.runtime.mod_call.ModCall` of an SDPA ``attn_mask`` (checked by
    :func:`mask_problem`): the pattern's traced ModSet (cached) with this mask as its captured tensor."""
    dsl_mods, ModCall = _mods_modules()
    m = attn_mask.reshape((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)) if attn_mask.dim() < 4 else attn_mask
    sizes = tuple(m.shape)
    score_mod, mask_mod = _functions(m, sizes)
    key = (m.dtype, tuple(s != 1 for s in sizes))
    with _lock:
        hit = _patterns.get(key)
    if hit is None:
        mods, _ = dsl_mods.trace_mods(score_mod=score_mod, mask_mod=mask_mod)
        hit = (mods, dsl_mods.uses(mods.mask_mod) if mods.mask_mod is not None else frozenset(), mods.to_json())
        with _lock:
            _patterns[key] = hit
    return ModCall(hit[0], (m,), None, mask_mod, hit[1], hit[2], m if m.dtype == torch.bool else None)


__all__ = ["mask_problem", "mod_call_of_mask"]

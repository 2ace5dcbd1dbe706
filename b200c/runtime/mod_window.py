"""``window_size=(left, right)`` (flash_attn_func's sliding window) as a mask_mod: bottom-right
aligned like b200c's ``causal``, per sequence. The bounds live in a (B, 2) int32 tensor (a captured
kernel input indexed by the sequence), so one kernel serves every S_q, S_kv and varlen batch of a
window; only ``left`` / ``right`` being bounded or not changes the traced function."""
from __future__ import annotations

import threading

import torch

from ..errors import LaunchError

_bounds: dict = {}  # key -> (inputs kept alive, (B, 2) int32 bounds); a handful per process
_fns: dict = {}  # (bounds key, id(mask_mod)) -> (mask_mod, bounds, the window's function): traced once
_lock = threading.Lock()
_FAR = 1 << 30  # an unbounded side


def _side(name: str, x) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < -1:
        raise LaunchError(f"window_size {name} = {x!r}: use an int >= 0 (keys on that side of the diagonal), or -1 "
                          "for no bound")
    return x


def window_mask(window_size, s_q: int, s_kv: int, device, mask_mod=None, batch: int = 1, cu_seqlens=None):
    """The mask_mod of ``window_size`` and'ed with ``mask_mod`` (``mask_mod`` itself when the window
    bounds nothing: ``(-1, -1)``).

    Query row ``r`` of a sequence sees keys ``r + len_kv - len_q - left .. r + len_kv - len_q + right``
    (flash_attn's convention; -1: unbounded on that side). Dense calls: ``len_q = s_q``, ``len_kv =
    s_kv`` for each of ``batch`` sequences; varlen: ``cu_seqlens`` = (cu_seqlens_q, cu_seqlens_k).

    Raises:
        LaunchError: ``window_size`` is not a pair of ints >= -1.
    """
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise LaunchError(f"window_size must be a pair (left, right) of ints (-1: unbounded), got {window_size!r}")
    left, right = _side("left", window_size[0]), _side("right", window_size[1])
    if left < 0 and right < 0:
        return mask_mod
    if cu_seqlens is None:
        key = ("dense", s_kv - s_q, left, right, batch, str(device))
        keep = ()
    else:
        cq, ck = cu_seqlens
        # prefix sums made under torch.inference_mode have no version counter: not cached (key None)
        key = None if cq.is_inference() or ck.is_inference() else (
            "varlen", cq.data_ptr(), cq._version, ck.data_ptr(), ck._version, tuple(cq.shape), left, right,
            str(device))
        keep = (cq, ck)
    hit = None
    if key is not None:
        with _lock:
            hit = _bounds.get(key)
    if hit is None:
        with torch.inference_mode(False):  # the cached bounds serve later calls outside inference mode too
            if cu_seqlens is None:
                off = torch.full((batch,), s_kv - s_q, dtype=torch.int64, device=device)
            else:
                cq, ck = (c.to(device=device, dtype=torch.int64) for c in cu_seqlens)
                off = (ck[1:] - ck[:-1]) - (cq[1:] - cq[:-1])
            lo = off - left if left >= 0 else torch.full_like(off, -_FAR)
            hi = off + right if right >= 0 else torch.full_like(off, _FAR)
            hit = (keep, torch.stack([lo, hi], dim=1).to(torch.int32).contiguous())
        if key is not None:
            with _lock:
                if len(_bounds) > 256:
                    _bounds.clear()
                _bounds[key] = hit
    bounds = hit[1]
    fkey = (key, id(mask_mod))
    with _lock:
        f = _fns.get(fkey)
    if f is not None and f[0] is mask_mod and f[1] is bounds:  # the function closes over these very bounds
        return f[2]
    fn = _window_fn(bounds, left >= 0, right >= 0, mask_mod)
    with _lock:
        if len(_fns) > 256:
            _fns.clear()
        _fns[fkey] = (mask_mod, bounds, fn)
    return fn


def _window_fn(bounds, has_left: bool, has_right: bool, user):
    if has_left and has_right:
        def window(b, h, q_idx, kv_idx):
            return (kv_idx - q_idx >= bounds[b, 0]) & (kv_idx - q_idx <= bounds[b, 1])
    elif has_left:
        def window(b, h, q_idx, kv_idx):
            return kv_idx - q_idx >= bounds[b, 0]
    else:
        def window(b, h, q_idx, kv_idx):
            return kv_idx - q_idx <= bounds[b, 1]
    if user is None:
        return window

    def window_and_mask(b, h, q_idx, kv_idx):
        return window(b, h, q_idx, kv_idx) & user(b, h, q_idx, kv_idx)

    return window_and_mask


__all__ = ["window_mask"]

"""Launch entries for a K/V cache that grew: a miss that differs from a cached entry only in its K/V length,
its K/V strides and the data pointers gets its entry from that one without the full miss path.

A decoding step through transformers' cache (``torch.cat`` of one new key per step) calls attention with
new K and V tensors every step, one row longer than the last: each call misses the entry cache
(:mod:`b200c.runtime.launcher`), and the full miss (validation of every rule, the kernel lookup, the split
count, the head packing, two parameter blocks) cost 430-436 us of host time on the H200 against 64-142 us
for a cached call (docs/decode.md, "Generation"). Calls of one *family* agree on everything but those
values: the kernel token, target, layout, options, q's shape, strides, dtype and device, and K/V's shape
but for S_kv, dtypes and devices (:func:`family_key`). For such a miss, :func:`regrown` re-checks what can
differ (the layout rules of q, k and v, S_kv of k against v) with the same checks the full path runs;
the launcher (:func:`b200c.runtime.launcher.run`) recomputes the head packing and the split count for the
new S_kv and keeps the family's entry as the template only where both come out the same (same loaded
kernel, same grid); it then encodes the three tensor maps and writes a new parameter block from the
template's values with the new maps and S_kv (a call with mods writes its own values per launch, as on a
hit: captured tensors, sinks, the block mask of the new S_kv). Any other case (S_kv = 0, another split
count or head packing) takes the full path.
"""
from __future__ import annotations

import dataclasses

from . import inputs

MAX_FAMILIES = 64
_families: dict = {}


def family_key(key: tuple, layout: str, q, k, v) -> tuple:
    """What calls of one family share: the entry key (:func:`b200c.runtime.launcher.run`) without the data
    pointers, S_kv and the K/V strides."""
    sd = 2 if layout == "bhsd" else 1
    ks, vs = tuple(k.shape), tuple(v.shape)
    return (key[0], key[1], layout, key[3], key[4], q.shape, q.stride(), ks[:sd] + ks[sd + 1:],
            vs[:sd] + vs[sd + 1:], q.dtype, k.dtype, v.dtype, q.device, k.device, v.device)  # devices with their type


def note(fam: tuple, e) -> None:
    """Make entry ``e`` (its ``values`` and ``base`` set) the template of family ``fam``, the most recent one
    (the least recently noted family goes when :data:`MAX_FAMILIES` are held). Safe under threads: another
    thread's eviction or :func:`clear` in between costs at most a template."""
    _families.pop(fam, None)
    if len(_families) >= MAX_FAMILIES:
        try:
            _families.pop(next(iter(_families)), None)
        except (StopIteration, RuntimeError):  # emptied, or changed size while read, by another thread
            pass
    _families[fam] = e


def clear() -> None:
    """Forget every family's template."""
    _families.clear()


class OutLike:
    """The shape, strides and dtype of a template's output (what :class:`~b200c.runtime.launcher.Entry` reads
    of its ``out_like``)."""

    __slots__ = ("shape", "_stride", "dtype")

    def __init__(self, e) -> None:
        self.shape, self._stride, self.dtype = e.out_size, e.out_stride, e.out_dtype

    def stride(self):
        return self._stride


def regrown(fam: tuple, layout: str, q, k, v):
    """``(template, views, problem)`` of a call of family ``fam``: the family's template entry, the call's
    (B, H, S, D) views and its problem (the template's with this S_kv); None where the full miss path must
    build the entry (no template, S_kv = 0 or different in k and v). The caller
    (:func:`b200c.runtime.launcher.run`) then keeps the template only where the head packing, the split
    count and so the kernel and the grid come out as the template's.

    Raises:
        LaunchError: a layout rule of q, k or v is broken (the full path's check and message).
    """
    sib = _families.get(fam)
    if sib is None:
        return None
    views = (q, k, v) if layout == "bhsd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    seq_kv = int(views[1].shape[2])
    if seq_kv == 0 or views[2].shape[2] != seq_kv:
        return None
    for name, t in zip("qkv", views):
        inputs._check_layout(name, t, not inputs._is_fake(t))
    return sib, views, dataclasses.replace(sib.problem, seq_kv=seq_kv)


__all__ = ["regrown", "family_key", "note", "clear", "OutLike", "MAX_FAMILIES"]

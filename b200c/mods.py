"""Ready-made attention mods: one-line recipes that return FlexAttention-style functions.

A **score_mod** ``score_mod(score, b, h, q_idx, kv_idx) -> score`` rewrites one attention score and a
**mask_mod** ``mask_mod(b, h, q_idx, kv_idx) -> bool`` says whether query ``q_idx`` sees key ``kv_idx``
(True: it does), with FlexAttention's conventions:

* ``score`` is the FP32 ``q . k`` multiplied by ``softmax_scale`` (natural-log units: the softmax takes
  ``exp(score)``), before any mask; a score_mod returns the new score.
* ``b`` is the batch index, ``h`` the query head (0 .. H-1; with GQA several query heads share a K/V
  head), ``q_idx`` / ``kv_idx`` the positions of the query and the key within their sequence (0-based,
  int32). The masks below are top-left aligned, like FlexAttention's: query ``i`` and key ``i`` are the
  same position (b200c's ``causal=True`` is bottom-right aligned, as FlashAttention's).
* Tensors a function reads from its closure (``slopes[h]``, ``doc_ids[q_idx]``) are kernel inputs: new
  values, shapes or strides do not recompile. Each must be on the attention's device, with dtype float32,
  bfloat16, float16, int32, int64 or bool, indexed in every dimension, and every index must be in range
  (the device does not check).
* The same function written twice (another name, file or tensor of the same dtype and rank) traces to
  the same graph and shares one compiled kernel; a different constant (``softcap(30.0)`` and
  ``softcap(50.0)``) is a different kernel.

Your own functions work the same way (see :data:`b200c.dsl.mods.OPS` for what they may compute), and
these recipes are plain Python you can read and combine::

    mask = and_masks(causal(), document(doc_ids))
    o = b200c.attention(q, k, v, score_mod=softcap(30.0), mask_mod=mask)

**Attention sinks** (gpt-oss) are not a score_mod: pass the per-head sink logits as
``b200c.attention(..., sinks=logits)``, FP32 of shape (H,). Each head's softmax gets one extra logit
in its denominator, ``softmax(s)_j = exp(s_j) / (exp(sink_h) + sum_k exp(s_k))``, which no value
vector goes with (the weights of a row sum to less than 1); the returned LSE includes it.

Importing this module imports torch; ``import b200c`` does not import it.
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Callable, Union

import torch

from .errors import ScheduleError

__all__ = ["softcap", "alibi", "alibi_slopes", "sliding_window", "causal", "document", "prefix_lm", "key_padding",
           "and_masks", "or_masks"]

_INT_DTYPES = (torch.int32, torch.int64)


def _int_tensor(name: str, t, ndims: tuple, shape_text: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise ScheduleError(f"{name} is a {type(t).__name__}; pass a torch tensor of shape {shape_text}")
    if t.dtype not in _INT_DTYPES:
        raise ScheduleError(f"{name} has dtype {t.dtype}; it must be torch.int32 or torch.int64 "
                            f"(convert it with .to(torch.int32))")
    if t.dim() not in ndims:
        raise ScheduleError(f"{name} has shape {tuple(t.shape)}; it must be {shape_text}")


def _non_negative_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:  # numpy ints too
        raise ScheduleError(f"{name}={v!r}; it must be an int >= 0")
    return int(v)


def softcap(cap: float) -> Callable:
    """Logit soft-capping (Gemma 2, Grok): a score_mod ``cap * tanh(score / cap)``.

    Scores keep their sign and order and stay within (-cap, cap); near 0 they are unchanged. The kernel's
    tanh is PTX ``tanh.approx.f32`` (one MUFU op; relative error up to about 2^-11, as FlashAttention-3's
    softcap): ``cap * (1 - 2 / (1 + torch.exp(2 * score / cap)))`` as your own score_mod is exact to about
    1e-7 at one more MUFU op per score.

    Args:
        cap: the cap, a finite float > 0 in score units (Gemma 2: 50.0 for attention logits). Compiled
            into the kernel: each value is its own kernel.

    Raises:
        ScheduleError: ``cap`` is not a finite number > 0.
    """
    if (isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not math.isfinite(cap) or cap <= 0
            or cap > 1e30):
        raise ScheduleError(f"softcap(cap={cap!r}): cap must be a number > 0 and <= 1e30 (FP32 arithmetic on the "
                            "GPU: score / cap and cap * tanh), e.g. 50.0")
    cap = float(cap)
    cap = float(cap)

    def softcap_score(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return softcap_score


def alibi_slopes(heads: int, device=None) -> torch.Tensor:
    """The ALiBi slopes of Press et al. (2022) for ``heads`` heads: FP32, shape (heads,).

    For a power of two ``n`` the slopes are ``2 ** (-8 * i / n)``, i = 1 .. n; otherwise those of the
    largest power of two ``m <= heads`` followed by every other slope of ``2 * m`` heads, as the paper's
    reference code does.

    Raises:
        ScheduleError: ``heads`` is not an int >= 1.
    """
    if isinstance(heads, bool) or not isinstance(heads, numbers.Integral) or heads < 1:
        raise ScheduleError(f"alibi_slopes(heads={heads!r}): heads must be an int >= 1")
    heads = int(heads)

    def power_of_two(n: int) -> list:
        return [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]

    m = 1 << (heads.bit_length() - 1)
    slopes = power_of_two(m) + power_of_two(2 * m)[0::2][: heads - m]
    return torch.tensor(slopes, dtype=torch.float32, device=device)


def alibi(slopes: torch.Tensor) -> Callable:
    """ALiBi (Press et al., "Train Short, Test Long", 2022): a score_mod
    ``score + slopes[h] * (kv_idx - q_idx)``.

    With positive slopes a key ``d`` positions before the query is penalized by ``slopes[h] * d``
    (linear in distance, one slope per head); keys after the query get a bonus, so combine it with a
    causal mask, as the paper does. Positions are top-left aligned.

    Args:
        slopes: float tensor of shape (H,), one slope per query head, on the attention's device: float32
            (bfloat16 / float16 are read and widened to FP32); :func:`alibi_slopes` gives the paper's.
            A kernel input: new slopes do not recompile.

    Raises:
        ScheduleError: ``slopes`` is not a 1-D float tensor.
    """
    if (not isinstance(slopes, torch.Tensor) or slopes.dim() != 1
            or slopes.dtype not in (torch.float32, torch.bfloat16, torch.float16)):
        what = (f"a tensor of dtype {slopes.dtype} and shape {tuple(slopes.shape)}"
                if isinstance(slopes, torch.Tensor) else f"a {type(slopes).__name__}")
        raise ScheduleError(f"alibi(slopes): slopes is {what}; pass a float32 tensor of shape (H,), e.g. "
                            f"b200c.mods.alibi_slopes(H)")

    def alibi_score(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    return alibi_score


def sliding_window(left: int, right: int = 0) -> Callable:
    """Local (sliding-window) attention: a mask_mod ``q_idx - left <= kv_idx <= q_idx + right``.

    Query ``i`` sees the ``left`` keys before it, itself, and the ``right`` keys after it (``right=0``:
    causal with a window of ``left + 1`` keys, Mistral's ``sliding_window=W`` is ``left=W - 1``).
    Top-left aligned like FlexAttention's masks.

    Args:
        left: keys before the query, an int >= 0.
        right: keys after the query, an int >= 0 (default 0). Both are compiled into the kernel.

    Raises:
        ScheduleError: ``left`` or ``right`` is not an int >= 0.
    """
    left, right = _non_negative_int("left", left), _non_negative_int("right", right)

    if right == 0:
        def sliding_window_mask(b, h, q_idx, kv_idx):
            return (q_idx - left <= kv_idx) & (kv_idx <= q_idx)
    else:
        def sliding_window_mask(b, h, q_idx, kv_idx):
            return (q_idx - left <= kv_idx) & (kv_idx <= q_idx + right)
    return sliding_window_mask


def causal() -> Callable:
    """Causal attention, top-left aligned (FlexAttention's convention): a mask_mod ``q_idx >= kv_idx``.

    Query ``i`` sees keys 0 .. i. For S_q == S_kv this is the lower triangle, the same as
    ``b200c.attention(..., causal=True)``; for S_q != S_kv they differ: ``causal=True`` aligns the last
    query with the last key (bottom-right, FlashAttention's convention), this mask the first with the
    first.
    """

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return causal_mask


def document(doc_ids: torch.Tensor) -> Callable:
    """Document (packed-sequence) masking: a mask_mod ``doc_ids[q_idx] == doc_ids[kv_idx]``.

    Several documents packed into one sequence attend only within themselves (combine with
    :func:`causal` via :func:`and_masks` for causal packing). Queries and keys index the same ids, so
    the query and key sequences are the same positions (self-attention).

    Args:
        doc_ids: int32 or int64 tensor of document ids, shape (S,) (every batch entry packs the same
            way) or (B, S) (then the mask is ``doc_ids[b, q_idx] == doc_ids[b, kv_idx]``), with
            S >= max(S_q, S_kv), on the attention's device. A kernel input: new ids do not recompile.

    Raises:
        ScheduleError: ``doc_ids`` is not an int tensor of 1 or 2 dimensions.
    """
    _int_tensor("document(doc_ids)", doc_ids, (1, 2), "(S,) or (B, S)")
    if doc_ids.dim() == 1:
        def document_mask(b, h, q_idx, kv_idx):
            return doc_ids[q_idx] == doc_ids[kv_idx]
    else:
        def document_mask(b, h, q_idx, kv_idx):
            return doc_ids[b, q_idx] == doc_ids[b, kv_idx]
    return document_mask


def prefix_lm(prefix_len: Union[int, torch.Tensor]) -> Callable:
    """Prefix-LM attention (T5 / PaLI style): a mask_mod ``(kv_idx < prefix_len) | (q_idx >= kv_idx)``.

    Every query sees the whole prefix (bidirectional) and the keys up to itself (causal, top-left
    aligned) after it.

    Args:
        prefix_len: the prefix length, an int >= 0 (compiled into the kernel), or an int32 / int64 tensor
            of shape (B,) with one length per batch entry (a kernel input: new lengths do not recompile;
            the mask is then ``(kv_idx < prefix_len[b]) | (q_idx >= kv_idx)``).

    Raises:
        ScheduleError: ``prefix_len`` is neither an int >= 0 nor an int tensor of shape (B,).
    """
    if isinstance(prefix_len, torch.Tensor):
        _int_tensor("prefix_lm(prefix_len)", prefix_len, (1,), "(B,)")

        def prefix_lm_mask(b, h, q_idx, kv_idx):
            return (kv_idx < prefix_len[b]) | (q_idx >= kv_idx)
    else:
        n = _non_negative_int("prefix_len", prefix_len)

        def prefix_lm_mask(b, h, q_idx, kv_idx):
            return (kv_idx < n) | (q_idx >= kv_idx)
    return prefix_lm_mask


def key_padding(lengths: torch.Tensor) -> Callable:
    """Key padding: a mask_mod ``kv_idx < lengths[b]`` (batch entry ``b`` has ``lengths[b]`` valid keys,
    the rest are padding).

    Args:
        lengths: int32 or int64 tensor of shape (B,), each in 0 .. S_kv, on the attention's device. A
            kernel input: new lengths do not recompile. A query row that sees no key gives O = 0 and
            LSE = -inf.

    Raises:
        ScheduleError: ``lengths`` is not an int tensor of shape (B,).
    """
    _int_tensor("key_padding(lengths)", lengths, (1,), "(B,)")

    def key_padding_mask(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]

    return key_padding_mask


def _check_masks(name: str, mask_mods) -> None:
    import inspect

    for i, m in enumerate(mask_mods):
        if not callable(m):
            raise ScheduleError(f"{name}: argument {i} is a {type(m).__name__}; pass mask_mod functions "
                                "(b, h, q_idx, kv_idx) -> bool")
        try:
            inspect.signature(m).bind(0, 0, 0, 0)
        except TypeError:
            what = getattr(m, "__name__", type(m).__name__)
            raise ScheduleError(f"{name}: argument {i} ({what}) cannot be called as mask_mod(b, h, q_idx, kv_idx); "
                                "pass mask_mods (e.g. b200c.mods.causal(), called: the recipes return the "
                                "function)") from None
        except ValueError:  # no signature to read (a builtin): tracing checks it
            pass


def _combined(name: str, mask_mods, join, empty) -> Callable:
    """The mask_mod ``join``-ing every one of ``mask_mods`` (``empty`` of q_idx's shape with none)."""
    def combined(b, h, q_idx, kv_idx):
        if not mask_mods:
            return empty(q_idx, dtype=torch.bool)
        result = mask_mods[0](b, h, q_idx, kv_idx)
        for m in mask_mods[1:]:
            result = join(result, m(b, h, q_idx, kv_idx))
        return result

    combined.__name__ = combined.__qualname__ = name
    return combined


def and_masks(*mask_mods: Callable) -> Callable:
    """A mask_mod that is True where every one of ``mask_mods`` is (``m0 & m1 & ...``); with none,
    every key is visible. E.g. ``and_masks(causal(), document(doc_ids))``.

    Raises:
        ScheduleError: an argument is not callable.
    """
    _check_masks("and_masks", mask_mods)
    return _combined("and_mask", mask_mods, operator.and_, torch.ones_like)


def or_masks(*mask_mods: Callable) -> Callable:
    """A mask_mod that is True where any of ``mask_mods`` is (``m0 | m1 | ...``); with none, no key is
    visible. E.g. ``or_masks(sliding_window(127), prefix_lm(64))``.

    Raises:
        ScheduleError: an argument is not callable.
    """
    _check_masks("or_masks", mask_mods)
    return _combined("or_mask", mask_mods, operator.or_, torch.zeros_like)

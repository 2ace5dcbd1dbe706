"""b200c as a provider of SDPA's flash path: ``torch.nn.attention.activate_flash_attention_impl("b200c")``.

On a torch that has ``torch.nn.attention.register_flash_attention_impl`` (the documented hook for SDPA
backend providers, torch >= 2.11), b200c registers itself under :data:`NAME` when the package is
imported with torch loaded (and when ``b200c.attention`` & co. are first used). Registering activates
nothing: a user opts in with ``activate_flash_attention_impl("b200c")`` and opts out with
``restore_flash_attention_impl()``. While active, the CUDA kernel of
``aten::_scaled_dot_product_flash_attention`` (what SDPA's flash backend calls, eagerly, under
``torch.compile`` (Inductor calls it as an extern kernel) and in CUDA graph capture) is b200c's: the
built-in schedule of the device's native target for the head dim (``b200c.attention(schedule=None)``,
the Hopper presets on an H100/H200). The autograd formula stays torch's; the kernel of its backward op
``aten::_scaled_dot_product_flash_attention_backward`` is b200c's too where its sm90a backward kernels
cover the call (compute capability 9.0, head dim 64, 128 or 256), torch's own flash backward otherwise, on b200c's output and
log-sum-exp (the same (B, H, S_q) natural-log format).

Calls b200c does not serve fall back to torch's memory-efficient kernel (``aten::_scaled_dot_product_
efficient_attention``, the same semantics): float16 inputs, head dims other than 64/128/256, a causal
mask with S_q != S_kv (torch aligns it to the top-left corner, b200c to the bottom-right), strides the
TMA rules refuse. Dropout and the debug mask are refused with a RuntimeError, as FlashAttention-4's
provider does (torch's flash backward would not reproduce another kernel's dropout). Which backend
SDPA picks is torch's decision: on Hopper GPUs it ranks cuDNN before flash, so route calls with
``torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)`` (measured on the H200 with torch 2.11).
"""
from __future__ import annotations

import functools
import threading

NAME = "b200c"
_lock = threading.Lock()
_registered = False


def available() -> bool:
    """Whether this torch has the provider hook."""
    import torch.nn.attention as tna

    return hasattr(tna, "register_flash_attention_impl")


def register() -> bool:
    """Register b200c under :data:`NAME` (idempotent; activates nothing). Returns False on a torch
    without the hook (then ``b200c.scaled_dot_product_attention`` is the way in)."""
    global _registered
    with _lock:
        if _registered:
            return True
        if not available():
            return False
        import torch.nn.attention as tna

        tna.register_flash_attention_impl(NAME, register_fn=activate)
        _registered = True
        return True


class Handle:
    """What :func:`activate` returns: ``remove()`` gives the op its torch kernel back."""

    def __init__(self, lib):
        self.lib = lib

    def remove(self) -> None:
        if self.lib is not None:
            self.lib._destroy()
            self.lib = None


def activate(dispatch_key: str = "CUDA") -> Handle:
    """Make b200c the ``dispatch_key`` kernel of ``aten::_scaled_dot_product_flash_attention`` (what
    ``activate_flash_attention_impl("b200c")`` calls; tests pass ``"CPU"`` to run it with the stand-in
    driver)."""
    import torch

    lib = torch.library.Library("aten", "IMPL", dispatch_key)
    lib.impl("_scaled_dot_product_flash_attention", flash_forward, dispatch_key)
    try:  # torch's own kernel, for the backward calls b200c's kernels do not cover
        original = torch.library.get_kernel("aten::_scaled_dot_product_flash_attention_backward", dispatch_key)
    except RuntimeError:  # no kernel for this key (the CPU key the tests use)
        original = None
    lib.impl("_scaled_dot_product_flash_attention_backward", functools.partial(flash_backward, original),
             dispatch_key, with_keyset=True)
    return Handle(lib)


def _reason(query, key, value, is_causal: bool):
    """Why b200c does not serve this call (None: it does)."""
    import torch

    from .inputs import HEAD_DIMS

    if query.dtype != torch.bfloat16 or key.dtype != torch.bfloat16 or value.dtype != torch.bfloat16:
        return f"dtype {query.dtype} (b200c kernels take bfloat16)"
    if query.dim() != 4 or query.shape[-1] not in HEAD_DIMS:
        return f"head dim {query.shape[-1]}"
    if is_causal and query.shape[2] != key.shape[2]:
        return "a top-left aligned causal mask with S_q != S_kv"
    return None


def _backward_reason(query, key, dropout_p: float, is_causal: bool, scale=None):
    """Why b200c's backward kernels do not serve this flash backward (None: they do)."""
    import torch

    from . import backward_launch
    from .inputs import scale_problem

    if dropout_p != 0.0:
        return f"dropout_p={dropout_p}"
    if scale_problem(scale):  # e.g. a negative scale, whose forward torch's kernel ran too
        return f"scale={scale!r}"
    if query.dtype != torch.bfloat16 or query.dim() != 4:
        return f"a {query.dim()}-D {query.dtype} query"
    if is_causal and query.shape[2] != key.shape[2]:
        return "a top-left aligned causal mask with S_q != S_kv"
    why = backward_launch.backward_reason(query)
    return None if why is None else why[1]


def flash_backward(original, keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                   max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    """``aten::_scaled_dot_product_flash_attention_backward`` by b200c's sm90a backward kernels where they
    cover the call (compute capability 9.0, head dim 64, 128 or 256, no dropout, bfloat16); otherwise torch's
    own kernel (``original``), as before. Returns ``(grad_query, grad_key, grad_value)``.

    Raises:
        NotImplementedError: a call the kernels do not cover on a dispatch key without a torch kernel.
    """
    why = _backward_reason(query, key, dropout_p, is_causal, scale)
    if why is None:
        from . import backward_launch

        return backward_launch.attention_backward(query, key, value, out, grad_out, logsumexp, causal=is_causal,
                                                  scale=scale)
    if original is None:
        raise NotImplementedError(f"b200c's flash provider: no kernel for this backward ({why}) on this device")
    return original.call_boxed(keyset, grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
                               max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=scale)


def flash_forward(query, key, value, dropout_p: float = 0.0, is_causal: bool = False,
                  return_debug_mask: bool = False, *, scale=None):
    """``aten::_scaled_dot_product_flash_attention`` by b200c: (B, H, S_q, D) query, (B, H_kv, S_kv, D) key
    and value; returns ``(output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, rng_state, unused,
    debug_attn_mask)`` as torch's flash kernel does (output like ``empty_like(query)``, logsumexp FP32
    (B, H, S_q) in natural-log units, rng_state/unused zero, no debug mask).

    Raises:
        RuntimeError: ``dropout_p`` != 0 or ``return_debug_mask``.
    """
    import torch

    if dropout_p != 0.0 or return_debug_mask:
        raise RuntimeError("b200c's SDPA flash provider runs no dropout and returns no debug mask; "
                           "call torch.nn.attention.restore_flash_attention_impl() for those")
    why = _reason(query, key, value, is_causal)
    out = lse = None
    if why is None:
        from ..errors import LaunchError, ScheduleError
        from .api import attention

        try:
            out, lse = attention(query, key, value, causal=is_causal, softmax_scale=scale, return_lse=True)
        except (LaunchError, ScheduleError):  # e.g. strides the TMA rules refuse: torch's kernel serves it
            out = None
    if out is None:
        if key.shape[1] != query.shape[1]:  # the efficient kernel takes equal heads
            rep = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1)
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, None, True, 0.0, is_causal, scale=scale)
        lse = lse[..., :query.shape[2]].contiguous()
    rng = torch.zeros(2, dtype=torch.uint64, device=query.device)
    unused = torch.empty((), dtype=torch.uint64, device=query.device)
    return out, lse, None, None, query.shape[2], key.shape[2], rng, unused, torch.empty(0, device=query.device,
                                                                                        dtype=query.dtype)


__all__ = ["NAME", "available", "register", "activate", "flash_forward", "flash_backward", "Handle"]

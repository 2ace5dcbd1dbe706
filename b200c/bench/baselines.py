"""The kernels b200c is measured against, as zero-argument callables on fixed inputs.

* torch SDPA with one backend forced (``torch.nn.attention.sdpa_kernel``):
  cuDNN, FLASH_ATTENTION (FlashAttention-2) and EFFICIENT (memory-efficient);
  GQA through ``enable_gqa``; causal with S_q == S_kv only (torch aligns a
  causal mask to the top-left corner, b200c and FlashAttention to the
  bottom-right: the same mask only when S_q == S_kv). Varlen batches (packed
  (total, H, D) tensors and ``cu_seqlens``): FlashAttention-2 through
  ``aten::_flash_attention_forward`` (bottom-right causal, any S_q / S_kv
  too) and cuDNN through ``aten::_cudnn_attention_forward`` where this torch
  has it; the efficient kernel is not timed on them.
* FlashAttention-4 (``flash_attn.cute`` of the flash-attn-4 package) when it imports: on compute
  capability 9.0 its Hopper kernels (the column "FA4-sm90"), on 10.x its Blackwell ones
  ("FlashAttention-4"); dense calls through ``flash_attn_func`` on (B, S, H, D) views, varlen batches
  through ``flash_attn_varlen_func`` on the packed tensors, a causal window as ``window_size=(N, 0)``.
  Where it does not import the table has the column with "not installed" (it is a measuring stick,
  never a dependency of b200c's call paths). The 10.x path is untested on a B200.
* A causal sliding window (shapes ``...cwN``): torch SDPA has no such mask; FlashAttention-2 through
  ``aten::_flash_attention_forward``'s ``window_size_left`` where this torch has it, and FA4.
"""
from __future__ import annotations

SDPA_BACKENDS = (("cuDNN", "CUDNN_ATTENTION"), ("FlashAttention-2", "FLASH_ATTENTION"),
                 ("efficient", "EFFICIENT_ATTENTION"))
REFERENCE = "cuDNN"  # the "% of" column


def sdpa(backend: str, q, k, v, causal: bool = False, gqa: bool = False):
    """A callable running torch SDPA on (B, H, S, D) q, k, v with ``backend``
    (a ``torch.nn.attention.SDPBackend`` member name) forced."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = getattr(SDPBackend, backend)
    kw = {"enable_gqa": True} if gqa else {}

    def run():
        with sdpa_kernel(be):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)

    return run


def fa2_varlen(inputs):
    """FlashAttention-2 on a varlen batch (torch's ``aten::_flash_attention_forward``)."""
    import torch

    s = inputs.shape
    n = max(s.lengths)
    op = torch.ops.aten._flash_attention_forward

    def run():
        return op(inputs.q, inputs.k, inputs.v, inputs.cu, inputs.cu, n, n, 0.0, s.causal, False)[0]

    return run


def cudnn_varlen(inputs):
    """cuDNN on a varlen batch (torch's ``aten::_cudnn_attention_forward`` with ragged offsets), where it exists."""
    import torch

    s = inputs.shape
    n = max(s.lengths)
    op = torch.ops.aten._cudnn_attention_forward
    # with prefix sums cuDNN takes the packed (total, H, D) tensors themselves (torch 2.11 asserts 3 dims:
    # "q.sizes().size() == MAX_MHA_DIM - is_nested"; the (1, H, total, D) views an earlier version passed failed)
    q, k, v = inputs.q, inputs.k, inputs.v

    def run():
        return op(q, k, v, None, inputs.cu, inputs.cu, n, n, False, 0.0, s.causal)[0]

    return run


def fa4_name(capability: tuple):
    """The FA4 column's name on a device of ``capability``: ``"FA4-sm90"`` (9.0), ``"FlashAttention-4"``
    (10.x), or None where flash-attn-4 has no kernels."""
    if tuple(capability) == (9, 0):
        return "FA4-sm90"
    if capability[0] == 10:
        return "FlashAttention-4"
    return None


def fa4_available(capability: tuple) -> bool:
    """FlashAttention-4 runs here: a device it has kernels for (:func:`fa4_name`) and ``flash_attn.cute``
    imports (never imported by b200c's own call paths)."""
    if fa4_name(capability) is None:
        return False
    try:
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func  # noqa: F401
    except Exception:  # noqa: BLE001 - not installed or not importable: the column says so
        return False
    return True


def first_output(out):
    """The output tensor of a call that returns it alone or first in a tuple (FA4 returns ``(out, lse)``)."""
    return out[0] if isinstance(out, tuple) else out


def fa4(q, k, v, causal: bool = False, window: int = 0):
    """A callable running FlashAttention-4 on (B, H, S, D) views (it takes (B, S, H, D))."""
    from flash_attn.cute import flash_attn_func

    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    kw = {"window_size": (window, 0)} if window else {}

    def run():
        return first_output(flash_attn_func(qs, ks, vs, causal=causal, **kw))

    return run


def fa4_varlen(inputs):
    """FlashAttention-4 on a varlen batch (packed (total, H, D) tensors, ``cu_seqlens``)."""
    from flash_attn.cute import flash_attn_varlen_func

    s = inputs.shape

    def run():
        return first_output(flash_attn_varlen_func(inputs.q, inputs.k, inputs.v, cu_seqlens_q=inputs.cu,
                                             cu_seqlens_k=inputs.cu, causal=s.causal))

    return run


def baselines(inputs, capability: tuple) -> list:
    """``(name, callable)`` of every baseline available on this device for ``inputs`` (a
    :class:`b200c.bench.run.Inputs`): see the module docstring for which runs what."""
    s = inputs.shape
    if s.varlen:
        out = [("cuDNN", cudnn_varlen(inputs)), ("FlashAttention-2", fa2_varlen(inputs))]
    elif s.window:  # no SDPA backend takes a sliding window
        out = [("FlashAttention-2", fa2_dense(inputs))] if fa2_has_window() else []
    elif s.causal and s.seq != s.s_kv:  # torch's top-left aligned causal mask is another mask: FA2 only
        out = [("FlashAttention-2", fa2_dense(inputs))]
    else:
        gqa = s.h_kv != s.heads
        out = [(name, sdpa(be, inputs.q, inputs.k, inputs.v, s.causal, gqa)) for name, be in SDPA_BACKENDS]
    name = fa4_name(capability)
    if name is not None and fa4_available(capability):
        out.append((name, fa4_varlen(inputs) if s.varlen else fa4(inputs.q, inputs.k, inputs.v, s.causal, s.window)))
    return out


def fa2_has_window() -> bool:
    """Whether this torch's ``aten::_flash_attention_forward`` takes ``window_size_left``."""
    import torch

    return "window_size_left" in str(torch.ops.aten._flash_attention_forward.default._schema)


def fa2_dense(inputs):
    """FlashAttention-2 on dense (B, H, S, D) inputs through ``aten::_flash_attention_forward`` ((B, S, H, D)
    views; its causal mask is bottom-right aligned, like b200c's)."""
    import torch

    s = inputs.shape
    q, k, v = (t.transpose(1, 2) for t in (inputs.q, inputs.k, inputs.v))
    op = torch.ops.aten._flash_attention_forward
    kw = {"window_size_left": s.window, "window_size_right": 0} if s.window else {}

    def run():
        return op(q, k, v, None, None, s.seq, s.s_kv, 0.0, s.causal, False, **kw)[0]

    return run

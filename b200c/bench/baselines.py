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
* FlashAttention-4 (``flash_attn.cute.flash_attn_func`` of the flash-attn-4
  package) on compute capability 10.x when it is installed. This path cannot
  run on the H200 this project measures on; it is written from the package's
  documented interface (q, k, v as (B, S, H, D)) and untested on a B200.
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


def fa4_available(capability: tuple) -> bool:
    """FlashAttention-4 runs here: a compute capability 10.x GPU and the flash-attn-4 package."""
    if capability[0] != 10:
        return False
    try:
        from flash_attn.cute import flash_attn_func  # noqa: F401
    except Exception:  # noqa: BLE001 - not installed or not importable: no FA4 column
        return False
    return True


def fa4(q, k, v, causal: bool = False):
    """A callable running FlashAttention-4 on (B, H, S, D) views (it takes (B, S, H, D))."""
    from flash_attn.cute import flash_attn_func

    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))

    def run():
        out = flash_attn_func(qs, ks, vs, causal=causal)
        return out[0] if isinstance(out, tuple) else out

    return run


def baselines(inputs, capability: tuple) -> list:
    """``(name, callable)`` of every baseline available on this device for ``inputs`` (a
    :class:`b200c.bench.run.Inputs`): see the module docstring for which runs what."""
    s = inputs.shape
    if s.varlen:
        out = [("cuDNN", cudnn_varlen(inputs)), ("FlashAttention-2", fa2_varlen(inputs))]
    elif s.causal and s.seq != s.s_kv:  # torch's top-left aligned causal mask is another mask: FA2 only
        out = [("FlashAttention-2", fa2_dense(inputs))]
    else:
        gqa = s.h_kv != s.heads
        out = [(name, sdpa(be, inputs.q, inputs.k, inputs.v, s.causal, gqa)) for name, be in SDPA_BACKENDS]
    if fa4_available(capability) and not s.varlen:
        out.append(("FlashAttention-4", fa4(inputs.q, inputs.k, inputs.v, s.causal)))
    return out


def fa2_dense(inputs):
    """FlashAttention-2 on dense (B, H, S, D) inputs through ``aten::_flash_attention_forward`` ((B, S, H, D)
    views; its causal mask is bottom-right aligned, like b200c's)."""
    import torch

    s = inputs.shape
    q, k, v = (t.transpose(1, 2) for t in (inputs.q, inputs.k, inputs.v))
    op = torch.ops.aten._flash_attention_forward

    def run():
        return op(q, k, v, None, None, s.seq, s.s_kv, 0.0, s.causal, False)[0]

    return run

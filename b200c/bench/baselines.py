"""The kernels b200c is measured against, as zero-argument callables on fixed inputs.

* torch SDPA with one backend forced (``torch.nn.attention.sdpa_kernel``):
  cuDNN, FLASH_ATTENTION (FlashAttention-2) and EFFICIENT (memory-efficient).
* FlashAttention-4 (``flash_attn.cute.flash_attn_func`` of the flash-attn-4
  package) on compute capability 10.x when it is installed. This path cannot
  run on the H200 this project measures on; it is written from the package's
  documented interface (q, k, v as (B, S, H, D)) and untested on a B200.
"""
from __future__ import annotations

SDPA_BACKENDS = (("cuDNN", "CUDNN_ATTENTION"), ("FlashAttention-2", "FLASH_ATTENTION"),
                 ("efficient", "EFFICIENT_ATTENTION"))
REFERENCE = "cuDNN"  # the "% of" column


def sdpa(backend: str, q, k, v):
    """A callable running torch SDPA on (B, H, S, D) q, k, v with ``backend``
    (a ``torch.nn.attention.SDPBackend`` member name) forced."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = getattr(SDPBackend, backend)

    def run():
        with sdpa_kernel(be):
            return F.scaled_dot_product_attention(q, k, v)

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


def fa4(q, k, v):
    """A callable running FlashAttention-4 on (B, H, S, D) views (it takes (B, S, H, D))."""
    from flash_attn.cute import flash_attn_func

    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))

    def run():
        out = flash_attn_func(qs, ks, vs, causal=False)
        return out[0] if isinstance(out, tuple) else out

    return run


def baselines(q, k, v, capability: tuple) -> list:
    """``(name, callable)`` of every baseline available on this device."""
    out = [(name, sdpa(be, q, k, v)) for name, be in SDPA_BACKENDS]
    if fa4_available(capability):
        out.append(("FlashAttention-4", fa4(q, k, v)))
    return out

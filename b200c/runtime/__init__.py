"""b200c runtime: build (ninja + nvcc, verified on-disk cache), load and launch
generated kernels on PyTorch tensors, as the ``b200c::attention`` custom op.

Modules: ``build``/``cache`` (kernels on disk), ``driver`` (cuda-bindings:
load, tensor maps), ``launcher`` (the cached per-call path), ``op`` (the
custom op, fake and autograd impls), ``api`` (``b200c.attention``),
``varlen`` (packed variable-length calls), ``sdpa`` (the SDPA drop-in),
``params`` (the parameter block, packed from the kernel's signature),
``fake_driver`` (a driver stand-in for CPU-only tests and measurements),
``watch`` (inotify change signal for schedule files given by path).

Public API:
    attention(q, k, v, *, schedule, causal=False, softmax_scale=None, return_lse=False, layout="bhsd",
              target="auto") -> Tensor | (Tensor, Tensor)
    attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, schedule, ...)
    attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, block_table=None, ...)
    attention_backward(q, k, v, out, dout, lse, *, causal=False, scale=None, schedule=None, deterministic=None)
                                                        dQ, dK, dV with a BackwardSchedule of your own
    attention_backward_varlen(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
    scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False, *, schedule=None, target="auto") -> Tensor
    attention_generated(q, k, v, generated_kernel, *, causal=False, softmax_scale=None, return_lse=False,
                        target="auto")
    build(generated_kernel, target) -> BuiltKernel
    build_many([(name, generated_kernel), ...], target, jobs=None, progress=True) -> [BuiltKernel]
    check_hang(kernel=None), synchronize(device=None)   bounded-wait reports (emulation)
    validate_inputs(q, k, v) -> Problem                 the input rules, without a launch

Building needs no torch; the names that do (attention, the custom op, the
driver) are imported on first use, so ``b200c build`` stays quick.
"""
from .build import BuiltKernel, build, build_many

_LAZY = {
    "attention": ".api",
    "attention_generated": ".api",
    "attention_varlen": ".api",
    "attention_with_kvcache": ".kvcache",
    "attention_backward": ".backward_launch",
    "attention_backward_varlen": ".backward_launch",
    "scaled_dot_product_attention": ".sdpa",
    "check_hang": ".driver",
    "synchronize": ".driver",
    "validate_inputs": ".inputs",
    "Problem": ".inputs",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        from . import op as _op  # noqa: F401  (registers torch.ops.b200c.attention)
        from .torch_flash import register

        register()  # torch.nn.attention.activate_flash_attention_impl("b200c") (activates nothing)

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'b200c.runtime' has no attribute {name!r}")


__all__ = ["attention", "attention_generated", "attention_varlen", "attention_with_kvcache", "attention_backward",
           "attention_backward_varlen", "scaled_dot_product_attention", "build",
           "build_many", "BuiltKernel", "check_hang", "synchronize", "validate_inputs", "Problem"]

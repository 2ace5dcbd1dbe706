"""b200c runtime: build (ninja + nvcc, on-disk cache), load and launch generated
kernels on PyTorch tensors, as the ``b200c::attention`` custom op.

Public API:
    attention(q, k, v, *, schedule, softmax_scale=None, target="auto") -> Tensor
    attention_generated(q, k, v, generated_kernel, *, softmax_scale=None, target="auto") -> Tensor
    build(generated_kernel, target) -> BuiltKernel
    build_many([(name, generated_kernel), ...], target, jobs=None, progress=True) -> [BuiltKernel]
    check_hang(kernel=None), synchronize(device=None)   bounded-wait reports (emulation)
    validate_inputs(q, k, v) -> Problem                 the input rules, without a launch
"""
from . import op as _op  # noqa: F401  (registers torch.ops.b200c.attention)
from .api import attention, attention_generated
from .build import BuiltKernel, build, build_many
from .driver import check_hang, synchronize
from .inputs import Problem, validate_inputs

__all__ = [
    "attention",
    "attention_generated",
    "build",
    "build_many",
    "BuiltKernel",
    "check_hang",
    "synchronize",
    "validate_inputs",
    "Problem",
]

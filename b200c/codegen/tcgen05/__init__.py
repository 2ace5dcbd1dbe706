"""The tcgen05 backend (sm_100a, and its emulation on sm_90a): tcgen05.mma into
Tensor Memory, TMEM loads/stores in the softmax and correction warps.

``plan.make_plan`` -> ``lower.lower`` -> ``emit.emit``; the roles specific to
this backend are in ``roles/``, its statement templates in ``templates/``.
"""
from .emit import emit
from .lower import lower
from .plan import make_plan

__all__ = ["make_plan", "lower", "emit"]

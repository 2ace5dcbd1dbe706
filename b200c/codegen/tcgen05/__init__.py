"""The tcgen05 backend (sm_100a, and its emulation on sm_90a): tcgen05.mma into
Tensor Memory, TMEM loads/stores in the softmax and correction warps.

``knobs.RULES`` -> ``plan.make_plan`` -> ``lower.lower`` -> ``emit.emit``; the
roles specific to this backend are in ``roles/``, its statement templates in
``templates/``.
"""
from .emit import emit
from .knobs import RULES
from .lower import lower
from .plan import make_plan

P_ALIASES_S = True  # P is packed over the S columns of its Q stage in TMEM (blog ch.2)

__all__ = ["make_plan", "lower", "emit", "RULES", "P_ALIASES_S"]

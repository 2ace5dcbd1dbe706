"""The Hopper backend (sm_90a): FlashAttention-3-style kernels with wgmma.

A producer warpgroup (one warp issues TMA) feeds a K/V ring in SMEM; one
consumer warpgroup per Q stage (64 rows) issues its own wgmmas (S = Q K^T,
SS; O += P V, RS with P from registers) and runs the online softmax in
registers; ping-pong named barriers alternate two consumers' GEMMs (FA3 §3.1)
and the issue order decides the intra-warpgroup overlap (§3.2).

``knobs.RULES`` -> ``plan.make_plan`` -> ``lower.lower`` -> ``emit.emit``;
the consumer and baseline roles are in ``roles/``, the producer is the shared
load role; templates in ``templates/``, the helper header is
``b200c/codegen/cuda/b200c_sm90.cuh``.
"""
from .emit import emit
from .knobs import RULES
from .lower import lower
from .plan import make_plan

P_ALIASES_S = False  # S (wgmma accumulator) and P (packed A fragments) are separate registers

__all__ = ["make_plan", "lower", "emit", "RULES", "P_ALIASES_S"]

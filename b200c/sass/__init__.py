"""SASS analysis of generated kernels, without a GPU (``b200c check``, tests, scripts).

* :mod:`.disasm`: ``cuobjdump -sass`` of a cubin and instruction counts
  (:func:`count`, :func:`disassemble`, :func:`find_cuobjdump`, :func:`function_sass`; re-exported here).
* :mod:`.loops`: the loops of a SASS listing (branch targets, spin waits) and
  their instruction mix.
* :mod:`.roles`: each warp role's steady-state K/V loop of a sm_100a kernel,
  from the ``-lineinfo`` lines of its generated source.
* :mod:`.hopper`: the sm_90a consumer's hot loop and its wgmma register hazards.

Which analysis ``b200c check`` runs for a target is its record's ``sass``
field (:mod:`b200c.codegen.targets`).
"""
from .disasm import COUNTERS, count, disassemble, find_cuobjdump, function_sass

__all__ = ["COUNTERS", "count", "disassemble", "find_cuobjdump", "function_sass"]

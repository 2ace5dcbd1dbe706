"""The sm90 backend's text for the intents of the shared IR nodes (its renderer table; see
:mod:`b200c.codegen.tcgen05.text`). Hopper has no Tensor Memory, so no ``fence_*_sync`` entries:
a node asking for one fails to render.

* ``warp_arrive``: one mbarrier arrival per warp, predicated on lane 0 (no branch; the wgmma
  waits before it already converged the warp).
"""
TEXT = {
    "warp_arrive": "mbar_arrive_if(c.bar({bar}), lane_id() == 0);  // one arrival per warp (predicated, no branch)",
}

"""The tcgen05 backend's text for the intents of the shared IR nodes (its renderer table: the shared
templates print ``tt.<intent>``; a node whose intent a backend has no entry for fails to render).

* ``fence_before_sync``: asynchronous-unit (TMEM) writes and reads ordered before a thread
  synchronization: ``tcgen05.wait::st`` + ``tcgen05.fence::before_thread_sync`` (PTX 9.7.16.6.4).
* ``fence_after_sync``: ... and after one: ``tcgen05.fence::after_thread_sync``.
* ``warp_arrive``: one mbarrier arrival per warp once its lanes are done (``{bar}``: the barrier
  index expression).
"""
TEXT = {
    "fence_before_sync": "tcgen05_fence_before();",
    "fence_after_sync": "tcgen05_fence_after();",
    "warp_arrive": "__syncwarp();\nif (lane_id() == 0) mbar_arrive(c.bar({bar}));  // one arrival per warp",
}

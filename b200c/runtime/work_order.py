"""A varlen call's item order, longest first, made on the GPU before the attention kernel.

Without an order, a varlen call numbers its work items as a dense call of ``B`` sequences of the longest
length would: items past a shorter sequence's last Q tile are not valid (every role skips them), and a
persistent CTA's grid-stride share mixes long and short items as the numbering falls. With an order
(:func:`b200c.codegen.work.longest_first`), one CTA of the module's ``b200c_work_order`` kernel reads
``cu_seqlens`` on the GPU (no host synchronisation) and writes the entries (sequence, Q group) sorted by
the K/V tiles their items visit, most first; the attention kernel (its ``item_order`` parameter) takes
the items in that order: a static longest-processing-time order for the serpentine rounds of a persistent
loop, or for the hardware's in-order dispatch of one CTA per item (FlashAttention-3's varlen scheduler sorts
its sequences in a prepare kernel to a similar end, with a dynamic counter). The order decides which CTA computes an item, never what the item computes: the output does not
depend on it.

A call takes the order when (:func:`order_for`): the order is switched on (:func:`enabled`), the call is
varlen, the kernel has the parameter (every build without a block mask), a persistent kernel takes its
items in serpentine rounds (without them CTA ``i`` would take the ``i``-th longest item of every round,
which the host model showed can be worse than no order), its items outnumber the device's SMs (one wave
needs no balance), and the entries fit the kernel's shared memory
(:data:`b200c.codegen.work.ORDER_MAX_ENTRIES`; K/V tile counts above
:data:`b200c.codegen.work.ORDER_MAX_KEY` sort as that count); otherwise the call launches as before, with
no order.

The order is off unless ``B200C_VARLEN_ORDER=1`` is set in the environment (read when a call's launch is
first set up): it was built and tested without a GPU (the model, the stand-in driver, nvcc), and it stays
off by default until a GPU run has checked its kernel and measured its speed
(``tests/gpu/test_work_order_gpu.py``).
"""
from __future__ import annotations

import os

import torch

from ..codegen.work import ORDER_MAX_ENTRIES, ORDER_MAX_KEY, work_order_params

_SPEC = tuple((p.name, p.kind) for p in work_order_params())
THREADS = 1024


class OrderLaunch:
    """What an ordered varlen entry adds per call: the order tensor and the ``b200c_work_order`` launch.

    Attributes:
        entries: int32 values of the order (B * q_groups).
        function: the module's ``b200c_work_order``.
        block: its :class:`~b200c.runtime.params.ParamBlock` (cu_seqlens and the sizes fixed; ``order`` per call).
    """

    __slots__ = ("entries", "function", "block", "order_slot")

    def __init__(self, lk, entries: int, values: dict):
        from .params import ParamBlock

        self.entries = entries
        self.function = lk.work_order
        self.block = ParamBlock(_SPEC, dict(values, order=0))
        self.order_slot = self.block.slot("order")

    def table(self, empty) -> torch.Tensor:
        """The per-call order tensor (``empty(size, stride, dtype)``; written by the kernel)."""
        return empty((self.entries,), (1,), torch.int32)


def enabled() -> bool:
    """Whether varlen calls take the item order: ``B200C_VARLEN_ORDER=1`` in the environment (module docstring)."""
    return os.environ.get("B200C_VARLEN_ORDER", "0") == "1"


def order_for(lk, info, problem, pack: bool, causal: bool, num_work: int, cu_seqlens) -> OrderLaunch | None:
    """The order launch of a varlen entry, or None where the call launches without one (module docstring).

    Args:
        lk: the LoadedKernel (``lk.work_order``: the module's kernel, None in a module without it).
        info: the kernel's :class:`~b200c.codegen.launch.LaunchInfo` (persistent, its work decomposition).
        problem: the validated varlen Problem (``seq_q`` / ``seq_kv``: the longest lengths).
        pack: the items pack heads. causal: bottom-right causal.
        num_work: the call's work items. cu_seqlens: the two prefix sums' device pointers.
    """
    work = info.work()
    if (not enabled() or getattr(lk, "work_order", None) is None or not work.item_order
            or (info.persistent and not work.serpentine) or num_work <= lk.num_sms):
        return None
    entries = problem.batch * work.q_groups(problem.seq_q, pack)
    if not 0 < entries <= ORDER_MAX_ENTRIES:
        return None
    max_key = min(max(1, -(-problem.seq_kv // work.block_n)), ORDER_MAX_KEY)
    return OrderLaunch(lk, entries, {"cu_seqlens_q": cu_seqlens[0], "cu_seqlens_k": cu_seqlens[1],
                                     "batch": problem.batch, "seq_q": problem.seq_q, "causal": int(causal),
                                     "pack_heads": int(pack), "max_key": max_key})


__all__ = ["OrderLaunch", "enabled", "order_for", "THREADS"]

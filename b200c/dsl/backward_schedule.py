"""The declarative schedule of an attention backward kernel (issue 31; no kernel is generated from it yet).

The backward is K/V-stationary (FlashAttention-2 §3.2, FA3, FA4): a work item keeps one K/V tile of
``block_n`` keys of one (sequence, K/V head) in the CTA and walks the Q tiles of ``block_m`` rows that see
it (:mod:`b200c.codegen.backward_work`). Per visit it recomputes S = Q K^T and P from the forward's LSE,
accumulates dV += P^T dO and dK += dS^T Q on chip and adds dQ = dS K into an FP32 buffer shared by every
K/V tile of the sequence. :func:`b200c.codegen.backward_plan.plan_backward` checks a schedule's shared
memory and register budgets on a target.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

HEAD_DIMS = (64, 128, 256)
DQ_REDUCTIONS = ("atomic", "deterministic")


@dataclass(frozen=True)
class BackwardSchedule:
    """One backward-kernel schedule (all fields immutable; :meth:`validate` checks them).

    Knobs:

    * ``head_dim``: 64, 128 or 256 (``b200c`` sets it to the inputs' D).
    * ``block_n``: keys of the work item's K/V tile, kept in shared memory for the whole item; dK and dV of
      these keys accumulate in the consumer warpgroups' registers. A multiple of 16, 16..256.
    * ``block_m``: query rows per visit (the Q, dO, LSE and D tile loaded per step). A multiple of 16,
      16..256.
    * ``q_stages``: depth of the Q / dO / LSE / D ring (1 or 2): with 2 the producer loads visit i + 1 while
      the consumers compute visit i.
    * ``mma_warpgroups``: consumer warpgroups (1..3) that split the K/V tile's keys (dK, dV rows) and issue
      the GEMMs; one more warpgroup holds the producer (TMA loads) and the dQ writer.
    * ``dq_reduction``: ``"atomic"``: dQ of each visit is added into the FP32 dQ buffer in any order (FP32
      addition order varies from run to run: results differ in the last bits); ``"deterministic"``: the
      K/V tiles of a sequence add in K/V tile order (a semaphore per (sequence, head, Q tile),
      :meth:`b200c.codegen.backward_work.BackwardDecomposition.dq_contributors`).
    * ``consumer_regs`` / ``producer_regs``: ``setmaxnreg`` budgets (24..256, multiples of 8) of the consumer
      warpgroups and the producer warpgroup; their sum over the CTA must fit the launch allocation.
    * ``persistent``: grid of one CTA per SM looping over work items (longest first under causal) instead
      of one CTA per item. Planned, not generated yet: the sm90a backward kernel refuses ``True`` with
      BackwardNotSupportedError (``b200c compile`` / ``check``, and the calls that run the backward).

    :func:`b200c.codegen.backward_plan.plan_backward` checks the knobs and the budgets; which tile shapes the
    sm90a kernel generator covers (the consumer warpgroups' split of dK / dV and dQ) is checked when the kernel
    is generated, so a schedule can plan and still be refused there, with the shapes to use instead.
    """

    name: str = "backward_custom"
    head_dim: int = 128
    block_m: int = 64
    block_n: int = 128
    q_stages: int = 2
    mma_warpgroups: int = 2
    dq_reduction: str = "atomic"
    consumer_regs: int = 240
    producer_regs: int = 24
    persistent: bool = False

    def replace(self, **changes) -> "BackwardSchedule":
        """A copy with ``changes`` applied.

        Raises:
            ScheduleError: a name in ``changes`` is not a field.
        """
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    def validate(self) -> "BackwardSchedule":
        """Check every knob's type and range (hardware budgets: :func:`b200c.codegen.backward_plan.plan_backward`);
        return ``self``.

        Raises:
            ScheduleError: the first invalid knob, with the allowed values.
        """
        from ..errors import ScheduleError

        def fail(msg: str):
            raise ScheduleError(f"backward schedule {self.name!r}: {msg}")

        if not isinstance(self.name, str) or not self.name:
            fail(f"name must be a non-empty str, got {self.name!r}")
        for knob in ("head_dim", "block_m", "block_n", "q_stages", "mma_warpgroups", "consumer_regs",
                     "producer_regs"):
            v = getattr(self, knob)
            if isinstance(v, bool) or not isinstance(v, int):
                fail(f"{knob} must be an int, got {v!r}")
        if self.head_dim not in HEAD_DIMS:
            fail(f"head_dim = {self.head_dim}; b200c kernels support {', '.join(map(str, HEAD_DIMS))}")
        for knob in ("block_m", "block_n"):
            v = getattr(self, knob)
            if not 16 <= v <= 256 or v % 16:
                fail(f"{knob} = {v}; use a multiple of 16 from 16 to 256 (the MMA's row granularity)")
        if self.q_stages not in (1, 2):
            fail(f"q_stages = {self.q_stages}; use 1 or 2 (the Q / dO ring's depth)")
        if not 1 <= self.mma_warpgroups <= 3:
            fail(f"mma_warpgroups = {self.mma_warpgroups}; use 1, 2 or 3 (plus one producer warpgroup: at most "
                 "4 warpgroups per CTA)")
        if self.block_n % (64 * self.mma_warpgroups) and self.head_dim % (64 * self.mma_warpgroups):
            # dK, dV (block_n x D) are the M side of their wgmmas (M = 64 per warpgroup): split along the keys
            # (keys as M), or computed transposed (FA3's dKV_swapAB: D as M, its 64 x 80 tiles at head dim 256)
            fail(f"dK and dV ({self.block_n} x {self.head_dim}) do not split over {self.mma_warpgroups} warpgroups in "
                 f"wgmma's 64-row M blocks: block_n or head_dim must be a multiple of {64 * self.mma_warpgroups}")
        if self.dq_reduction not in DQ_REDUCTIONS:
            fail(f"dq_reduction = {self.dq_reduction!r}; use one of {', '.join(map(repr, DQ_REDUCTIONS))}")
        for knob in ("consumer_regs", "producer_regs"):
            v = getattr(self, knob)
            if not 24 <= v <= 256 or v % 8:
                fail(f"{knob} = {v}; setmaxnreg takes 24..256 in steps of 8")
        if not isinstance(self.persistent, bool):
            fail(f"persistent must be a bool, got {self.persistent!r}")
        return self

    def to_json(self) -> str:
        """Canonical JSON of every field (sorted keys)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "BackwardSchedule":
        """Inverse of :meth:`to_json`.

        Raises:
            ScheduleError: unknown field names.
        """
        data = json.loads(text)
        if not isinstance(data, dict):
            from ..errors import ScheduleError

            raise ScheduleError(f"a backward schedule's JSON is an object of knobs, got {type(data).__name__}")
        _check_names(data)
        return cls(**data)


_NAMES = frozenset(f.name for f in dataclasses.fields(BackwardSchedule))


def _check_names(names) -> None:
    unknown = sorted(set(names) - _NAMES)
    if unknown:
        import difflib

        from ..errors import ScheduleError

        close = difflib.get_close_matches(unknown[0], _NAMES, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(sorted(_NAMES))}"
        raise ScheduleError(f"BackwardSchedule has no field {unknown[0]!r}; {hint}")


def _with_name_check(init):
    import functools

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if not _NAMES.issuperset(kwargs):  # a ScheduleError with a hint, not dataclass __init__'s bare TypeError
            _check_names(kwargs)
        init(self, *args, **kwargs)

    return __init__


BackwardSchedule.__init__ = _with_name_check(BackwardSchedule.__init__)

__all__ = ["BackwardSchedule", "HEAD_DIMS", "DQ_REDUCTIONS"]

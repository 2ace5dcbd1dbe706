"""Shared state of one lowering (plan -> KernelIR): the plan, the schedule's
knobs, the wait-site table and phase-bit bookkeeping. Backends build each warp
role's program in ``b200c/codegen/<backend>/roles/<role>.py`` (the load role is
shared: ``b200c/codegen/roles/load.py``)."""
from __future__ import annotations

from .ir import PhaseRef, Stamp
from .launch import WaitSite
from .plan import Plan

# wait-site ids start at a fixed base per role, so a change in one role does
# not renumber the waits of the others in neighbouring generated kernels
SITE_BASE = {"cta": 0, "softmax": 100, "correction": 200, "load": 300, "mma": 400, "consumer": 500}


class Lowering:
    """Shared state of one lowering.

    Attributes:
        plan: the layout (every offset, column, barrier and warp comes from it).
        s: the schedule, for behaviour knobs only (issue order, exp2 mode, ...).
        sites: the bounded-wait sites created so far.
        profile: a profiling build: roles stamp their steps (:meth:`span`).
        events: profiling: ``(name, edge)`` per event id, in id order.
    """

    def __init__(self, plan: Plan, schedule, profile: bool = False):
        self.plan = plan
        self.s = schedule
        self.sites: list = []
        self.profile = profile
        self.events: list = []

    def stamp(self, name: str, edge: str) -> Stamp:
        """A :class:`Stamp` of span ``name`` (``edge`` ``B`` or ``E``), with an event id."""
        key = (name, edge)
        if key not in self.events:
            self.events.append(key)
        return Stamp(self.events.index(key), name, edge)

    def span(self, name: str, nodes) -> tuple:
        """``nodes`` between a begin and an end stamp of ``name`` in a
        profiling build, else ``nodes`` unchanged (a tuple)."""
        nodes = tuple(nodes)
        if not self.profile:
            return nodes
        return (self.stamp(name, "B"), *nodes, self.stamp(name, "E"))

    def site(self, role: str, barrier: str) -> int:
        """A new wait-site id for ``role`` waiting on ``barrier``."""
        sid = SITE_BASE[role] + sum(1 for w in self.sites if w.role == role)
        self.sites.append(WaitSite(sid, role, barrier))
        return sid

    def phase(self, var: str, index: str | None = None, count: int = 1, constant_index: bool = False) -> PhaseRef:
        """PhaseRef of a barrier family with ``count`` instances: scalar for
        one instance, else the schedule's phase storage (array/bitmask; see
        :meth:`storage`)."""
        return PhaseRef(var, index if count > 1 else None, self.storage(count, constant_index))

    def storage(self, count: int, constant_index: bool = False) -> str:
        """Phase-bit storage of a barrier family with ``count`` instances.

        Families indexed at run time (the K/V ring slot) use the schedule's
        ``phase_tracking`` (minor 17: a runtime-indexed array lands in local
        memory, a bitmask stays in a register); families indexed only by
        compile-time constants (a Q stage in an unrolled role) are an array of
        registers either way, which is the cheaper form."""
        if count == 1:
            return "scalar"
        return "array" if constant_index else self.s.phase_tracking

    def role_spec(self, name: str):
        """The plan's (first) RoleSpec of warp role ``name``."""
        return self.plan.role_specs(name)[0]

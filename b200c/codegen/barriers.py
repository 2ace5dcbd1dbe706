"""Typed mbarrier protocol: who arrives on each barrier, how often per phase,
and who waits (Gluon-style ready/empty pairs carry their count and phase).

Every barrier of a plan is a :class:`Barrier`; its ``arrivals`` (the count it
is initialised with, PTX ISA 9.7.13.15.11 ``mbarrier.init``) is the sum of its
producers' arrivals per phase. :mod:`b200c.codegen.verify` checks the warp
roles' programs against these declarations in every ``generate()``.
"""
from __future__ import annotations

import msgspec


class Party(msgspec.Struct, frozen=True):
    """One producer of a barrier.

    Attributes:
        role: warp-role name (``load``, ``mma``, ``softmax``, ``correction``, ``cta``).
        how: ``"warp"`` (each warp of the role arrives once: ``__syncwarp`` +
            lane 0), ``"thread"`` (each arriving thread once: one elected thread, or
            every thread of the role), ``"expect_tx"`` (one
            thread's ``arrive.expect_tx`` whose TMA copies complete the bytes),
            ``"commit"`` (``tcgen05.commit``: the hardware arrives once the
            issuer's earlier MMAs completed).
        arrivals: arrivals this party contributes to every phase.
        same_q_stage: the role has one instance per Q stage and instance q
            arrives on barrier instance q only.
        per_instance: the role has several instances (one per Q stage) and
            every one of them arrives on every barrier instance; ``arrivals``
            is the sum over the role's instances (sm_90a: each consumer
            warpgroup releases a shared K/V ring slot).
    """

    role: str
    how: str
    arrivals: int
    same_q_stage: bool = False
    per_instance: bool = False


class Barrier(msgspec.Struct, frozen=True):
    """A family of ``count`` mbarriers (index ``first`` .. ``first + count - 1``).

    Attributes:
        name: e.g. ``kv_full``; the generated constant is ``BAR_KV_FULL``.
        first: index of instance 0 in the CTA's barrier array.
        count: instances (ring slots or Q stages).
        producers: who arrives, and how many times per phase.
        consumers: warp roles that wait on it.
        starts_free: an "empty"/"free" barrier: its waiters' first wait passes
            at once (the resource starts free; their phase bit starts at 1).
        arrive_by, wait_by: one-line descriptions for the generated file.
        note: blog chapter or remark.
        ring: the instances are ring slots that every instance of a waiting
            role waits on (sm_90a consumers share the K/V ring); otherwise a
            role with one instance per Q stage waits on its own instance.
    """

    name: str
    first: int
    count: int
    producers: tuple
    consumers: tuple
    starts_free: bool = False
    arrive_by: str = ""
    wait_by: str = ""
    note: str = ""
    ring: bool = False

    @property
    def arrivals(self) -> int:
        """Arrival count per phase (the ``mbarrier.init`` count)."""
        return sum(p.arrivals for p in self.producers)

    @property
    def const(self) -> str:
        """Name of the generated index constant, e.g. ``BAR_KV_FULL``."""
        return f"BAR_{self.name.upper()}"

    def party(self, role: str):
        """The producer entry of ``role``, or None."""
        return next((p for p in self.producers if p.role == role), None)


class BarrierTable:
    """Builder of a plan's barrier families, in index order."""

    def __init__(self):
        self._items: list = []
        self._next = 0

    def add(self, name: str, count: int, producers, consumers, *, starts_free: bool = False,
            arrive_by: str = "", wait_by: str = "", note: str = "", ring: bool = False) -> Barrier:
        """Append a family of ``count`` barriers; returns it."""
        b = Barrier(name, self._next, count, tuple(producers), tuple(consumers), starts_free, arrive_by, wait_by, note,
                    ring)
        self._items.append(b)
        self._next += count
        return b

    def freeze(self) -> tuple:
        """The families as a tuple (index order)."""
        return tuple(self._items)


class NamedBarrier(msgspec.Struct, frozen=True):
    """A family of ``count`` hardware named barriers (``bar.sync`` /
    ``bar.arrive``, PTX ISA 9.7.13.1), ids ``first_id`` .. ``first_id + count - 1``
    (id 0 is ``__syncthreads``).

    Unlike an mbarrier it has no phase bit: a generation completes when
    ``threads`` threads arrived (``bar.arrive`` adds its warps' threads and
    goes on; ``bar.sync`` adds them and blocks until the generation completes).

    Attributes:
        name: e.g. ``turn`` (the generated constant is ``NBAR_TURN``).
        first_id: hardware id of instance 0.
        count: instances.
        threads: threads per generation (the instruction's thread count).
        syncers: roles that ``bar.sync`` on it.
        arrivers: roles that only ``bar.arrive`` on it.
        note: what it orders (FA3 section, ...).
    """

    name: str
    first_id: int
    count: int
    threads: int
    syncers: tuple
    arrivers: tuple = ()
    note: str = ""

    @property
    def const(self) -> str:
        """Name of the generated id constant, e.g. ``NBAR_TURN``."""
        return f"NBAR_{self.name.upper()}"

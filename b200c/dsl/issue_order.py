"""The MMA warp's issue order: parsing, dependency checks, prologue/epilogue.

Blog chapter 7: the steady state of the K/V loop is a short list of MMA steps,
``QqK(i+d)`` (S_q = Q_q K(i+d)^T) and ``PqV(i+d)`` (O_q += P_q V(i+d)). The
compiler peels the first QKs into a prologue and drains the last PVs in an
epilogue, and rejects any order that breaks a dependency:

* PV(j) before softmax can have produced P(j) (its QK(j) comes later);
* QK(j) overwriting S/P of its Q stage while PV(j-1) is still pending (only
  where P lives in the storage of S: tcgen05's TMEM columns; on sm_90a S and P
  are separate registers and ``p_aliases_s=False`` drops this rule);
* a step needing a K/V token that cannot be loaded because its ring slot is
  refilled only after the last consumer of the previous token, issued later.
  Tokens are loaded in the order of their first use.

The grammar is ``issue_order.lark``; :mod:`b200c.dsl.order_syntax` parses it
(with lark, its results cached so a known text is not parsed again).
"""
from __future__ import annotations

import msgspec

from ..errors import IssueOrderError
from .order_syntax import parse_steps

MAX_KV_STAGES = 8  # the validation limit of kv_stages
# the dependency check replays the order for these K/V tile counts: 1 and 2 cover
# the peeled prologue/epilogue alone and touching, 3 and 5 a steady state of 1 and 3
# iterations (enough for a ring of up to MAX_KV_STAGES tokens to wrap)
CHECKED_TILE_COUNTS = (1, 2, 3, 5)


class Step(msgspec.Struct, frozen=True):
    """One MMA step of the steady-state iteration ``i``.

    Attributes:
        kind: ``"QK"`` or ``"PV"``.
        q: Q stage.
        offset: the step works on K/V tile ``j = i + offset`` (normalized so
            the smallest offset of the order is 0).
        source: the step as the user wrote it, for messages.
    """

    kind: str
    q: int
    offset: int
    source: str

    def at(self, j: int) -> str:
        """The step on concrete K/V tile j, e.g. ``Q0K(3)``."""
        return f"Q{self.q}K({j})" if self.kind == "QK" else f"P{self.q}V({j})"

    def label(self, index: str) -> str:
        """The step on a named K/V tile, e.g. ``label("0")`` -> ``Q0K(0)``."""
        return f"Q{self.q}K({index})" if self.kind == "QK" else f"P{self.q}V({index})"

    @property
    def symbolic(self) -> str:
        """The step with a normalized symbolic index, e.g. ``Q0K(i+1)``."""
        idx = "i" if self.offset == 0 else f"i+{self.offset}"
        return f"Q{self.q}K({idx})" if self.kind == "QK" else f"P{self.q}V({idx})"


class IssueOrder(msgspec.Struct, frozen=True):
    """A checked issue order with its derived structure.

    Attributes:
        text: the order as written.
        steps: steady-state steps in issue order.
        lead: largest offset (0: no prologue/epilogue; 1: QK one iteration
            ahead of PV, blog ch.7).
        kv_tokens / kv_stages: the K/V ring the order was checked against.
        p_aliases_s: whether the order was checked with P sharing S's storage.
    """

    text: str
    steps: tuple
    lead: int
    kv_tokens: str
    kv_stages: int
    p_aliases_s: bool = True

    def prologue(self) -> tuple:
        """Steps issued before the loop, all on K/V tile 0 (``lead`` == 1)."""
        return tuple(s for s in self.steps if s.offset == 1) if self.lead else ()

    def epilogue(self) -> tuple:
        """Steps issued after the loop, all on the last K/V tile."""
        return tuple(s for s in self.steps if s.offset == 0) if self.lead else ()

    def _rank(self, s: Step) -> tuple:
        # execution rank of step s for one tile j: iteration j - offset, then position
        return (-s.offset, self.steps.index(s))

    def consumers(self, token: str) -> tuple:
        """Steps reading token kind ``"K"``, ``"V"`` or ``"KV"`` (paired)."""
        if token == "KV":
            return self.steps
        return tuple(s for s in self.steps if s.kind == ("QK" if token == "K" else "PV"))

    def token_of(self, s: Step) -> str:
        """Token kind a step reads: ``K``/``V`` (separate) or ``KV`` (paired)."""
        if self.kv_tokens == "paired":
            return "KV"
        return "K" if s.kind == "QK" else "V"

    def is_first_consumer(self, s: Step) -> bool:
        """Whether ``s`` is the first reader of its token (waits ``kv_full``)."""
        return min(self.consumers(self.token_of(s)), key=self._rank) == s

    def is_last_consumer(self, s: Step) -> bool:
        """Whether ``s`` is the last reader of its token (commits ``kv_empty``)."""
        return max(self.consumers(self.token_of(s)), key=self._rank) == s

    def is_last_qk(self, s: Step) -> bool:
        """Whether ``s`` is the last QK of a K/V tile (releases Q on the last tile)."""
        return s.kind == "QK" and max(self.consumers("K"), key=self._rank) == s

    def stage_steps(self, q: int) -> tuple:
        """The steps of Q stage ``q`` in issue order (what one sm_90a consumer
        warpgroup issues per iteration)."""
        return tuple(s for s in self.steps if s.q == q)

    def load_sequence(self) -> tuple:
        """K/V tokens in the order of their first use, as (prologue, steady,
        epilogue) tuples of ``(token, offset)``; token is ``"K"``, ``"V"`` or
        ``"KV"`` (paired). Steady entries are on K/V tile ``i + offset`` of
        iteration ``i``; prologue entries on tile 0 and epilogue entries on
        the last tile (their offset is 0). The load warp issues its TMA loads
        in this order, so ring slots are taken in the order consumers use them."""
        firsts = [s for s in self.steps if self.is_first_consumer(s)]
        steady = tuple((self.token_of(s), s.offset) for s in firsts)
        if not self.lead:
            return (), steady, ()
        pro = tuple((self.token_of(s), 0) for s in firsts if s.offset == 1)
        epi = tuple((self.token_of(s), 0) for s in firsts if s.offset == 0)
        return pro, steady, epi

    def unrolled(self, n: int) -> list:
        """The full MMA sequence for ``n`` K/V tiles: list of (step, j)."""
        seq = []
        for i in range(-self.lead, n):
            for s in self.steps:
                j = i + s.offset
                if 0 <= j < n:
                    seq.append((s, j))
        return seq


def default_order(q_stages: int) -> str:
    """The non-pipelined order of blog ch.5: all QKs of tile i, then all PVs."""
    return " ".join([f"Q{q}K(i)" for q in range(q_stages)] + [f"P{q}V(i)" for q in range(q_stages)])


def parse_issue_order(text: str, q_stages: int, kv_tokens: str, kv_stages: int,
                      p_aliases_s: bool = True) -> IssueOrder:
    """Parse and check an issue order against the schedule's stages and ring.

    Args:
        text: e.g. ``"P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)"``.
        q_stages: Q stages of the schedule.
        kv_tokens: ``"paired"`` or ``"separate"``.
        kv_stages: ring slots.
        p_aliases_s: P is stored over S (tcgen05): a QK of tile j needs the
            PV of tile j-1 issued before it. False for sm_90a.

    Raises:
        IssueOrderError: syntax error, unknown or missing stage, duplicate
            step, lead over one iteration, or a broken dependency; the message
            names the offending step.
    """
    raw = parse_steps(text)

    for kind, q, _, src in raw:
        if q >= q_stages:
            raise IssueOrderError(
                f"issue order step {src} names Q stage {q}, but the schedule has "
                f"q_stages={q_stages} (stages 0..{q_stages - 1}); set issue_order for {q_stages} stage(s) "
                f"or None for the default"
            )
    seen = {}
    for kind, q, _, src in raw:
        key = (kind, q)
        if key in seen:
            raise IssueOrderError(
                f"issue order step {src} repeats {seen[key]}: each Q stage issues exactly one QK "
                f"and one PV per K/V iteration; remove one of them from issue_order"
            )
        seen[key] = src
    for q in range(q_stages):
        for kind, name in (("QK", f"Q{q}K"), ("PV", f"P{q}V")):
            if (kind, q) not in seen:
                raise IssueOrderError(
                    f"issue order {text!r} never issues {name}: every Q stage needs one QK and "
                    f"one PV per K/V iteration; set issue_order for q_stages={q_stages} (e.g. "
                    f"{default_order(q_stages)!r}) or None for the default"
                )
    base = min(off for _, _, off, _ in raw)
    steps = tuple(Step(kind, q, off - base, src) for kind, q, off, src in raw)
    lead = max(s.offset for s in steps)
    if lead > 1:
        far = max(steps, key=lambda s: s.offset)
        raise IssueOrderError(
            f"issue order step {far.source} runs {lead} K/V iterations ahead of the earliest step; "
            f"each Q stage has one S/P buffer in TMEM, so a QK may lead its PV by at most one iteration; "
            f"use the offsets (i) and (i+1) only in issue_order"
        )
    order = IssueOrder(text, steps, lead, kv_tokens, kv_stages, p_aliases_s)
    for n in CHECKED_TILE_COUNTS:
        _check_dependencies(order, n)
    return order


def _token_key(order: IssueOrder, s: Step, j: int) -> tuple:
    return (order.token_of(s), j)


def _token_label(key: tuple) -> str:
    kind, j = key
    return f"{'K/V' if kind == 'KV' else kind}({j})"


def _check_dependencies(order: IssueOrder, n: int, report: bool = True) -> bool:
    seq = order.unrolled(n)
    slots = order.kv_stages
    # tokens are loaded (and take ring slots) in the order of their first use
    ids: dict = {}
    for s, j in seq:
        ids.setdefault(_token_key(order, s, j), len(ids))
    names = {v: _token_label(k) for k, v in ids.items()}
    last_use = {}
    for pos, (s, j) in enumerate(seq):
        last_use[ids[_token_key(order, s, j)]] = pos
    qk_done, pv_done = set(), set()
    released = set()
    loaded = -1
    for pos, (s, j) in enumerate(seq):
        here = f"{s.source} (K/V tile {j} of {n})"
        if s.kind == "PV" and (s.q, j) not in qk_done:
            if not report:
                return False
            raise IssueOrderError(
                f"issue order step {here}: PV before softmax can have produced P{s.q}({j}) — "
                f"softmax turns S{s.q}({j}) into P only after Q{s.q}K({j}), which this order issues later; "
                f"in issue_order, issue Q{s.q}K before P{s.q}V of the same K/V tile"
            )
        if order.p_aliases_s and s.kind == "QK" and j >= 1 and (s.q, j - 1) not in pv_done:
            if not report:
                return False
            raise IssueOrderError(
                f"issue order step {here} overwrites S{s.q}/P{s.q} in TMEM while P{s.q}V({j - 1}), "
                f"which reads P{s.q}({j - 1}) from those columns, is still pending: S/P of a Q stage is "
                f"reused only after its PV is issued; in issue_order, issue P{s.q}V(i) before Q{s.q}K(i+1)"
            )
        t = ids[_token_key(order, s, j)]
        while loaded < t:
            u = loaded + 1
            if u >= slots and (u - slots) not in released:
                if not report:
                    return False
                prev = u - slots
                holder_pos = last_use[prev]
                hs, hj = seq[holder_pos]
                need = next((k for k in range(slots + 1, MAX_KV_STAGES + 1) if _ring_ok(order, k)), None)
                hint = f"use kv_stages >= {need}" if need else "reorder the steps"
                raise IssueOrderError(
                    f"issue order step {here} needs {names[u]} in K/V slot {u % slots}, "
                    f"but that slot would be refilled before its last consumer: it still holds "
                    f"{names[prev]} until {hs.at(hj)}, which the order issues later, so the "
                    f"K/V token can never be loaded (deadlock with kv_stages={slots}); {hint}"
                )
            loaded = u
        (qk_done if s.kind == "QK" else pv_done).add((s.q, j))
        if last_use[t] == pos:
            released.add(t)
    return True


def _ring_ok(order: IssueOrder, slots: int) -> bool:
    trial = IssueOrder(order.text, order.steps, order.lead, order.kv_tokens, slots, order.p_aliases_s)
    try:
        return all(_check_dependencies(trial, n, report=False) for n in CHECKED_TILE_COUNTS)
    except IssueOrderError:
        return False

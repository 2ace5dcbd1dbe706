"""The picture's content as plain data: lanes (one per warp-role instance),
steps in issue order, barrier edges, and the SMEM/TMEM maps.

It is derived from the plan and the kernel IR only: the barrier-protocol
model of :mod:`b200c.codegen.verify` runs the warp roles' programs for a few
K/V tiles (:func:`b200c.codegen.verify.protocol_trace`), and this module

* cuts each role instance's barrier events into **steps**: a step is the
  events of one MMA step / K/V token scope (``Q0K(i+1)``, ``token V(j)``) or of
  one loop iteration; a wait that follows an arrival, or a second wait on the
  same barrier family, starts a new step (the correction warps' rescale of O0
  and of O1 are two steps of one iteration);
* draws an **edge** from each step whose arrival completed a barrier phase to
  each step whose wait returned for that phase (``bar.arrive`` to ``bar.sync``
  for named barriers); the first wait on a "starts free" barrier has none;
* places the steps in **columns**: a step sits right of its lane's previous
  step and right of every step it waits for (a dependency / issue-order
  diagram, not a timing-accurate one).

No matplotlib here: :mod:`b200c.draw.render` draws a :class:`Timeline`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import DrawError

MAX_ITERATIONS = 6
LANE_ORDER = ("cta", "load", "mma", "consumer", "softmax", "correction")


@dataclass(frozen=True)
class Lane:
    """One horizontal lane: a warp-role instance.

    Attributes:
        key: the role instance, e.g. ``"softmax[1]"``, ``"mma"``.
        role: warp-role name; q_stage: its Q stage (None for single roles).
        title: the lane's caption, e.g. ``"softmax Q stage 1 (warps 4-7)"``.
    """

    key: str
    role: str
    q_stage: int | None
    title: str


@dataclass(frozen=True)
class Step:
    """One box: consecutive barrier events of one lane.

    Attributes:
        id: index into :attr:`Timeline.steps`.
        lane: :attr:`Lane.key` of its lane.
        label: e.g. ``"Q0K(1)"``, ``"load V(0)"``, ``"softmax S1(2)"``.
        column: x position (0-based).
        waits, arrives: the barriers it waits on / arrives at (``name[i]``).
    """

    id: int
    lane: str
    label: str
    column: int
    waits: tuple
    arrives: tuple


@dataclass(frozen=True)
class Edge:
    """A barrier hand-off from the step that arrived to the step that waited.

    Attributes:
        src, dst: :attr:`Step.id` of the arriving and the waiting step.
        barrier: barrier family name (``s_full``); instance: index inside it.
        phase: the phase (named barriers: the generation) handed over.
        named: a hardware named barrier (``bar.arrive`` -> ``bar.sync``).
    """

    src: int
    dst: int
    barrier: str
    instance: int
    phase: int
    named: bool = False

    @property
    def label(self) -> str:
        """``name[instance]`` as the plan writes it."""
        return f"{self.barrier}[{self.instance}]"


@dataclass(frozen=True)
class SmemBlock:
    """One SMEM region: name, byte offset, size, note."""

    name: str
    offset: int
    size: int
    note: str


@dataclass(frozen=True)
class TmemBlock:
    """One TMEM buffer of one Q stage: ``S0``, ``P1``, ``O0`` ...; columns
    ``first`` .. ``first + ncols - 1`` (P aliases the S columns it overlaps)."""

    name: str
    kind: str
    q_stage: int
    first: int
    ncols: int
    note: str


@dataclass(frozen=True)
class Timeline:
    """Everything ``b200c draw`` shows for one schedule.

    Attributes:
        name, blog_stage, backend: from the plan.
        iterations: K/V tiles the roles ran for.
        lanes, steps, edges: the dependency diagram.
        smem, smem_bytes, smem_limit: the SMEM map (bytes).
        tmem, tmem_alloc, tmem_limit: the TMEM map (columns; empty on sm_90a).
        issue_order: the MMA warp's steady-state issue order, or ``""``.
        unit: what ``iterations`` counts, for the title (the backward's pictures: visits of a K/V tile).
        registers: the TMEM panel's text where there is no TMEM (``""``: the forward's S, P and O).
    """

    name: str
    blog_stage: int
    backend: str
    iterations: int
    lanes: tuple
    steps: tuple
    edges: tuple
    smem: tuple
    smem_bytes: int
    smem_limit: int
    tmem: tuple
    tmem_alloc: int
    tmem_limit: int
    issue_order: str = ""
    unit: str = "K/V tiles, one work item"
    registers: str = ""

    @property
    def columns(self) -> int:
        """Number of step columns."""
        return 1 + max((s.column for s in self.steps), default=-1)

    def lane_steps(self, key: str) -> tuple:
        """The steps of lane ``key`` in issue order."""
        return tuple(s for s in self.steps if s.lane == key)


def build_timeline(schedule, target: str = "auto", iterations: int = 3) -> Timeline:
    """Plan and lower ``schedule`` for ``target`` and build its :class:`Timeline`.

    Args:
        schedule: a :class:`b200c.Schedule`.
        target: ``"auto"`` (the schedule's own native target: sm90a for the
            Hopper examples, else sm100a), ``"sm100a"``, ``"emulate"`` or ``"sm90a"``.
        iterations: K/V tiles to unroll, 1 .. 6.

    Raises:
        DrawError: ``iterations`` out of range.
        TargetError, ScheduleError, ResourceError, IssueOrderError: as
            :func:`b200c.codegen.make_plan`; ProtocolError: as :func:`b200c.codegen.lower`.
    """
    from ..codegen import lower
    from ..codegen.targets import AUTO, resolve_or_auto, schedule_target

    _check_iterations(iterations)
    t = resolve_or_auto(target)
    if t == AUTO:
        t = schedule_target(schedule)
    return timeline_from_ir(lower(schedule, target=t), iterations)


def _check_iterations(iterations) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not 1 <= iterations <= MAX_ITERATIONS:
        raise DrawError(f"iterations must be a whole number of K/V tiles from 1 to {MAX_ITERATIONS}, "
                        f"got {iterations!r}")


def timeline_from_ir(ir, iterations: int = 3) -> Timeline:
    """The :class:`Timeline` of a lowered kernel (``b200c.codegen.lower``)
    with ``iterations`` K/V tiles per work item (one work item).

    Raises:
        DrawError: ``iterations`` out of range.
        ProtocolError: the IR's barrier protocol is broken.
    """
    from ..codegen.verify import protocol_trace

    _check_iterations(iterations)
    plan = ir.plan
    events = protocol_trace(ir, iterations, 1)
    groups = _group(events)  # [(proc, role, q, [(seq, event)])]
    lanes = _lanes(plan, groups)
    lane_keys = {ln.key for ln in lanes}
    groups = [g for g in groups if g[0] in lane_keys]
    step_of = {}  # event seq -> group index
    for gi, g in enumerate(groups):
        for seq, _ in g[3]:
            step_of[seq] = gi
    edges = _edges(events, step_of, plan)
    columns = _columns(groups, edges)
    labels = [_label(role, q, evs, iterations, plan) for _, role, q, evs in groups]
    _consumer_labels(groups, edges, labels)
    steps, edges = numbered(groups, edges, columns, lanes, labels)
    issue = plan.issue
    return Timeline(
        name=plan.name, blog_stage=plan.blog_stage, backend=plan.backend, iterations=iterations, lanes=tuple(lanes),
        steps=tuple(steps), edges=edges,
        smem=tuple(SmemBlock(r.name, r.offset, r.size, r.note) for r in plan.smem),
        smem_bytes=plan.smem_bytes, smem_limit=plan.limits.smem_bytes,
        tmem=tuple(TmemBlock(f"{t.kind}{q}", t.kind, q, t.col(q), t.ncols, t.note.format(q=q))
                   for t in sorted(plan.tmem, key=lambda t: "SPO".index(t.kind)) for q in range(plan.q_stages)),
        tmem_alloc=plan.tmem_alloc_cols, tmem_limit=plan.limits.tmem_columns,
        issue_order=" ".join(st.symbolic for st in issue.steps) if issue is not None else "")


def numbered(groups, edges, columns, lanes, labels) -> tuple:
    """``(steps, edges)`` of a picture: the step groups as :class:`Step` s numbered by column, then lane order,
    and the edges between group indices renumbered to those ids."""
    keys = [ln.key for ln in lanes]
    order = sorted(range(len(groups)), key=lambda gi: (columns[gi], keys.index(groups[gi][0])))
    new_id = {gi: n for n, gi in enumerate(order)}
    steps = tuple(Step(new_id[gi], groups[gi][0], labels[gi], columns[gi], _refs(groups[gi][3], ("wait", "nsync")),
                       _refs(groups[gi][3], ("arrive", "narrive"))) for gi in order)
    return steps, tuple(Edge(new_id[e.src], new_id[e.dst], e.barrier, e.instance, e.phase, e.named) for e in edges)


# ---- steps ----------------------------------------------------------------------
_LOOP = re.compile(r"^(\w+)=(-?\d+)$")


def _context(path: tuple):
    """(loop variables, innermost scope note) of an event's IR path."""
    loops, scope = [], None
    for el in path[1:]:
        m = _LOOP.match(el)
        if m:
            loops.append((m[1], int(m[2])))
        elif el.startswith("if ") or el.startswith("work item "):
            continue
        else:
            scope = el
    return tuple(loops), scope


def _group(events) -> list:
    """Cut each role instance's events into steps (see the module docstring)."""
    per_proc: dict = {}
    for seq, e in enumerate(events):
        per_proc.setdefault(e.proc, (e.role, e.q, []))[2].append((seq, e))
    out = []
    for proc, (role, q, evs) in per_proc.items():
        steps = []  # [key, [(seq, e)]]
        for seq, e in evs:
            key = _context(e.path)
            cur = steps[-1] if steps else None
            if cur is None or cur[0] != key:
                steps.append([key, [(seq, e)]])
                continue
            kinds = [x.kind for _, x in cur[1]]
            if e.kind == "wait" and ("arrive" in kinds or "narrive" in kinds or
                                     any(x.kind == "wait" and x.barrier == e.barrier for _, x in cur[1])):
                steps.append([key, [(seq, e)]])
            else:
                cur[1].append((seq, e))
        # waits before a loop or scope (the MMA warp's wait for Q) belong to the first step that uses them
        merged = []
        for i, (key, grp) in enumerate(steps):
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if (key == ((), None) and nxt is not None and nxt[0] != key
                    and all(x.kind in ("wait", "nsync") for _, x in grp)):
                nxt[1][:0] = grp
                continue
            merged.append(grp)
        out += [(proc, role, q, grp) for grp in merged]
    return out


def _refs(evs, kinds) -> tuple:
    seen = []
    for _, e in evs:
        if e.kind in kinds:
            r = f"{e.barrier}[{e.instance}]"
            if r not in seen:
                seen.append(r)
    return tuple(seen)


def _lanes(plan, groups) -> list:
    used = {g[0] for g in groups}
    lanes = []
    for r in plan.roles:
        key = r.name if r.q_stage is None else f"{r.name}[{r.q_stage}]"
        if key not in used or any(ln.key == key for ln in lanes):
            continue
        warps = f"warp {r.warps[0]}" if len(r.warps) == 1 else f"warps {r.warps[0]}-{r.warps[-1]}"
        q = f" Q stage {r.q_stage}" if r.q_stage is not None else ""
        lanes.append(Lane(key, r.name, r.q_stage, f"{r.name}{q}\n({warps})"))
    rank = {name: i for i, name in enumerate(LANE_ORDER)}
    lanes.sort(key=lambda ln: (rank.get(ln.role, len(rank)), ln.q_stage if ln.q_stage is not None else -1))
    return lanes


def _edges(events, step_of, plan) -> list:
    """Edges between step groups (ids are group indices here)."""
    arrivals: dict = {}
    for seq, e in enumerate(events):
        if e.kind in ("arrive", "narrive"):
            arrivals.setdefault((e.kind == "narrive", e.barrier, e.instance, e.phase), []).append(seq)
    out, seen = [], set()
    for seq, e in enumerate(events):
        if e.kind not in ("wait", "nsync") or e.phase < 0 or seq not in step_of:
            continue
        named = e.kind == "nsync"
        for src_seq in arrivals.get((named, e.barrier, e.instance, e.phase), ()):
            if src_seq not in step_of or events[src_seq].proc == e.proc and named:
                continue
            src, dst = step_of[src_seq], step_of[seq]
            key = (src, dst, e.barrier, e.instance)
            if src != dst and key not in seen:
                seen.add(key)
                out.append(Edge(src, dst, e.barrier, e.instance, e.phase, named))
    return out


def _columns(groups, edges) -> list:
    """Longest-path columns: after the lane's previous step and every producer
    step (a cycle between two steps is broken at the later-starting one)."""
    n = len(groups)
    preds = [set() for _ in range(n)]
    last_in_lane = {}
    for gi, g in enumerate(groups):
        if g[0] in last_in_lane:
            preds[gi].add(last_in_lane[g[0]])
        last_in_lane[g[0]] = gi
    for e in edges:
        preds[e.dst].add(e.src)
    first_seq = [g[3][0][0] for g in groups]
    col = [None] * n
    remaining = set(range(n))
    while remaining:
        ready = [gi for gi in remaining if all(col[p] is not None for p in preds[gi])]
        if not ready:  # a cycle: place the earliest-starting step whose lane predecessor is placed
            lane_ok = [gi for gi in remaining
                       if all(col[p] is not None for p in preds[gi] if groups[p][0] == groups[gi][0])]
            ready = [min(lane_ok or remaining, key=lambda gi: first_seq[gi])]
        for gi in sorted(ready, key=lambda gi: first_seq[gi]):
            col[gi] = 1 + max((col[p] for p in preds[gi] if col[p] is not None), default=-1)
            remaining.discard(gi)
    return col


# ---- labels ---------------------------------------------------------------------
_PAREN = re.compile(r"\(([^()]+)\)")
_BLOG = re.compile(r"\s*\((?:blog|published|FA3|the rest)[^)]*\)")
_TAIL = re.compile(r",\s+[a-z]+\s.*$")
_CTA = {"q_full": "load Q", "kv_full": "load K/V", "s_full": "QK", "pv_done": "softmax, PV"}


def _subst(text: str, env: dict) -> str:
    from ..codegen.cexpr import evaluate

    def one(m):
        try:
            return f"({int(evaluate(m[1], env))})"
        except Exception:  # noqa: BLE001 - not an index expression: keep the text
            return m[0]

    return _PAREN.sub(one, text)


def _q_of(evs, plan):
    """The Q stage a step of a single role serves (from the per-Q-stage barriers it touches)."""
    if plan.q_stages == 1:
        return "0"
    qs = sorted({e.instance for _, e in evs if e.kind in ("wait", "arrive") and not e.barrier.startswith(("kv_", "q_"))
                 and plan.barrier(e.barrier).count == plan.q_stages})
    return "".join(map(str, qs))


def _consumer_labels(groups, edges, labels) -> None:
    """sm_90a consumer warpgroups issue their own wgmma: name each step by the
    K/V tokens it waits for (``load K(1)`` -> ``Q0K(1)``, ``load V(0)`` -> ``P0V(0)``)."""
    for gi, (_, role, q, _) in enumerate(groups):
        if role != "consumer":
            continue
        names = []
        for e in edges:
            if e.dst == gi and e.barrier == "kv_full" and not e.named:
                m = re.match(r"^load ([KV])(\(.*\))$", labels[e.src])
                if m:
                    name = f"Q{q}K{m[2]}" if m[1] == "K" else f"P{q}V{m[2]}"
                    if name not in names:
                        names.append(name)
        if names:
            labels[gi] = " ".join(names)


def _label(role, q, evs, iterations, plan) -> str:
    ctx = [_context(e.path) for _, e in evs]
    loops, scope = next((c for c in ctx if c != ((), None)), ctx[0])
    if all(e.kind == "narrive" for _, e in evs):
        return "bar.arrive " + ", ".join(_refs(evs, ("narrive",)))
    env = {"n": iterations, "c_n_kv": iterations, "w_n_kv": iterations}
    env.update(dict(loops))
    if scope is not None:
        head, _, tail = scope.partition(":")
        text = tail if head.strip() in ("prologue", "epilogue") and tail else head
        text = _TAIL.sub("", _BLOG.sub("", text)).strip()
        text = _subst(text, env)
        if role == "load":
            text = re.sub(r"Q rows of (?:consumer|Q stage) (\d+)", r"Q\1", re.sub(r"^token\s+", "", text))
            text = f"load {text}"
        return text
    it = f"({loops[-1][1]})" if loops else ""
    if role == "softmax":
        return f"softmax S{q}{it}" if loops else (f"epilogue O{q}" if any(e.barrier == "pv_done" for _, e in evs)
                                                  else f"row sum {q}")
    if role == "correction":
        qq = _q_of(evs, plan)
        return f"rescale O{qq}{it}" if loops else f"epilogue O{qq}"
    if role == "load":
        return "load Q" if any(e.barrier == "q_full" for _, e in evs) else f"load{it}"
    if role == "consumer":
        return f"Q{q}K, softmax, P{q}V{it}" if loops else f"epilogue O{q}"
    if role == "cta":
        arr = [e.barrier for _, e in evs if e.kind == "arrive"]
        if arr:
            return _CTA.get(arr[0], arr[0]) + (it if arr[0] != "q_full" else "")
        waited = [e.barrier for _, e in evs if e.kind == "wait"]
        return f"rescale O{it}" if "pv_done" in waited else f"QK, softmax, PV{it}"
    return f"{role}{'' if q is None else q}{it}"

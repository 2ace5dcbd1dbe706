"""Barrier-protocol verifier: runs in every ``generate()``, before any code is
emitted.

It executes the warp roles' IR programs together, as a model of the CTA: every
role instance (softmax warpgroup of Q stage q, correction, load, MMA) is an
interpreter over its IR; ``Wait`` blocks until the barrier's phase with that
parity has completed, ``Arrive``/``Commit`` count arrivals, ``arrive.expect_tx``
and TMA loads count transaction bytes (PTX ISA 9.7.13.15: a phase completes
when the pending arrival count and the transaction count both reach zero;
``try_wait.parity(p)`` succeeds once the phase of parity ``p`` completed).
It runs the problem sizes (K/V tiles per work item, work items per persistent
CTA) that :func:`problem_sizes` chooses from the plan's own rings (every slot
of the K/V ring and every once-per-tile or once-per-item phase wraps twice,
sizes around each ring's length), under several interleavings of the roles,
and checks, against the plan's typed protocol (:mod:`b200c.codegen.barriers`):

* every barrier the IR names is in the plan, every plan barrier is waited on
  and arrived on, and only by the roles the plan names;
* each completed phase got exactly the arrivals the plan declares, from the
  declared producers (a dropped or doubled arrive shows here);
* every wait returns at the phase it is meant for: a consumer's k-th wait after
  phase k completed, the k-th wait on a "starts free" barrier after phase k-1
  (a wrong initial parity or a missing flip shows here);
* no phase completes before every waiter saw the previous one (back-pressure);
* no run deadlocks, and at the end every completed phase was waited for.

Named barriers (``bar.sync``/``bar.arrive``, sm_90a's ping-pong turns) are
modelled too: a generation completes when the plan's thread count arrived;
``bar.sync`` blocks until then; only the plan's roles may use each one, and a
generation may not receive more threads than its count. A role that takes one
turn too many or too few deadlocks the model. (The wgmma async groups of
sm_90a, ``wgmma.wait_group``, order registers inside one warpgroup and are not
a barrier protocol; they are not modelled here.)

For sm_100a IR it first checks the tcgen05 memory model statically: which
instruction needs which ``tcgen05.wait::ld/st``, ``tcgen05.fence::before/
after_thread_sync``, ``tcgen05.commit`` or ``fence.proxy.async``
(:mod:`b200c.codegen.verify_tcgen05`).

A violation raises :class:`b200c.ProtocolError` naming the barrier, the role
and the step (the IR path to the node, with loop indices). An IR that passed
once (same content, same verifier code) is not simulated again: its verdict is
kept in process and in the on-disk compile cache (:mod:`b200c.codegen.verdicts`).

:func:`protocol_trace` runs the same model once and returns what happened, in
order: each completed wait (with the phase it returned for), each arrival
(with the phase it counted towards) and each named-barrier arrive/sync.
``b200c draw`` builds its picture from that trace.
"""
from __future__ import annotations

import random
from collections import Counter
import msgspec

from ..errors import ProtocolError
from .cexpr import evaluate
from .ir import (Arrive, AsyncArrive, Assign, Decl, If, KernelIR, Loop, NamedBarArrive, NamedBarSync, PhaseDecl,
                 RingAdvance, Scope, Single, TmaLoadTile, TxLoad, Wait, WorkLoop)

# interleavings of the roles; the problem sizes come from the plan's rings (:func:`problem_sizes`)
POLICIES = ("in_order", "reverse", "random")


class _Proc(msgspec.Struct):
    """One role instance being executed."""

    name: str
    role: str
    q: int | None
    warps: int
    gen: object = None
    waiting: tuple | None = None  # (barrier index, parity, Wait node, path)
    nwaiting: tuple | None = None  # (named barrier id, generation, path): blocked in bar.sync
    done: bool = False
    waits: Counter = msgspec.field(default_factory=Counter)  # barrier index -> completed waits
    last_wait: dict = msgspec.field(default_factory=dict)  # barrier index -> IR path of the last completed wait
    trace: list | None = None  # the events ``gen`` produced, when recording them


class _Bar(msgspec.Struct):
    """State of one mbarrier instance."""

    spec: object
    instance: int
    pending: int
    tx: int = 0
    completed: int = 0
    contrib: dict = msgspec.field(default_factory=dict)  # proc name -> arrivals this phase
    last: tuple = ()  # (proc name, IR path) of the last arrival, formatted by last_step only for messages
    label: str = ""  # e.g. ``kv_full[1]``
    arrivals: int = 0  # spec.arrivals (the count per phase)

    @property
    def last_step(self) -> str:
        """``role NAME at PATH`` of the last arrival ("" before any)."""
        return f"role {self.last[0]} at {' > '.join(self.last[1])}" if self.last else ""


class _NamedBar(msgspec.Struct):
    """State of one hardware named barrier."""

    spec: object
    instance: int
    count: int = 0  # threads arrived in the current generation
    generation: int = 0  # completed generations
    last: tuple = ()  # (proc name, IR path) of the last arrival

    @property
    def last_step(self) -> str:
        """``role NAME at PATH`` of the last arrival ("" before any)."""
        return f"role {self.last[0]} at {' > '.join(self.last[1])}" if self.last else ""


class _Model:
    """The CTA for one problem size. ``traces``: every role instance's events
    from an earlier run of the same IR and size that ended without a violation
    (a role's events depend only on its own program and the size, not on the
    interleaving), replayed instead of interpreting the IR again; without them
    the events are interpreted and recorded (:meth:`traces`)."""

    def __init__(self, ir: KernelIR, n_kv: int, num_work: int, traces: list | None = None):
        self.ir = ir
        self.plan = ir.plan
        self.n_kv = n_kv
        self.num_work = num_work
        self.bars = {}
        self.by_name = {b.name: b for b in self.plan.barriers}
        for b in self.plan.barriers:
            for i in range(b.count):
                self.bars[b.first + i] = _Bar(b, i, b.arrivals, label=f"{b.name}[{i}]" if b.count > 1 else b.name,
                                              arrivals=b.arrivals)
        self.nbars = {}  # hardware id -> _NamedBar
        self.nby_name = {b.name: b for b in self.plan.named_barriers}
        for b in self.plan.named_barriers:
            for i in range(b.count):
                self.nbars[b.first_id + i] = _NamedBar(b, i)
        t = self.plan.tile
        self.consts = dict(KV_STAGES=self.plan.kv_stages, Q_STAGES=self.plan.q_stages, BLOCK_M=t.block_m,
                           BLOCK_N=t.block_n, HEAD_DIM=t.head_dim, TILE_BYTES=t.q_tile_bytes,
                           KV_TILE_BYTES=t.k_tile_bytes, KV_SLOT_BYTES=self.plan.kv_slot_bytes, w_n_kv=n_kv,
                           c_n_kv=n_kv, c_num_work=num_work, c_smem=0,
                           w_n_full=n_kv // 2)  # the masked-tile loop runs the tail: both loops are modelled
        # SMEM offsets, for address declarations the roles make (their values do not matter here)
        self.consts.update({f"SMEM_{r.name.upper()}": r.offset for r in self.plan.smem})
        self.consts.setdefault("SMEM_Q", self.consts.get("SMEM_Q0", 0))
        self.consts.setdefault("SMEM_KV", self.consts.get("SMEM_KV0", 0))
        self.observer = None  # protocol_trace: called with each TraceEvent
        self.procs = []
        for r in ir.roles:
            insts = r.instances or ((None, r.warps),)
            for q, warps in insts:
                name = r.name if q is None else f"{r.name}[{q}]"
                p = _Proc(name, r.name, q, len(warps))
                if traces is not None:
                    p.gen = iter(traces[len(self.procs)])
                else:
                    env = dict(self.consts)
                    if q is not None:
                        env["q"] = q
                    p.gen = self._run(r.body, env, p, [name], False)
                    p.trace = []
                self.procs.append(p)
        self._waiter_cache = {}  # barrier index -> its waiting role instances
        self._want_cache = {}  # barrier index -> arrivals per role instance per phase (from the plan)
        self._party_cache = {}  # (barrier name, role) -> Party or None

    def traces(self) -> list:
        """Each role instance's recorded events (after a run that ended without a violation)."""
        return [p.trace for p in self.procs]

    # ---- errors --------------------------------------------------------------
    def fail(self, msg: str):
        raise ProtocolError(f"barrier protocol of kernel {self.plan.name!r} (K/V tiles per work item {self.n_kv}, "
                            f"work items {self.num_work}): {msg}")

    # ---- the interpreter ------------------------------------------------------
    def _eval(self, text, env, path, what):
        try:
            return int(evaluate(text, env))
        except Exception as e:  # noqa: BLE001 - report where
            self.fail(f"cannot evaluate {what} {text!r} at {' > '.join(path)}: {type(e).__name__}: {e}")

    def _bar_index(self, name, index, env, path, proc):
        spec = self.by_name.get(name)
        if spec is None:
            self.fail(f"role {proc.name} uses barrier {name!r}, which the plan does not have "
                      f"(plan barriers: {', '.join(self.by_name)}) at {' > '.join(path)}")
        i = 0 if index is None else self._eval(index, env, path, f"index of barrier {name}")
        if not 0 <= i < spec.count:
            self.fail(f"role {proc.name} indexes barrier {name}[{i}] of {spec.count} at {' > '.join(path)}")
        return spec.first + i

    def _nbar_id(self, name, index, env, path, proc):
        spec = self.nby_name.get(name)
        if spec is None:
            self.fail(f"role {proc.name} uses named barrier {name!r}, which the plan does not have at "
                      f"{' > '.join(path)}")
        i = 0 if index is None else self._eval(index, env, path, f"index of named barrier {name}")
        if not 0 <= i < spec.count:
            self.fail(f"role {proc.name} indexes named barrier {name}[{i}] of {spec.count} at {' > '.join(path)}")
        return spec.first_id + i

    def _run(self, nodes, env, proc, path, single):
        for n in nodes:
            t = type(n)
            if t is NamedBarSync or t is NamedBarArrive:
                nid = self._nbar_id(n.barrier, n.index, env, path, proc)
                yield ("nsync" if t is NamedBarSync else "narrive", nid, tuple(path) + (n.describe(),))
            elif t is RingAdvance:
                stages = self._eval(n.stages, env, path, "ring size")
                env[n.slot] += 1
                if env[n.slot] == stages:
                    env[n.slot] = 0
                    env[n.phase] ^= 1
            elif t is Wait:
                idx = self._bar_index(n.barrier, n.index, env, path, proc)
                ph = n.phase
                if ph.storage == "value":
                    parity = self._eval(ph.var, env, path, "phase parity") & 1
                elif ph.storage == "scalar":
                    parity = env[ph.var] & 1
                else:
                    bit = self._eval(ph.index, env, path, f"phase index of {ph.var}")
                    parity = env[ph.var][bit] & 1 if ph.storage == "array" else (env[ph.var] >> bit) & 1
                yield ("wait", idx, parity, n, tuple(path))
                if ph.storage == "value":
                    pass  # a ring position: RingAdvance moves it
                elif ph.storage == "scalar":
                    env[ph.var] ^= 1
                elif ph.storage == "array":
                    env[ph.var][bit] ^= 1
                else:
                    env[ph.var] ^= 1 << bit
            elif isinstance(n, Arrive):
                idx = self._bar_index(n.barrier, n.index, env, path, proc)
                if n.by == "warp":
                    count, how = proc.warps, "warp"
                else:
                    count, how = (1 if single else 32 * proc.warps), "thread"
                tx = 0
                if n.tx_bytes:
                    tx, how = self._eval(n.tx_bytes, env, path, "expect_tx bytes"), "expect_tx"
                yield ("arrive", idx, count, tx, how, tuple(path) + (n.describe(),))
            elif isinstance(n, AsyncArrive):
                idx = self._bar_index(n.barrier, n.index, env, path, proc)
                count = 1 if single else 32 * proc.warps
                yield ("arrive", idx, count, 0, "commit", tuple(path) + (n.describe(),))
            elif t is TmaLoadTile:
                idx = self._bar_index(n.barrier, n.index, env, path, proc)
                yield ("tx", idx, self.plan.tile.tile_bytes(n.tensor))
            elif isinstance(n, TxLoad):
                idx = self._bar_index(n.barrier, n.index, env, path, proc)
                yield ("tx", idx, self._eval(n.tx_bytes, env, path, "copy bytes"))
            elif t is Loop:
                lo = self._eval(n.start, env, path, "loop start")
                hi = self._eval(n.stop, env, path, "loop bound")
                for v in range(lo, hi):
                    env[n.var] = v
                    yield from self._run(n.body, env, proc, path + [f"{n.var}={v}"], single)
            elif t is If:
                if self._eval(n.cond, env, path, "condition"):
                    yield from self._run(n.body, env, proc, path + [f"if {n.cond}"], single)
            elif t is Single:
                yield from self._run(n.body, env, proc, path, True)
            elif isinstance(n, WorkLoop):
                items = range(self.num_work) if n.persistent else range(1)
                for w in items:
                    env["work"] = w
                    env["w_q_tile"] = w * self.plan.q_stages
                    yield from self._run(n.body, env, proc, path + [f"work item {w}"], single)
            elif t is Scope:
                yield from self._run(n.body, env, proc, path + [n.note], single)
            elif t is Decl:
                if "int" in n.ctype and not n.array:
                    env[n.name] = self._eval(n.model or n.init, env, path, f"initial value of {n.name}")
            elif t is Assign:
                if n.target in env:
                    env[n.target] = self._eval(n.expr, env, path, f"value of {n.target}")
            elif t is PhaseDecl:
                if n.storage == "array":
                    env[n.var] = [n.init] * n.count
                elif n.storage == "bitmask":
                    env[n.var] = (2 ** n.count - 1) if n.init else 0
                else:
                    env[n.var] = n.init
            elif n.children():
                yield from self._run(n.children(), env, proc, path, single)

    # ---- barrier semantics ----------------------------------------------------
    def _waiters(self, bar: _Bar):
        key = bar.spec.first + bar.instance
        ws = self._waiter_cache.get(key)
        if ws is None:
            spec = bar.spec
            ws = self._waiter_cache[key] = [p for p in self.procs if p.role in spec.consumers
                                            and (p.q is None or spec.ring or p.q == bar.instance)]
        return ws

    def _expected_at_return(self, bar: _Bar, k: int) -> int:
        return k if bar.spec.starts_free else k + 1

    def _satisfied(self, proc) -> bool:
        idx, parity, _, _ = proc.waiting
        return self.bars[idx].completed % 2 != parity

    def _finish_wait(self, proc):
        idx, parity, node, path = proc.waiting
        bar = self.bars[idx]
        k = proc.waits[idx]
        want = self._expected_at_return(bar, k)
        name = bar.label
        if bar.completed < want:
            self.fail(f"role {proc.name} passes its wait #{k} on barrier {name} with parity {parity} before phase "
                      f"{want - 1} completed ({bar.completed} phases completed): wrong phase parity, at "
                      f"{' > '.join(path)}")
        if bar.completed > want:
            self.fail(f"role {proc.name} waits (#{k}, parity {parity}) on barrier {name} for phase {want - 1}, but "
                      f"{bar.completed} phases completed: it missed a phase, at {' > '.join(path)}")
        proc.waits[idx] += 1
        proc.last_wait[idx] = path  # joined with " > " for a message
        proc.waiting = None
        if self.observer is not None:
            self.observer(TraceEvent("wait", proc.name, proc.role, proc.q, bar.spec.name, bar.instance, want - 1,
                                     tuple(path)))

    def _arrive(self, proc, idx, count, tx, how, step):
        bar = self.bars[idx]
        spec = bar.spec
        key = (spec.name, proc.role)
        party = self._party_cache.get(key, self)
        if party is self:
            party = self._party_cache[key] = spec.party(proc.role)
        if (party is None or (party.same_q_stage and proc.q != bar.instance) or party.how != how
                or count > bar.pending):
            self._bad_arrive(proc, bar, party, count, how, step)
        if self.observer is not None:
            self.observer(TraceEvent("arrive", proc.name, proc.role, proc.q, spec.name, bar.instance, bar.completed,
                                     tuple(step[:-1])))
        bar.pending -= count
        bar.tx += tx
        contrib = bar.contrib
        contrib[proc.name] = contrib.get(proc.name, 0) + count
        bar.last = (proc.name, step)
        if not bar.pending and not bar.tx:
            self._maybe_complete(bar)

    def _bad_arrive(self, proc, bar, party, count, how, step):
        spec = bar.spec
        name = bar.label
        where = " > ".join(step)
        if party is None:
            self.fail(f"role {proc.name} arrives on barrier {name}, whose producers are "
                      f"{', '.join(p.role for p in spec.producers)} in the plan, at {where}")
        if party.same_q_stage and proc.q != bar.instance:
            self.fail(f"role {proc.name} arrives on barrier {name}: the plan has Q stage {bar.instance}'s "
                      f"{party.role} warps arrive there, at {where}")
        if party.how != how:
            self.fail(f"role {proc.name} arrives on barrier {name} by {how}; the plan says by {party.how}, at {where}")
        if count > bar.pending:
            self.fail(f"role {proc.name} arrives {count} time(s) on barrier {name} with {bar.pending} arrival(s) "
                      f"left in phase {bar.completed} (count {spec.arrivals}): too many arrivals, at {where}")

    def _tx(self, idx, nbytes):
        bar = self.bars[idx]
        bar.tx -= nbytes
        self._maybe_complete(bar)

    def _maybe_complete(self, bar: _Bar):
        if bar.pending or bar.tx:
            return
        spec = bar.spec
        name = bar.label
        key = spec.first + bar.instance
        cached = self._want_cache.get(key)
        if cached is None:
            want = self._want(bar)
            cached = self._want_cache[key] = (dict(want), want)
        plain, want = cached
        # a plain dict compare first; Counter's (missing counts as 0) decides when they differ
        if bar.contrib != plain and Counter(bar.contrib) != want:
            got = ", ".join(f"{k} {v}" for k, v in sorted(bar.contrib.items()))
            exp = ", ".join(f"{k} {v}" for k, v in sorted(want.items()))
            self.fail(f"barrier {name} completed phase {bar.completed} with arrivals from {got}; the plan "
                      f"declares {exp} per phase (last arrival: {bar.last_step})")
        k = bar.completed
        need = k + 1 if spec.starts_free else k
        for w in self._waiters(bar):
            if w.waits[key] < need:
                self.fail(f"barrier {name} completed phase {k} before role {w.name} waited for phase "
                          f"{need - 1 if not spec.starts_free else k}: a producer ran ahead of its consumer "
                          f"(missing back-pressure), last arrival: {bar.last_step}")
        bar.completed += 1
        bar.pending = bar.arrivals
        bar.contrib = {}

    def _want(self, bar: _Bar) -> Counter:
        """Arrivals per role instance that one phase of ``bar`` must get (from the plan)."""
        spec = bar.spec
        name = bar.label
        want = Counter()
        for p in spec.producers:
            procs = [x for x in self.procs if x.role == p.role and (not p.same_q_stage or x.q == bar.instance)]
            if p.per_instance and procs and p.arrivals % len(procs) == 0:
                for x in procs:
                    want[x.name] += p.arrivals // len(procs)
                continue
            if len(procs) != 1:
                self.fail(f"barrier {name}: the plan names producer role {p.role}, which has {len(procs)} matching "
                          f"instances in the kernel")
            want[procs[0].name] += p.arrivals
        return want

    def _named(self, proc, kind, nid, step):
        nb = self.nbars[nid]
        spec = nb.spec
        name = f"{spec.name}[{nb.instance}]" if spec.count > 1 else spec.name
        where = " > ".join(step)
        allowed = spec.syncers if kind == "nsync" else tuple(spec.syncers) + tuple(spec.arrivers)
        if proc.role not in allowed:
            what = "bar.sync" if kind == "nsync" else "bar.arrive"
            self.fail(f"role {proc.name} executes {what} on named barrier {name}, which the plan gives to "
                      f"{', '.join(allowed)}, at {where}")
        threads = 32 * proc.warps
        if nb.count + threads > spec.threads:
            self.fail(f"role {proc.name} adds {threads} threads to named barrier {name}, whose generation "
                      f"{nb.generation} already has {nb.count} of {spec.threads}: too many threads (a turn taken "
                      f"twice?), at {where}; previous: {nb.last_step}")
        nb.count += threads
        nb.last = (proc.name, step)
        gen = nb.generation
        if self.observer is not None:
            self.observer(TraceEvent(kind, proc.name, proc.role, proc.q, spec.name, nb.instance, gen,
                                     tuple(step[:-1])))
        if nb.count == spec.threads:
            nb.count = 0
            nb.generation += 1
        if kind == "nsync" and nb.generation == gen:
            proc.nwaiting = (nid, gen, step)

    def _blocked(self, proc) -> bool:
        if proc.nwaiting is not None:
            nid, gen, _ = proc.nwaiting
            if self.nbars[nid].generation > gen:
                proc.nwaiting = None
                return False
            return True
        return proc.waiting is not None and not self._satisfied(proc)

    # ---- scheduling -----------------------------------------------------------
    def _step(self, proc, rng):
        """Run ``proc`` until it blocks or ends (random policy: maybe stop after an arrive)."""
        trace = proc.trace
        while True:
            try:
                ev = next(proc.gen)
            except StopIteration:
                proc.done = True
                return
            if trace is not None:
                trace.append(ev)
            kind = ev[0]
            if kind in ("nsync", "narrive"):
                self._named(proc, kind, ev[1], ev[2])
                if proc.nwaiting is not None:
                    return
                if rng is not None and rng.random() < 0.3:
                    return
                continue
            if kind == "wait":
                proc.waiting = ev[1:]
                if self._satisfied(proc):
                    self._finish_wait(proc)
                    if rng is not None and rng.random() < 0.3:
                        return
                    continue
                return
            if kind == "arrive":
                self._arrive(proc, *ev[1:])
            else:
                self._tx(*ev[1:])
            if rng is not None and rng.random() < 0.3:
                return

    def run(self, policy: str, seed: int = 0):
        rng = random.Random(seed) if policy == "random" else None
        order = list(self.procs) if policy != "reverse" else list(reversed(self.procs))
        while True:
            order = [p for p in order if not p.done]  # the live ones, in policy order
            if not order:
                break
            ready = [p for p in order if not self._blocked(p)]
            if not ready:
                stuck = []
                for p in order:
                    if p.nwaiting is not None:
                        nid, gen, path = p.nwaiting
                        nb = self.nbars[nid]
                        name = f"{nb.spec.name}[{nb.instance}]" if nb.spec.count > 1 else nb.spec.name
                        stuck.append(f"role {p.name} in bar.sync on named barrier {name} (generation {gen}, "
                                     f"{nb.count} of {nb.spec.threads} threads arrived) at {' > '.join(path)}")
                        continue
                    idx, parity, node, path = p.waiting
                    bar = self.bars[idx]
                    name = f"{bar.spec.name}[{bar.instance}]" if bar.spec.count > 1 else bar.spec.name
                    stuck.append(f"role {p.name} waits on {name} parity {parity} ({bar.completed} phases completed, "
                                 f"{bar.pending} of {bar.spec.arrivals} arrivals missing) at {' > '.join(path)}")
                self.fail("deadlock: " + "; ".join(stuck))
            p = rng.choice(ready) if rng is not None else ready[0]
            if p.waiting is not None:
                self._finish_wait(p)
            self._step(p, rng)
        for idx, bar in self.bars.items():
            name = f"{bar.spec.name}[{bar.instance}]" if bar.spec.count > 1 else bar.spec.name
            if bar.pending != bar.spec.arrivals or bar.tx:
                self.fail(f"barrier {name} ends with a partial phase: {bar.spec.arrivals - bar.pending} of "
                          f"{bar.spec.arrivals} arrivals and {bar.tx} transaction bytes outstanding "
                          f"(last arrival: {bar.last_step})")
            for w in self._waiters(bar):
                if w.waits[idx] < bar.completed:
                    self.fail(f"barrier {name} completed {bar.completed} phases but role {w.name} waited for only "
                              f"{w.waits[idx]}: a phase nobody waited for (an extra arrive?), last arrival: "
                              f"{bar.last_step or 'none'}")
                if w.waits[idx] > bar.completed:
                    producers = ", ".join(p.role for p in bar.spec.producers)
                    self.fail(f"role {w.name} waited {w.waits[idx]} times on barrier {name} (starts free: it reuses "
                              f"what the producers {producers} release) but only {bar.completed} phases completed: "
                              f"a missing arrive; its last wait at {' > '.join(w.last_wait[idx]) if idx in w.last_wait else '?'}")


class TraceEvent(msgspec.Struct, frozen=True):
    """One barrier event of a :func:`protocol_trace` run.

    Attributes:
        kind: ``"wait"`` (an mbarrier wait returned), ``"arrive"`` (an arrival,
            ``tcgen05.commit`` or ``arrive.expect_tx`` on an mbarrier),
            ``"nsync"`` / ``"narrive"`` (``bar.sync`` / ``bar.arrive`` on a
            named barrier).
        proc: the role instance, e.g. ``"softmax[1]"`` or ``"mma"``.
        role: its warp-role name; q: its Q stage (None for single roles).
        barrier: the barrier family name; instance: the index inside it.
        phase: wait: the phase it returned for (-1: the first wait on a
            "starts free" barrier, which no arrival completes); arrive: the
            phase it counts towards; named barriers: the generation.
        path: where in the role's IR it happened: the role instance, then
            ``work item N``, ``var=value`` per enclosing loop, ``if ...`` and
            the notes of enclosing scopes (``Q0K(i+1): ...``), outermost first.
    """

    kind: str
    proc: str
    role: str
    q: int | None
    barrier: str
    instance: int
    phase: int
    path: tuple


def protocol_trace(ir: KernelIR, n_kv: int, num_work: int = 1) -> tuple:
    """Run the barrier-protocol model of ``ir`` once (roles in plan order, each
    until it blocks) with ``n_kv`` K/V tiles per work item and ``num_work``
    work items, and return its :class:`TraceEvent` s in the order they happened.

    Raises:
        ValueError: ``n_kv`` or ``num_work`` below 1.
        ProtocolError: the protocol is broken (as :func:`verify`).
    """
    if n_kv < 1 or num_work < 1:
        raise ValueError(f"protocol_trace needs n_kv >= 1 and num_work >= 1, got {n_kv} and {num_work}")
    events = []
    model = _Model(ir, n_kv, num_work if ir.plan.persistent else 1)
    model.observer = events.append
    model.run("in_order")
    return tuple(events)


def _static_checks(ir: KernelIR):
    plan = ir.plan
    names = {b.name for b in plan.barriers}
    used_wait, used_arrive = {}, {}

    def walk(nodes, role):
        for n in nodes:
            if isinstance(n, Wait):
                used_wait.setdefault(n.barrier, set()).add(role)
            elif isinstance(n, (Arrive, AsyncArrive)):
                used_arrive.setdefault(n.barrier, set()).add(role)
            walk(n.children(), role)

    used_named = {}

    def walk_named(nodes, role):
        for n in nodes:
            if isinstance(n, (NamedBarSync, NamedBarArrive)):
                used_named.setdefault(n.barrier, set()).add(role)
            walk_named(n.children(), role)

    for r in ir.roles:
        walk(r.body, r.name)
        walk_named(r.body, r.name)
    named = {b.name for b in plan.named_barriers}
    for name in sorted(used_named):
        if name not in named:
            raise ProtocolError(f"kernel {plan.name!r}: the IR uses named barrier {name!r}, which the plan does not "
                                f"have")
    for b in plan.named_barriers:
        if b.name not in used_named:
            raise ProtocolError(f"kernel {plan.name!r}: nobody uses named barrier {b.name} (plan: bar.sync by "
                                f"{', '.join(b.syncers)})")
    for name in sorted(set(used_wait) | set(used_arrive)):
        if name not in names:
            raise ProtocolError(f"kernel {plan.name!r}: the IR uses barrier {name!r}, which the plan does not have")
    for b in plan.barriers:
        if b.name not in used_wait:
            raise ProtocolError(f"kernel {plan.name!r}: nobody waits on barrier {b.name} (plan consumers: "
                                f"{', '.join(b.consumers)})")
        if b.name not in used_arrive:
            raise ProtocolError(f"kernel {plan.name!r}: nobody arrives on barrier {b.name} (plan producers: "
                                f"{', '.join(p.role for p in b.producers)})")
        extra = used_wait[b.name] - set(b.consumers)
        if extra:
            raise ProtocolError(f"kernel {plan.name!r}: role {sorted(extra)[0]} waits on barrier {b.name}, whose "
                                f"plan consumers are {', '.join(b.consumers)}")
        missing = set(b.consumers) - used_wait[b.name]
        if missing:
            raise ProtocolError(f"kernel {plan.name!r}: the plan has role {sorted(missing)[0]} wait on barrier "
                                f"{b.name}, but its program never does")
        for p in b.producers:
            if p.role not in used_arrive[b.name]:
                raise ProtocolError(f"kernel {plan.name!r}: the plan has role {p.role} arrive on barrier {b.name} "
                                    f"({p.arrivals} per phase), but its program never does")


def verify(ir: KernelIR, cached: bool = True) -> None:
    """Check the IR's barrier protocol against the plan (see the module docstring).

    An IR that passed before (same content, same verifier code; this process or
    the on-disk compile cache, :mod:`b200c.codegen.verdicts`) is not simulated
    again unless ``cached`` is False; a failing one always is.

    Raises:
        ProtocolError: naming the barrier, the role and the step.
    """
    from . import verdicts

    key = verdicts.ir_key(ir) if cached else None
    if key is not None and verdicts.known_good(key):
        return
    _check(ir)
    if key is not None:
        verdicts.record_good(key)


def ring_sizes(plan) -> tuple:
    """(name, slots, uses per K/V tile) of every ring of barrier phases in ``plan``: the K/V ring
    (``kv_stages`` slots, one token per tile when K and V are paired, two when separate) and each
    barrier family of more than one instance (one use per tile: the Q-stage families)."""
    per_tile = 1 if plan.kv_tokens == "paired" else 2
    rings = [("K/V ring", plan.kv_stages, per_tile)]
    for b in plan.barriers:
        if b.count > 1 and b.name not in ("kv_full", "kv_empty"):
            rings.append((b.name, b.count, 1))
    return tuple(rings)


def problem_sizes(plan) -> tuple:
    """The (K/V tiles per work item, work items per CTA) sizes the verifier simulates for ``plan``.

    Chosen from the plan's own rings (:func:`ring_sizes`), so every legal ``kv_stages`` and token
    mode is covered: for each ring of ``R`` slots used ``u`` times per tile, the tile counts that use
    it ``R - 1``, ``R``, ``R + 1``, ``2R`` and ``2R + 1`` times (every slot's phase wraps twice,
    and an index or parity that wraps one slot early or late meets a slot still in use), plus
    1, 2 and 3 tiles and at least ``2 * kv_stages + 1`` tiles. Persistent CTAs also run 2 and 3 work
    items (a once-per-item phase wraps twice; a ring that goes on across work items starts an item
    mid-ring), and one-tile work items until the K/V ring wrapped twice across items. Sorted small
    first (a broken protocol usually fails on a small size)."""
    tiles = {1, 2, 3, 2 * plan.kv_stages + 1}
    for _, slots, per_tile in ring_sizes(plan):
        for uses in (slots - 1, slots, slots + 1, 2 * slots, 2 * slots + 1):
            if uses >= 1:
                tiles.add(-(-uses // per_tile))  # ceil
    works = (1, 2, 3) if plan.persistent else (1,)
    sizes = {(n, w) for n in tiles for w in works}
    if plan.persistent:
        per_tile = ring_sizes(plan)[0][2]
        sizes.add((1, max(3, -(-(2 * plan.kv_stages + 1) // per_tile))))
    return tuple(sorted(sizes, key=lambda s: (s[0] * s[1], s)))


def _check(ir: KernelIR) -> None:
    _static_checks(ir)
    _tcgen05_checks(ir)
    for n_kv, num_work in problem_sizes(ir.plan):
        traces = None
        for policy in POLICIES:
            m = _Model(ir, n_kv, num_work, traces)
            m.run(policy, seed=n_kv * 31 + num_work)
            if traces is None:
                traces = m.traces()


def _tcgen05_checks(ir: KernelIR) -> None:
    """The tcgen05 memory-model checks (:mod:`b200c.codegen.verify_tcgen05`) of an sm_100a IR."""
    from .verify_tcgen05 import check_tcgen05, uses_tcgen05

    if uses_tcgen05(ir):
        check_tcgen05(ir, _Model)

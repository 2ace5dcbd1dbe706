"""The tcgen05 memory-model checks of the protocol verifier (:mod:`b200c.codegen.verify`): which
asynchronous Blackwell instruction needs which wait or fence, checked on the sm_100a IR before any
code is emitted (the emulation target makes TMEM accesses synchronous, so a missing fence or wait
would pass every run on an H200).

Each role instance's program is followed in program order, as one thread of it (the thread that
runs every ``Single`` body too), for a few problem sizes (loops and conditions evaluated as in
the barrier model). TMEM is tracked per region: ``S``/``P`` of a Q stage (P is packed over S's
columns, one region) and ``O`` of a Q stage. The rules (PTX ISA 9.0 sections):

* **wait::ld** (9.7.16.8.5, 9.7.16.6.4.5): a ``tcgen05.ld`` is asynchronous. Its registers may
  be read before ``tcgen05.wait::ld`` (a true register dependency is honoured, 9.7.16.6.4.5, which
  minor 15's deferred wait uses), but nothing else is ordered: the thread must wait before it
  overwrites loaded TMEM columns (``tcgen05.st`` of P over S) and before the
  ``fence::before_thread_sync`` of a hand-off of those columns (9.7.16.6.4.4).
* **wait::st** (9.7.16.8.5, 9.7.16.6.4.4): a ``tcgen05.st`` is asynchronous; before the hand-off
  of the written columns to another thread (the MMA reads P, overwrites O) the writer waits
  ``tcgen05.wait::st``.
* **fence::before_thread_sync** (9.7.16.11.1, 9.7.16.6.4.4): an mbarrier arrive or a CTA barrier
  that hands TMEM this thread read or wrote (since its last before-fence) to a role that accesses
  the same region needs ``tcgen05.fence::before_thread_sync`` before it (an arrive whose waiters
  touch other regions orders no tcgen05 work and needs none).
* **fence::after_thread_sync** (9.7.16.11.1, 9.7.16.6.4.4): after an mbarrier wait or a CTA
  barrier, the thread's next ``tcgen05`` operation (``ld``, ``st``, ``mma``) comes after a
  ``tcgen05.fence::after_thread_sync`` (which orders it after every earlier synchronizing
  operation of the thread).
* **commit** (9.7.16.12.1, 9.7.16.6.4.2): MMA results reach other threads only through
  ``tcgen05.commit`` to an mbarrier: a plain arrive or barrier after MMAs that write TMEM its
  waiters access, with no commit since, is rejected, and so is an MMA never committed.
* **fence.proxy.async** (9.7.16.6.5): P written to SMEM with ``st.shared`` (generic proxy) is read
  by the MMA through the async proxy: the writers issue ``fence.proxy.async`` before the barrier
  that hands P over. (TMA loads and the MMA are both async proxy, ordered by the mbarrier's
  complete_tx and the after-fence; the epilogue stores O with ``st.global``, no TMA store.)

A violation raises :class:`b200c.ProtocolError` naming the missing instruction, the role, the
step (IR path) and the instruction that needs it.
"""
from __future__ import annotations

import re

from ..errors import ProtocolError
from .cexpr import evaluate
from .ir import (Arrive, AsyncArrive, Assign, Decl, If, KernelIR, Loop, NamedBarArrive, NamedBarSync, PhaseDecl,
                 RingAdvance, Scope, Single, Wait, WorkLoop)

_T5 = "b200c.codegen.tcgen05.ir"
# problem sizes of the walk (K/V tiles per work item, work items): every path through the loops
# (a masked-tile loop that runs 0 or more times, the first tile's and the last tile's branches)
_SIZES = ((1, 1), (2, 1), (3, 1), (3, 2))
_REGION = re.compile(r"TMEM_([SPO])\(([^()]*)\)")


def _nodes(body):
    for n in body:
        yield n
        yield from _nodes(n.children())


def uses_tcgen05(ir: KernelIR) -> bool:
    """Whether ``ir`` is a tcgen05 (sm_100a / emulate) kernel: a role holds a tcgen05 IR node."""
    return any(type(n).__module__ == _T5 for r in ir.roles for n in _nodes(r.body))


class _Thread:
    """What one thread of a role instance has outstanding, in program order."""

    def __init__(self):
        self.ld = {}  # region -> step of a tcgen05.ld not yet waited (wait::ld)
        self.st = {}  # region -> step of a tcgen05.st not yet waited (wait::st)
        self.touched = {}  # region -> step of an ld/st since the last fence::before_thread_sync
        self.mma = {}  # region -> step of an MMA writing it since the last tcgen05.commit
        self.smem = None  # step of a generic-proxy SMEM write of P since the last fence.proxy.async
        self.sync = None  # (what, step) of a wait/barrier since the last fence::after_thread_sync


class _Checker:
    def __init__(self, ir: KernelIR, model):
        from .tcgen05 import ir as t5

        self.t5 = t5
        self.ir = ir
        self.plan = ir.plan
        self.model = model
        self.consumers = {b.name: b.consumers for b in self.plan.barriers}
        self.access = None  # role -> regions its programs access (any instance), from a first walk

    # ---- errors ---------------------------------------------------------------
    def fail(self, proc, path, msg):
        raise ProtocolError(f"tcgen05 memory model of kernel {self.plan.name!r}: role {proc} at "
                            f"{' > '.join(path)}: {msg}")

    # ---- the walk ---------------------------------------------------------------
    def _eval(self, text, env, proc, path, what):
        try:
            return int(evaluate(text, env))
        except Exception as e:  # noqa: BLE001 - report where
            self.fail(proc, path, f"cannot evaluate {what} {text!r}: {type(e).__name__}: {e}")

    def region(self, text, env, proc, path):
        """The TMEM region a column expression names: ``("S", q)`` (S and P) or ``("O", q)``."""
        m = _REGION.search(text or "")
        if m is None:
            return ("?", text)  # an unrecognised TMEM address: conflicts with every region
        kind = "S" if m[1] in "SP" else "O"
        return (kind, self._eval(m[2], env, proc, path, "TMEM column index"))

    def walk(self, nodes, env, proc, path, visit):
        t5 = self.t5
        for n in nodes:
            t = type(n)
            if t is Loop:
                lo = self._eval(n.start, env, proc, path, "loop start")
                hi = self._eval(n.stop, env, proc, path, "loop bound")
                for v in range(lo, hi):
                    env[n.var] = v
                    self.walk(n.body, env, proc, path + [f"{n.var}={v}"], visit)
            elif t is If:
                if self._eval(n.cond, env, proc, path, "condition"):
                    self.walk(n.body, env, proc, path + [f"if {n.cond}"], visit)
            elif isinstance(n, WorkLoop):
                for w in range(self.num_work if n.persistent else 1):
                    env["work"] = w
                    env["w_q_tile"] = w * self.plan.q_stages
                    self.walk(n.body, env, proc, path + [f"work item {w}"], visit)
            elif t is Scope:
                self.walk(n.body, env, proc, path + [n.note], visit)
            elif t is Single:
                self.walk(n.body, env, proc, path, visit)
            elif t is t5.ColumnLoop:
                count = len(range(n.start, n.stop, n.step) if n.step > 0 else range(n.start, n.stop - 1, n.step))
                for k in range(min(count, 2)):  # two iterations show what one leaves for the next
                    self.walk(n.body, env, proc, path + [f"{n.note} (column chunk {k})"], visit)
            elif t is Decl:
                if "int" in n.ctype and not n.array:
                    env[n.name] = self._eval(n.model or n.init, env, proc, path, f"initial value of {n.name}")
            elif t is Assign:
                if n.target in env:
                    env[n.target] = self._eval(n.expr, env, proc, path, f"value of {n.target}")
            elif t is PhaseDecl or t is RingAdvance:
                pass  # phases are the barrier model's business
            elif n.children():
                self.walk(n.children(), env, proc, path, visit)
            else:
                visit(n, env, proc, tuple(path) + (n.describe(),))

    def instances(self, n_kv, num_work):
        """(role, instance name, env) of every role instance for one problem size."""
        self.num_work = num_work
        consts = self.model(self.ir, n_kv, num_work).consts
        for r in self.ir.roles:
            for q, _ in (r.instances or ((None, r.warps),)):
                env = dict(consts)
                if q is not None:
                    env["q"] = q
                yield r, (r.name if q is None else f"{r.name}[{q}]"), env

    # ---- what each node does ----------------------------------------------------
    def effects(self, n, env, proc, path):
        """(kind, regions) of a node's TMEM / SMEM effects: kinds ``ld``, ``st``, ``ldst`` (a
        load-modify-store pass that waits both itself), ``mma``, ``smem`` (generic SMEM write of
        P), ``mma_reads`` (P from TMEM), ``wait_ld``, ``wait_st``; () for none."""
        t5 = self.t5
        t = type(n)
        reg = lambda text: self.region(text, env, proc, path)  # noqa: E731
        if t is t5.RowmaxPass:
            return (("ld", reg(n.s_col)),) + ((("wait_ld", None),) if n.wait_each else ())
        if t is t5.ScoresFromTmem:
            return (("ld", reg(n.s_col)), ("wait_ld", None))  # each re-read is waited in its block
        if t is t5.StoreP:
            return (("st", reg(n.p_col)),) if n.p_col else (("smem", None),)
        if t is t5.TmemWait:
            return ((f"wait_{n.kind}", None),)
        if t is t5.RescaleO:
            # its block waits for its loads (tcgen05.wait::ld) and its stores (::st) before it ends, and
            # each store depends on its own loads' registers
            return (("ldst", reg(n.o_col)), ("wait_ld", None), ("wait_st", None))
        if t is t5.Epilogue:
            return (("ld", reg(n.o_col)), ("wait_ld", None))  # each load of O is waited in its block
        if t is t5.MmaQK:
            return (("mma", reg(n.s_col)),)
        if t is t5.MmaPV:
            return (("mma", reg(n.o_col)),) + ((("mma_reads", reg(n.p_col)),) if n.p_col else ())
        return ()

    def collect(self, n, env, proc, path):
        """First walk: the regions each role accesses."""
        for kind, r in self.effects(n, env, proc, path):
            if r is not None:
                self.access.setdefault(self.role, set()).add(r)

    # ---- the rules ----------------------------------------------------------------
    def conflicts(self, regions, roles):
        """The regions in ``regions`` that a role in ``roles`` accesses too."""
        others = set()
        for role in roles:
            others |= self.access.get(role, set())
        if others and any(k == "?" for k, _ in (*others, *regions)):
            return set(regions)  # an address the checker cannot place conflicts with everything
        return {r for r in regions if r in others}

    def tcgen05_op(self, th, what, proc, path):
        if th.sync is not None:
            sync, where = th.sync
            self.fail(proc, path, f"{what} follows {sync} at {' > '.join(where)} with no "
                      "tcgen05.fence::after_thread_sync in between: the asynchronous tcgen05 operation may "
                      "run ahead of the synchronization (PTX ISA 9.7.16.11.1, 9.7.16.6.4.4); set the wait's "
                      "fence_after")

    def hand_off(self, th, what, roles, fenced, proxy_fenced, proc, path, fix="set the arrive's fence_before"):
        """An arrive / CTA barrier that the roles ``roles`` wait for: the writer-side rules (``fix``:
        what to change when the before-fence is missing)."""
        need = self.conflicts(th.touched, roles)
        label = lambda r: f"{r[0]}{r[1]}" if r[0] != "?" else str(r[1])  # noqa: E731
        for region in sorted(need, key=str):
            if region in th.ld:
                self.fail(proc, path, f"{what} hands TMEM {label(region)} to {', '.join(roles)} while the "
                          f"tcgen05.ld at {' > '.join(th.ld[region])} is not waited: tcgen05.wait::ld missing "
                          "before the hand-off (PTX ISA 9.7.16.6.4.4, 9.7.16.6.4.5)")
            if region in th.st:
                self.fail(proc, path, f"{what} hands TMEM {label(region)} to {', '.join(roles)} while the "
                          f"tcgen05.st at {' > '.join(th.st[region])} is not waited: tcgen05.wait::st missing "
                          "before the hand-off (PTX ISA 9.7.16.6.4.4, 9.7.16.8.5)")
            if not fenced:
                self.fail(proc, path, f"{what} hands TMEM {label(region)}, accessed at "
                          f"{' > '.join(th.touched[region])}, to {', '.join(roles)} with no "
                          f"tcgen05.fence::before_thread_sync before it (PTX ISA 9.7.16.11.1, 9.7.16.6.4.4); {fix}")
        mma = self.conflicts(th.mma, roles)
        if mma:
            region = sorted(mma, key=str)[0]
            self.fail(proc, path, f"{what} would publish the result of the MMA at {' > '.join(th.mma[region])} "
                      f"(TMEM {label(region)}) to {', '.join(roles)}: MMA results reach other threads only "
                      "through tcgen05.commit to an mbarrier (PTX ISA 9.7.16.12.1, 9.7.16.6.4.2); commit first")
        if th.smem is not None and any("mma" in self.kinds.get(r, ()) for r in roles):
            if not proxy_fenced:
                self.fail(proc, path, f"{what} hands P, written to SMEM with st.shared at {' > '.join(th.smem)}, "
                          "to the MMA, which reads it through the async proxy: fence.proxy.async missing before "
                          "it (PTX ISA 9.7.16.6.5)")
            th.smem = None
        if fenced:
            th.touched = {**th.ld, **th.st}  # the fence orders what completed; pending accesses stay

    def check(self, n, env, proc, path):
        """Second walk: apply the rules to one leaf node of thread ``proc``."""
        t5 = self.t5
        th = self.thread
        t = type(n)
        if t is Wait:
            th.sync = None if n.fence_after else (f"the wait on {n.barrier}", path)
            return
        if t is NamedBarSync or t is NamedBarArrive:
            spec = next((b for b in self.plan.named_barriers if b.name == n.barrier), None)
            roles = tuple(spec.syncers) if spec is not None else ()
            self.hand_off(th, f"bar.{'sync' if t is NamedBarSync else 'arrive'} {n.barrier}", roles, False, False,
                          proc, path, "a named barrier of the shared IR carries no tcgen05 fences: hand TMEM over "
                          "through an mbarrier arrive with fence_before")
            if t is NamedBarSync:
                th.sync = (f"bar.sync {n.barrier}", path)
            return
        if t is t5.CtaSync:
            if n.tcgen05_fences:
                th.st = {}  # its tcgen05.wait::st
            self.hand_off(th, "the CTA barrier (bar.sync)", (self.role,), n.tcgen05_fences, n.proxy_fence, proc,
                          path, "set the CtaSync's tcgen05_fences")
            th.sync = None if n.tcgen05_fences else ("the CTA barrier (bar.sync)", path)
            return
        if isinstance(n, Arrive):
            self.hand_off(th, f"the arrive on {n.barrier}", self.consumers.get(n.barrier, ()), n.fence_before,
                          False, proc, path)
            return
        if isinstance(n, AsyncArrive):  # tcgen05.commit: arrives once this thread's MMAs completed
            th.mma = {}
            return
        for kind, region in self.effects(n, env, proc, path):
            what = type(n).__name__
            if kind in ("ld", "st", "ldst", "mma"):
                self.tcgen05_op(th, f"the tcgen05 {'mma' if kind == 'mma' else kind} of {what}", proc, path)
            if kind == "ld":
                th.ld[region] = path
                th.touched[region] = path
            elif kind in ("st", "ldst"):
                if region in th.ld:
                    self.fail(proc, path, f"the tcgen05.st of {what} overwrites TMEM {region[0]}{region[1]}, which "
                              f"the tcgen05.ld at {' > '.join(th.ld[region])} reads and no tcgen05.wait::ld "
                              "completed: an anti-dependency hazard (PTX ISA 9.7.16.6.4.5); wait::ld first")
                if kind == "st":
                    th.st[region] = path
                th.touched[region] = path
            elif kind == "wait_ld":
                th.ld = {}
            elif kind == "wait_st":
                th.st = {}
            elif kind == "mma":
                th.mma[region] = path
            elif kind == "smem":
                th.smem = path

    def run(self):
        self.access = {}
        self.kinds = {}  # role -> kinds of tcgen05 operation it issues
        for n_kv, num_work in _SIZES:
            for r, proc, env in self.instances(n_kv, num_work):
                self.role = r.name
                self.walk(r.body, env, proc, [proc], self.collect)
                for n in _nodes(r.body):
                    if type(n) in (self.t5.MmaQK, self.t5.MmaPV):
                        self.kinds.setdefault(r.name, set()).add("mma")
        for n_kv, num_work in _SIZES:
            if num_work > 1 and not self.plan.persistent:
                continue
            for r, proc, env in self.instances(n_kv, num_work):
                self.role = r.name
                self.thread = th = _Thread()
                self.walk(r.body, env, proc, [proc], self.check)
                if th.mma:
                    where = next(iter(th.mma.values()))
                    self.fail(proc, [proc], f"the MMA at {' > '.join(where)} is never followed by a "
                              "tcgen05.commit: its result reaches no other thread (PTX ISA 9.7.16.12.1)")


def check_tcgen05(ir: KernelIR, model) -> None:
    """Check the tcgen05 fences and waits of an sm_100a kernel IR (see the module docstring); ``model``:
    the protocol verifier's per-thread interpreter (:class:`b200c.codegen.verify._Model`, passed in so
    this module does not import the verifier back).

    Raises:
        ProtocolError: naming the missing instruction (``tcgen05.wait::ld``, ``tcgen05.wait::st``,
            ``tcgen05.fence::before_thread_sync``, ``tcgen05.fence::after_thread_sync``,
            ``tcgen05.commit`` or ``fence.proxy.async``), the role, the step and the instruction
            that needs it.
    """
    _Checker(ir, model).run()

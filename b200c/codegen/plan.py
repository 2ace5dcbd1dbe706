"""Plan: the frozen resource allocation of a schedule.

SMEM layout (offset, size, alignment of each buffer), TMEM column map per Q
stage, barrier table (name, arrival count, who arrives, who waits) and the
warp-role map. Printable with ``str(plan)`` (``b200c compile --emit plan``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..dsl import resources as R
from ..dsl.issue_order import IssueOrder
from ..dsl.schedule import Schedule
from .launch import LaunchInfo


@dataclass(frozen=True)
class SmemBuffer:
    """One SMEM buffer: byte offset from the 1024-aligned base, size, alignment."""

    name: str
    offset: int
    size: int
    align: int
    note: str = ""


@dataclass(frozen=True)
class TmemRegion:
    """TMEM columns of one buffer (all 128 lanes): S/P or O of a Q stage."""

    name: str
    q_stage: int
    col: int
    ncols: int
    note: str = ""


@dataclass(frozen=True)
class BarrierSpec:
    """One mbarrier family: ``count`` instances starting at index ``first``,
    each completing a phase after ``arrivals`` arrivals."""

    name: str
    first: int
    count: int
    arrivals: int
    arrive_by: str
    wait_by: str
    note: str = ""


def smem_layout(s: Schedule) -> tuple:
    """(buffers, total dynamic SMEM bytes) for a schedule.

    Tiles are 1024-B aligned (SW128 pattern repeats every 1024 B, facts §6);
    the total adds 1024 B of slack because the kernel realigns the dynamic SMEM
    base itself.
    """
    bufs = []
    off = 0

    def put(name, size, align, note=""):
        nonlocal off
        off = (off + align - 1) // align * align
        bufs.append(SmemBuffer(name, off, size, align, note))
        off += size

    for q in range(s.q_stages):
        put(f"q{q}", R.TILE_BYTES, 1024, f"Q tile of Q stage {q} (K-major)")
    for k in range(s.kv_stages):
        if s.kv_tokens == "paired":
            note = "K tile then V tile" + (" (P overwrites K, ch.1)" if s.p_storage == "smem" else "")
        else:
            note = "one K or V tile (ring slot, ch.6)"
        put(f"kv{k}", R.kv_slot_bytes(s), 1024, note)
    if s.correction_warps:
        put("stats", R.stats_bytes(s), 16, "per Q stage: 128 rescale factors + 128 rowsums (FP32, ch.12)")
    put("tmem_slot", 16, 16, "TMEM base address written by tcgen05.alloc")
    put("barriers", 8 * sum(b.count for b in _barriers(s)), 8, "mbarriers")
    return tuple(bufs), off + R.SMEM_ALIGN_SLACK


def _barriers(s: Schedule) -> tuple:
    out = []
    idx = 0

    def add(name, count, arrivals, by, wait, note=""):
        nonlocal idx
        out.append(BarrierSpec(name, idx, count, arrivals, by, wait, note))
        idx += count

    if not s.warp_specialized:
        add("q_full", 1, 1, "thread 0 (arrive.expect_tx) + TMA", "all threads")
        add("kv_full", 1, 1, "thread 0 (arrive.expect_tx) + TMA", "all threads")
        add("s_full", 1, 1, "tcgen05.commit after QK", "all threads")
        add("pv_done", 1, 1, "tcgen05.commit after PV", "all threads")
        return tuple(out)
    qn = s.q_stages
    add("q_full", 1, 1, "load warp (arrive.expect_tx) + TMA", "mma warp")
    if s.persistent:
        add("q_free", 1, 1, "tcgen05.commit after the last QK of a work item", "load warp", "ch.14")
    add("kv_full", s.kv_stages, 1, "load warp (arrive.expect_tx) + TMA", "mma warp")
    add("kv_empty", s.kv_stages, 1, "tcgen05.commit after the token's last consumer", "load warp")
    add("s_full", qn, 1, "tcgen05.commit after QqK", "softmax warps of q")
    sm_arrivals = 4
    o_safe = 4 if s.correction_warps else 0
    if s.early_pv_cols:
        add("p_hi_ready", qn, sm_arrivals + o_safe,
            "softmax warps (high P columns)" + (" + correction warps (O safe)" if o_safe else ""),
            "mma warp", "ch.13")
        add("p_lo_ready", qn, sm_arrivals, "softmax warps (low P columns)", "mma warp", "ch.13")
    else:
        add("p_ready", qn, sm_arrivals + o_safe,
            "softmax warps (P ready)" + (" + correction warps (O safe)" if o_safe else ""), "mma warp")
    add("pv_done", qn, 1, "tcgen05.commit after PqV",
        "correction warps" if s.correction_warps else "softmax warps of q")
    if s.correction_warps:
        add("stats_ready", qn, 4, "softmax warps of q (rescale factors)", "correction warps", "ch.12")
        # its own barrier: a fast softmax warp could otherwise arrive for the rowsum before a
        # slow one arrived for the last factor, completing that phase early
        add("rowsum_ready", qn, 4, "softmax warps of q (final rowsums)", "correction warps (epilogue)", "ch.12")
    return tuple(out)


def _tmem(s: Schedule) -> tuple:
    regs = []
    for q in range(s.q_stages):
        s_col = q * s.block_n
        regs.append(TmemRegion(f"S{q}", q, s_col, s.block_n, "FP32 scores"))
        if s.p_storage == "tmem":
            p_col = s_col + (s.block_n // 2 if s.s_cache_cols else 0)
            half = "upper" if s.s_cache_cols else "lower"
            regs.append(TmemRegion(f"P{q}", q, p_col, s.block_n // 2, f"packed BF16 P over the {half} half of S{q}"))
    o_base = s.q_stages * s.block_n
    for q in range(s.q_stages):
        regs.append(TmemRegion(f"O{q}", q, o_base + q * s.head_dim, s.head_dim, "FP32 output accumulator"))
    return tuple(regs)


@dataclass(frozen=True)
class Plan:
    """Frozen resource plan of one schedule (see module docstring)."""

    schedule: Schedule
    smem: tuple
    smem_bytes: int
    tmem: tuple
    tmem_alloc_cols: int
    barriers: tuple
    roles: tuple
    threads: int
    issue: Optional[IssueOrder]

    def launch_info(self, ir=None) -> LaunchInfo:
        """Launch configuration for the runtime (wait sites from ``ir``)."""
        from .emit import descriptor_constants

        s = self.schedule
        return LaunchInfo(
            name=s.name,
            threads=self.threads,
            dynamic_smem_bytes=self.smem_bytes,
            tmem_cols=self.tmem_alloc_cols,
            q_stages=s.q_stages,
            block_m=s.block_m,
            block_n=s.block_n,
            head_dim=s.head_dim,
            persistent=s.persistent,
            tma_box_inner=descriptor_constants(s.swizzle)["tma"]["inner"],
            tma_box_rows=128,
            tma_swizzle=s.swizzle,
            tma_l2_promotion=s.tma_l2_promotion,
            wait_sites=tuple(ir.wait_sites) if ir is not None else (),
        )

    def __str__(self) -> str:
        s = self.schedule
        out = [f"plan for {s.name!r} (blog stage {s.blog_stage})", "", "warp roles:"]
        for r in self.roles:
            q = f" q={r.q_stage}" if r.q_stage is not None else ""
            regs = f" setmaxnreg {r.regs}" if r.regs else ""
            out.append(f"  {r.name:<11s} warps {','.join(map(str, r.warps))}{q}{regs}")
        out.append(f"  threads per CTA: {self.threads}")
        out += ["", f"SMEM (dynamic {self.smem_bytes} B of {R.SMEM_LIMIT_BYTES}, incl. 1024 B realignment slack):"]
        for b in self.smem:
            out.append(f"  {b.name:<10s} offset {b.offset:>7d}  size {b.size:>6d}  align {b.align:>4d}  {b.note}")
        out += ["", f"TMEM (alloc {self.tmem_alloc_cols} of {R.TMEM_COLUMNS} columns):"]
        for t in self.tmem:
            out.append(f"  {t.name:<4s} columns {t.col:>3d}..{t.col + t.ncols - 1:<3d}  {t.note}")
        out += ["", "barriers:"]
        for b in self.barriers:
            rng = f"[{b.count}]" if b.count > 1 else ""
            out.append(f"  {b.name + rng:<14s} #{b.first:<2d} arrivals {b.arrivals}  by {b.arrive_by}; waited by {b.wait_by}")
        if self.issue is not None:
            out += ["", f"MMA issue order: {' '.join(st.symbolic for st in self.issue.steps)}"]
            if self.issue.lead:
                out.append(f"  prologue (K/V tile 0): {' '.join(st.label('0') for st in self.issue.prologue())}")
                out.append(f"  epilogue (last tile):  {' '.join(st.label('n-1') for st in self.issue.epilogue())}")
        return "\n".join(out) + "\n"


def make_plan(s: Schedule) -> Plan:
    """Validate and plan a schedule.

    Raises:
        ScheduleError / ResourceError / IssueOrderError if ``s`` is invalid.
    """
    from ..dsl.validate import validate_schedule

    issue = validate_schedule(s)  # the checked issue order (None without warp roles)
    smem, total = smem_layout(s)
    return Plan(
        schedule=s,
        smem=smem,
        smem_bytes=total,
        tmem=_tmem(s),
        tmem_alloc_cols=R.tmem_columns_alloc(s),
        barriers=_barriers(s),
        roles=R.warp_roles(s),
        threads=R.threads_per_cta(s),
        issue=issue,
    )

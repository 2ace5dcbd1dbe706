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
from ..dsl.resources import BarrierSpec, SmemBuffer, barrier_table, smem_layout  # noqa: F401 (re-exported)
from ..dsl.schedule import Schedule
from .launch import LaunchInfo


@dataclass(frozen=True)
class TmemRegion:
    """TMEM columns of one buffer (all 128 lanes): S/P or O of a Q stage."""

    name: str
    q_stage: int
    col: int
    ncols: int
    note: str = ""


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
        barriers=barrier_table(s),
        roles=R.warp_roles(s),
        threads=R.threads_per_cta(s),
        issue=issue,
    )

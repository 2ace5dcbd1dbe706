"""The plan: the frozen resource allocation of one kernel, the single owner of
its layout.

SMEM regions (offset, size, alignment), TMEM column arrays, the barrier
protocol (:mod:`b200c.codegen.barriers`), warp roles with their register
budgets, the tile shape, descriptor constants, TMA boxes and the kernel's entry
signature. Backends build it (``b200c/codegen/<backend>/plan.py``); lowering,
the protocol verifier, the templates and the runtime only read it. Templates
never see the Schedule. ``str(plan)`` is ``b200c compile --emit plan``.
"""
from __future__ import annotations

import msgspec
from typing import Optional

from .hardware import Limits
from .tile import TileShape


class SmemRegion(msgspec.Struct, frozen=True):
    """One SMEM buffer: byte offset from the 1024-aligned base, size, alignment."""

    name: str
    offset: int
    size: int
    align: int
    note: str = ""


class TmemArray(msgspec.Struct, frozen=True):
    """One TMEM buffer per Q stage (all 128 lanes): stage q occupies columns
    ``base + q * stride`` .. ``+ ncols - 1``.

    Attributes:
        kind: ``"S"``, ``"P"`` or ``"O"``.
        base, stride, ncols: columns.
        note: what the columns hold.
    """

    kind: str
    base: int
    stride: int
    ncols: int
    note: str = ""

    def col(self, q: int) -> int:
        """First column of Q stage ``q``."""
        return self.base + q * self.stride

    def expr(self) -> str:
        """C expression of the first column of Q stage ``q`` (an int named ``q``)."""
        if self.kind == "P":
            return f"(uint32_t)q * {self.stride}u + {self.base}u"
        if self.kind == "S" and not self.base:
            return f"(uint32_t)q * {self.stride}u"
        return f"{self.base}u + (uint32_t)q * {self.stride}u"


class RoleSpec(msgspec.Struct, frozen=True):
    """Warps of one warp role (one entry per instance).

    Attributes:
        name: ``cta``, ``softmax``, ``correction``, ``load``, ``mma``, ``spare``.
        warps: warp indices inside the CTA.
        q_stage: the Q stage an instance serves (softmax warpgroups), else None.
        regs: ``setmaxnreg`` budget of its warpgroup, or None.
    """

    name: str
    warps: tuple
    q_stage: Optional[int] = None
    regs: Optional[int] = None


class TmaBoxes(msgspec.Struct, frozen=True):
    """How one tile is loaded by TMA (docs/sm100-facts.md §6).

    Attributes:
        inner: columns per box (64 with 128B swizzle: one 128-B row).
        rows: rows per box.
        slices: boxes per tile (head_dim / inner).
        slice_bytes: SMEM bytes of one box.
        swizzle: ``"none"`` or ``"128B"``.
        l2_promotion: ``"none"``, ``"64B"``, ``"128B"`` or ``"256B"``.
    """

    inner: int
    rows: int
    slices: int
    slice_bytes: int
    swizzle: str
    l2_promotion: str


class Plan(msgspec.Struct, frozen=True):
    """Frozen resource plan of one kernel (see the module docstring).

    ``descriptors`` holds the backend's MMA operand constants (for tcgen05:
    :class:`b200c.codegen.tcgen05.descriptors.Descriptors`).
    """

    name: str
    blog_stage: int
    summary: tuple
    backend: str
    limits: Limits
    tile: TileShape
    q_stages: int
    kv_tokens: str
    kv_stages: int
    kv_slot_bytes: int
    persistent: bool
    smem: tuple
    smem_bytes: int
    tmem: tuple
    tmem_alloc_cols: int
    barriers: tuple
    roles: tuple
    threads: int
    tma: TmaBoxes
    descriptors: object
    issue: object = None
    flags: frozenset = msgspec.field(default_factory=frozenset)
    named_barriers: tuple = ()
    tma_kv: Optional[TmaBoxes] = None
    # persistent + causal: odd rounds of the grid-stride loop run right to left (b200c/codegen/work.py)
    serpentine: bool = False
    # the traced score_mod / mask_mod / sinks compiled into the kernel (b200c.dsl.mod_records.ModSet), or None
    mods: object = None
    # split-KV build (the schedule's kv_splits is not None or 1): num_splits at launch, partial O/LSE to a
    # workspace, merged by the module's combine kernel (b200c/codegen/work.py); kv_splits: the schedule's value
    split_kv: bool = False
    kv_splits: Optional[int] = None

    @property
    def kv_tma(self) -> TmaBoxes:
        """TMA boxes of the K and V tiles (``tma`` unless the backend loads
        them with other boxes than Q: sm_90a's Q boxes have 64 rows, K/V boxes
        block_n rows)."""
        return self.tma_kv if self.tma_kv is not None else self.tma

    # ---- lookups -----------------------------------------------------------------
    def barrier(self, name: str):
        """The barrier family ``name``.

        Raises:
            KeyError: the plan has no such barrier.
        """
        for b in self.barriers:
            if b.name == name:
                return b
        raise KeyError(f"plan {self.name!r} has no barrier {name!r}")

    def named_barrier(self, name: str):
        """The named-barrier family ``name``.

        Raises:
            KeyError: the plan has no such named barrier.
        """
        for b in self.named_barriers:
            if b.name == name:
                return b
        raise KeyError(f"plan {self.name!r} has no named barrier {name!r}")

    def region(self, name: str):
        """The SMEM region ``name``, or None."""
        return next((r for r in self.smem if r.name == name), None)

    def tmem_array(self, kind: str):
        """The TMEM array of ``kind`` (``S``, ``P``, ``O``), or None."""
        return next((t for t in self.tmem if t.kind == kind), None)

    def role_specs(self, name: str) -> tuple:
        """Every instance of warp role ``name``."""
        return tuple(r for r in self.roles if r.name == name)

    @property
    def num_barriers(self) -> int:
        """mbarriers in the CTA's barrier array."""
        return sum(b.count for b in self.barriers)

    @property
    def tmem_columns_used(self) -> int:
        """TMEM columns up to the last one any array of any Q stage uses."""
        return max((t.col(self.q_stages - 1) + t.ncols for t in self.tmem), default=0)

    # ---- text --------------------------------------------------------------------
    def __str__(self) -> str:
        stage = f"blog stage {self.blog_stage}, " if self.blog_stage else ""
        out = [f"plan for {self.name!r} ({stage}backend {self.backend})", "",
               f"tile: block_m {self.tile.block_m}, block_n {self.tile.block_n}, head_dim {self.tile.head_dim} "
               f"(Q tile {self.tile.q_tile_bytes} B, K tile {self.tile.k_tile_bytes} B, V tile "
               f"{self.tile.v_tile_bytes} B; QK {self.tile.qk_k_steps} and PV {self.tile.pv_k_steps} MMA k-steps)",
               "", "warp roles:"]
        for r in self.roles:
            q = f" q={r.q_stage}" if r.q_stage is not None else ""
            regs = f" setmaxnreg {r.regs}" if r.regs else ""
            out.append(f"  {r.name:<11s} warps {','.join(map(str, r.warps))}{q}{regs}")
        out.append(f"  threads per CTA: {self.threads}")
        out += ["", f"SMEM (dynamic {self.smem_bytes} B of {self.limits.smem_bytes}, incl. "
                    f"{self.limits.smem_align_slack} B realignment slack):"]
        for b in self.smem:
            out.append(f"  {b.name:<10s} offset {b.offset:>7d}  size {b.size:>6d}  align {b.align:>4d}  {b.note}")
        if self.tmem:
            out += ["", f"TMEM (alloc {self.tmem_alloc_cols} of {self.limits.tmem_columns} columns):"]
            for t in sorted(self.tmem, key=lambda t: "SPO".index(t.kind)):
                for q in range(self.q_stages):
                    c = t.col(q)
                    out.append(f"  {t.kind}{q:<3d} columns {c:>3d}..{c + t.ncols - 1:<3d}  {t.note.format(q=q)}")
        out += ["", "barriers (arrivals per phase = sum over producers):"]
        for b in self.barriers:
            rng = f"[{b.count}]" if b.count > 1 else ""
            prod = " + ".join(f"{p.role}{'[q]' if p.same_q_stage else ''}{'[all q]' if p.per_instance else ''} "
                              f"{p.arrivals} ({p.how})" for p in b.producers)
            free = "; starts free" if b.starts_free else ""
            out.append(f"  {b.name + rng:<14s} #{b.first:<2d} arrivals {b.arrivals} = {prod}; "
                       f"waited by {', '.join(b.consumers)}{free}")
        if self.named_barriers:
            out += ["", "named barriers (bar.sync / bar.arrive, threads per generation):"]
            for b in self.named_barriers:
                rng = f"[{b.count}]" if b.count > 1 else ""
                arr = f"; bar.arrive by {', '.join(b.arrivers)}" if b.arrivers else ""
                out.append(f"  {b.name + rng:<14s} id {b.first_id:<2d} threads {b.threads}: bar.sync by "
                           f"{', '.join(b.syncers)}{arr}" + (f"  ({b.note})" if b.note else ""))
        if self.issue is not None:
            out += ["", f"MMA issue order: {' '.join(st.symbolic for st in self.issue.steps)}"]
            if self.issue.lead:
                out.append(f"  prologue (K/V tile 0): {' '.join(st.label('0') for st in self.issue.prologue())}")
                out.append(f"  epilogue (last tile):  {' '.join(st.label('n-1') for st in self.issue.epilogue())}")
        out += ["", "work decomposition (b200c/codegen/work.py):", "  " + self.split_words()]
        return "\n".join(out) + "\n"

    def split_words(self) -> str:
        """One line on the plan's split-KV setting (``--emit plan``)."""
        if self.kv_splits == 1:
            return "split-KV: never (kv_splits=1)"
        if not self.split_kv:
            return ("split-KV: decided per call (kv_splits=None): calls whose items leave SMs idle run the split-KV "
                    "build (kv_splits=0); --shape B,H,H_kv,S_q,S_kv prints the choice")
        count = "per call (choose_splits)" if self.kv_splits == 0 else f"{self.kv_splits} per work item (capped at its K/V tiles)"
        return (f"split-KV build: splits {count}; each split's O (FP32) and LSE to a workspace, merged by "
                "b200c_attention_combine")

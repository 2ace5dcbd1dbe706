"""What the host needs to launch a generated kernel (plain data, JSON-able).

Every generated kernel has the same entry point, whose parameters are
written once in :mod:`b200c.codegen.signature` (``ATTENTION_PARAMS``) and
listed, in order, in :attr:`LaunchInfo.params` for the launcher (and at the
top of each generated file): three tensor maps (Q, K, V), the output pointer
and strides, the LSE pointer and strides, the varlen prefix sums, the sizes
(batch, heads, heads_kv, seq_q, seq_kv), ``causal``, ``pack_heads`` and the
softmax scale.

Tensor maps (cuTensorMapEncodeTiled, docs/sm100-facts.md §6): rank 4, BF16,
``globalDim = {D, S, H, B}`` (K, V: H_kv heads; varlen: ``{D, total, H, 1}``),
``globalStrides`` = the tensor's S, H, B strides
in bytes (so (B,H,S,D) and (B,S,H,D) layouts both work without copies),
``boxDim = {tma_box_inner, tma_box_rows, 1, 1}`` (K and V:
``tma_kv_box_rows`` when it is set, sm_90a), element strides 1, no
interleave, ``tma_swizzle``, ``tma_l2_promotion``, out-of-bounds fill zero
(rows of a Q tile past ``seq_q`` load as zeros and are not stored).

Grid: one CTA per work item or, when ``persistent``, min(work items, SM count)
CTAs striding over work items (:meth:`LaunchInfo.num_work_items`). A work
item is ``q_stages`` consecutive Q tiles of one (sequence, head) or, with
``pack_heads``, the same Q tile of ``q_stages`` heads of one K/V group.
Block: ``threads`` (+32 for the emulator warp of the emulation target).
Dynamic SMEM: ``dynamic_smem_bytes``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .signature import ATTENTION_PARAMS, KERNEL_NAME  # noqa: F401 (KERNEL_NAME re-exported)
from .work import WorkDecomposition

EMULATOR_THREADS = 32  # the emulation target's extra MMA-engine warp


@dataclass(frozen=True)
class WaitSite:
    """One bounded-wait site: the id passed to ``mbar_wait`` and what it is."""

    id: int
    role: str
    barrier: str


@dataclass(frozen=True)
class LaunchInfo:
    """Launch configuration of one generated kernel.

    Attributes:
        name: schedule name.
        threads: threads per CTA of the warp roles (emulation adds 32).
        dynamic_smem_bytes: dynamic SMEM per CTA in bytes (native target).
        tmem_cols: TMEM columns allocated per CTA.
        q_stages: Q tiles per work item.
        block_m, block_n, head_dim: tile shape (128, 128, 128).
        persistent: grid-stride persistent kernel (grid = #SMs).
        tma_box_inner: inner TMA box in elements (8 unswizzled, 64 for SW128).
        tma_box_rows: rows per TMA box (128).
        tma_swizzle: ``"none"`` or ``"128B"``.
        tma_l2_promotion: ``"none"``, ``"64B"``, ``"128B"`` or ``"256B"``.
        wait_sites: the bounded-wait sites, for naming a hang.
        params: ``(name, kind)`` of every entry parameter in order
            (:mod:`b200c.codegen.signature`), for the launcher.
        tma_kv_box_rows: rows per TMA box of K and V when they differ from
            ``tma_box_rows`` (sm_90a: Q boxes of 64 rows, K/V boxes of
            block_n rows); 0: the same as Q.
        trace_tracks: profiling builds: the name of each track (warp-role
            instance) of a CTA, in track order; () when not profiled.
        trace_events: profiling builds: ``(name, edge)`` of each event id
            (edge ``"B"`` begin or ``"E"`` end of a span).
        serpentine: the plan's work order (:attr:`b200c.codegen.plan.Plan.serpentine`): a persistent
            causal (or varlen-ordered) kernel's odd grid-stride rounds run right to left.
        split_kv: a split-KV build (takes ``num_splits``; its module also holds the combine kernel).
        kv_splits: the schedule's ``kv_splits`` (None, 0: the count per call; 2..128: fixed).
    """

    name: str
    threads: int
    dynamic_smem_bytes: int
    tmem_cols: int
    q_stages: int
    block_m: int
    block_n: int
    head_dim: int
    persistent: bool
    tma_box_inner: int
    tma_box_rows: int
    tma_swizzle: str
    tma_l2_promotion: str
    wait_sites: tuple = ()
    params: tuple = tuple((p.name, p.kind) for p in ATTENTION_PARAMS)
    tma_kv_box_rows: int = 0
    trace_tracks: tuple = ()
    trace_events: tuple = ()
    serpentine: bool = False
    split_kv: bool = False
    kv_splits: int | None = None

    @property
    def kv_box_rows(self) -> int:
        """Rows per TMA box of K and V."""
        return self.tma_kv_box_rows or self.tma_box_rows

    def work(self):
        """The kernel's :class:`~b200c.codegen.work.WorkDecomposition` (its Python model)."""
        return WorkDecomposition(self.block_m, self.block_n, self.q_stages, serpentine=self.serpentine,
                                 split_kv=self.split_kv, item_order=("item_order", "i32_ptr") in self.params)

    def num_work_items(self, batch: int, heads: int, seq_q: int, pack_heads: bool = False, num_splits: int = 1) -> int:
        """Work items of a problem (the kernel's ``num_work``; :meth:`b200c.codegen.work.WorkDecomposition.num_work`):
        ``B * (H / q_stages if pack_heads else H) * q_groups`` with ``q_groups = ceil(S_q / block_m)``
        when ``pack_heads``, else ``ceil(ceil(S_q / block_m) / q_stages)``; ``seq_q`` is the longest
        query sequence for varlen calls.
        """
        return self.work().num_work(batch, heads, seq_q, pack_heads, num_splits)

    def grid(self, batch: int, heads: int, seq_q: int, num_sms: int, pack_heads: bool = False,
             num_splits: int = 1) -> int:
        """CTAs to launch: one per work item, or min(work items, SMs) if persistent."""
        n = self.num_work_items(batch, heads, seq_q, pack_heads, num_splits)
        return min(n, num_sms) if self.persistent else n

    def site(self, site_id: int) -> WaitSite | None:
        """The wait site with this id, if any."""
        for s in self.wait_sites:
            if s.id == site_id:
                return s
        return None

    def to_json(self) -> str:
        """JSON text (stored next to cached cubins)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "LaunchInfo":
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        d["wait_sites"] = tuple(WaitSite(**w) for w in d.get("wait_sites", ()))
        if "params" in d:
            d["params"] = tuple(tuple(p) for p in d["params"])
        d["trace_tracks"] = tuple(d.get("trace_tracks", ()))
        d["trace_events"] = tuple(tuple(e) for e in d.get("trace_events", ()))
        return cls(**d)


def launch_info(plan, ir=None) -> LaunchInfo:
    """Launch configuration of a plan (wait sites from ``ir``, if given)."""
    from . import mod_kernel, work

    return LaunchInfo(
        name=plan.name,
        threads=plan.threads,
        dynamic_smem_bytes=plan.smem_bytes,
        tmem_cols=plan.tmem_alloc_cols,
        q_stages=plan.q_stages,
        block_m=plan.tile.block_m,
        block_n=plan.tile.block_n,
        head_dim=plan.tile.head_dim,
        persistent=plan.persistent,
        tma_box_inner=plan.tma.inner,
        tma_box_rows=plan.tma.rows,
        tma_swizzle=plan.tma.swizzle,
        tma_l2_promotion=plan.tma.l2_promotion,
        wait_sites=tuple(ir.wait_sites) if ir is not None else (),
        tma_kv_box_rows=plan.tma_kv.rows if plan.tma_kv is not None and plan.tma_kv.rows != plan.tma.rows else 0,
        trace_tracks=tuple(ir.trace_tracks) if ir is not None else (),
        trace_events=tuple(ir.trace_events) if ir is not None else (),
        serpentine=plan.serpentine,
        params=tuple((p.name, p.kind) for p in mod_kernel.params(plan.mods) + work.params(work.decomposition(plan))),
        split_kv=plan.split_kv,
        kv_splits=plan.kv_splits,
    )

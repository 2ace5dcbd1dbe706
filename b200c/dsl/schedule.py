"""The declarative schedule of a B200 attention forward kernel.

A :class:`Schedule` holds every knob the blog's 14 stages and 4 minor
optimizations turn (docs/blog-stages.md). Neighbouring
examples are one :meth:`Schedule.replace` apart. Problem shapes (batch, heads,
sequence lengths, layout, softmax scale) are runtime arguments, not knobs.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from typing import Optional

from . import knobs


@dataclass(frozen=True)
class Schedule:
    """One attention-kernel schedule (all fields immutable).

    Tile shape: ``block_m`` x ``block_n`` Q/K tiles of BF16, head dim
    ``head_dim`` (64, 128 or 256 on both targets;
    ``b200c.attention`` sets it to the inputs' D with ``replace(head_dim=D)``
    before generating). ``block_m`` is the Q rows of one Q stage: 128 on
    sm_100a (one tcgen05.mma M, the blog's 128x128 tiles), 64 on sm_90a (one
    wgmma M: a consumer warpgroup's rows, FlashAttention-3 §3). ``block_n``
    is the K/V rows per tile: 128 on sm_100a; on sm_90a a multiple of 16 up to
    224 / 192 / 80 at head dim 64 / 128 / 256 (FA3 uses 176 at head dim 128;
    a partial last K/V tile is masked).

    Targets (``b200c.generate(schedule, target=...)``): ``"sm100a"`` (and its
    emulation ``"emulate"``) runs the tcgen05 backend, ``"sm90a"`` the Hopper
    wgmma backend (docs/hopper-progression.md). Knobs a target cannot honour
    are refused with a ScheduleError naming the target.

    Knobs, by blog chapter:

    * ``p_storage`` (ch.1/2): ``"smem"`` writes P (BF16, K-major) into the dead
      K buffer; ``"tmem"`` packs two BF16 P values per 32-bit TMEM column over
      consumed S columns and feeds PV's A operand from TMEM; ``"registers"``
      (sm_90a only) keeps P in registers as the A operand of an RS wgmma.
    * ``swizzle`` (ch.3): ``"none"`` or ``"128B"`` for Q/K (K-major) and V
      (MN-major) tiles; TMA maps and MMA descriptors always agree.
    * ``warp_specialized`` (ch.4): separate load, MMA and softmax ("row") warps
      that synchronize only with the partners of each hand-off. Off: 4 warps
      do everything and thread 0 issues TMA and MMA.
    * ``q_stages`` (ch.5): Q tiles per CTA sharing every K/V tile; each stage
      owns S/P and O in TMEM (128 + 128 columns).
    * ``kv_tokens`` / ``kv_stages`` (ch.6): ``"paired"`` loads K(j) and V(j)
      into one slot; ``"separate"`` makes K and V separate tokens in one ring
      of ``kv_stages`` slots, each released after its last consumer.
    * ``issue_order`` (ch.7): the MMA warp's steady-state order, e.g.
      ``"P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)"``; ``None`` is the non-pipelined
      ``"Q0K(i) Q1K(i) P0V(i) P1V(i)"``. Prologue/epilogue are derived.
      On sm_90a each consumer warpgroup issues its own Q stage's wgmmas: only
      the order of each stage's two steps matters (the same for every stage),
      and ``"Q0K(i+1) P0V(i)"`` is FlashAttention-3's intra-warpgroup overlap
      (softmax of tile i+1 runs while PV(i) is in flight, FA3 §3.2).
    * ``pingpong`` (sm_90a, FA3 §3.1): two consumer warpgroups take turns
      issuing their GEMMs (named barriers), so one's softmax overlaps the
      other's GEMMs. Needs ``q_stages=2``.
    * ``rowsum`` (ch.1): ``"fp32"`` (default; the rowsum adds P in FP32 before
      the BF16 pack, as FlashAttention-4) or ``"bf16"`` (adds the BF16-rounded P
      that PV consumes; costs an unpack per value). With ``"bf16"`` the LSE is the
      log of that rounded sum: each P is off by at most 2^-9 of itself, so the LSE
      by at most 2^-9 (about 2e-3; measured up to 1.4e-3 on rows that see few keys).
    * ``exp2`` (ch.8): ``"expf"`` (``__expf`` of natural-log units) or
      ``"ex2.approx.ftz"`` (scale folded into log2 units, no wrapper).
    * ``f32x2`` (ch.8): elementwise FP32 math on column pairs with sm_100's
      packed ``fma/add/mul.f32x2`` (scale-and-subtract, rowsum, O rescale,
      epilogue, software exp2); scalar fallbacks in the emulation target.
    * ``sw_exp2_per16`` (ch.9): of every 16 P columns, this many (the last
      ones) use a degree-3 polynomial exp2 on the FMA pipes (packed f32x2).
    * ``s_cache_cols`` (ch.10): high S columns kept in registers after the
      rowmax pass; the rest are re-read. P is written high-to-low into the
      upper half of the S columns.
    * ``rescale_threshold`` (ch.11): rebase rowmax/O only when the new tile max
      exceeds the kept one by at least this many log2 units (``None``: always).
    * ``correction_warps`` (ch.12): separate warps rescale O from per-row
      factors published in SMEM; PV waits for "P ready" and "O safe".
    * ``early_pv_cols`` (ch.13): issue PV on the first-published (high) P
      columns before the remaining low columns are ready.
    * ``persistent`` (ch.14): grid = #SMs, grid-stride loop over work items,
      barriers live across work items, Q SMEM released through ``q_free``.
    * ``s_load_cols``, ``deferred_s_wait``, ``rowmax_chains``, ``rowmax_max3``,
      ``o_load_cols`` (minor 15): width of each S ``tcgen05.ld``, one deferred
      ``tcgen05.wait::ld``, independent rowmax chains, 3-input ``max.f32``
      (FMNMX3) for the row max, width of the O rescale's TMEM loads/stores.
    * ``split_rowsum`` (minor 16): two partial sums for the cached columns and
      a scalar sum for the re-read ones.
    * ``phase_tracking`` (minor 17): ``"array"`` or ``"bitmask"`` storage of
      the phase bits of barrier families (K/V ring, per-Q-stage barriers) in
      the load, MMA and correction warps; with ``"bitmask"`` (and ``f32x2``) the
      softmax warps also keep their f32x2 rowsum partial sums across K/V tiles.
    * ``tma_l2_promotion`` (minor 18): ``"none"``/``"64B"``/``"128B"``/
      ``"256B"`` L2 promotion of the TMA tensor maps (host side only).
    * ``softmax_regs``/``correction_regs``/``other_regs``: ``setmaxnreg``
      register budget per warpgroup (24..256, multiple of 8); ``None`` leaves
      the compiler's launch-bounds allocation. On sm_90a ``softmax_regs`` is
      the consumer warpgroups' budget and ``other_regs`` the producer's.
    * ``kv_splits`` (split-KV, flash-decoding): ``None`` (default): the runtime
      decides per call from the shape and the SM count
      (:func:`b200c.codegen.work.choose_splits`; calls that split run this
      schedule's split-KV build, the others the plain one); ``1``: never split;
      ``0``: always the split-KV build, the count chosen per call; ``2..128``:
      that many splits of every work item's K/V tiles (fewer where an item has
      fewer tiles). A split-KV build writes each split's FP32 O and LSE to a
      workspace and a second kernel of the same module merges them by
      log-sum-exp.

    Construction checks nothing; :meth:`validate` (run by every compile) checks
    types, ranges and contradictions (``b200c/dsl/validate.py``, one function
    per rule), raising ScheduleError / IssueOrderError; ``b200c.plan`` then
    checks the hardware budgets (ResourceError).
    """

    name: str = "custom"
    blog_stage: int = 0
    block_m: int = 128
    block_n: int = 128
    head_dim: int = 128
    # Part I
    p_storage: str = "smem"
    swizzle: str = "none"
    warp_specialized: bool = False
    # Part II
    q_stages: int = 1
    kv_tokens: str = "paired"
    kv_stages: int = 1
    issue_order: Optional[str] = None
    pingpong: bool = False
    rowsum: str = "fp32"
    # Part III
    exp2: str = "expf"
    f32x2: bool = False
    sw_exp2_per16: int = 0
    s_cache_cols: int = 0
    rescale_threshold: Optional[float] = None
    correction_warps: int = 0
    early_pv_cols: int = 0
    # Part IV
    persistent: bool = False
    # minor optimizations
    s_load_cols: int = 8
    deferred_s_wait: bool = False
    rowmax_chains: int = 1
    rowmax_max3: bool = False
    o_load_cols: int = 8
    split_rowsum: bool = False
    phase_tracking: str = "array"
    tma_l2_promotion: str = "none"
    # register budgets (setmaxnreg, per warpgroup)
    softmax_regs: Optional[int] = None
    correction_regs: Optional[int] = None
    other_regs: Optional[int] = None
    # split-KV (flash-decoding): work items over ranges of the K/V tiles, merged by their LSE
    kv_splits: Optional[int] = None

    # The canonical JSON (to_json()), made once per Schedule: b200c.attention under torch.compile
    # reads this one attribute (one guard on the compiled function) instead of every field (one
    # guard each). None when a knob is not JSON-serialisable (validate() reports it), for a
    # Schedule made while torch.compile traces (json.dumps cannot be traced; the fields are read
    # then) and for one unpickled from before the attribute existed (this class default).
    _json = None

    def __post_init__(self) -> None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.compiler.is_compiling():
            return
        try:
            text = self.to_json()
        except (TypeError, ValueError):
            return
        object.__setattr__(self, "_json", text)

    def replace(self, **changes) -> "Schedule":
        """Return a copy with ``changes`` applied (like ``dataclasses.replace``). A copy whose knobs
        change is no longer the blog stage it came from: ``blog_stage`` becomes 0 unless ``changes``
        names it (renaming alone keeps it).

        Raises:
            ScheduleError: a name in ``changes`` is not a Schedule field.
        """
        _check_field_names(changes)
        if "blog_stage" not in changes and set(changes) - {"name"}:
            changes = {**changes, "blog_stage": 0}
        return dataclasses.replace(self, **changes)

    def validate(self) -> "Schedule":
        """Check every knob (types, ranges, contradictions, the issue order);
        return ``self``. Hardware budgets and the knobs a target cannot
        honour depend on the target and are checked by
        ``b200c.plan(schedule, target)`` / ``b200c.generate(schedule, target)``.

        Raises:
            ScheduleError: invalid or contradictory knobs.
            IssueOrderError: ``issue_order`` does not parse or breaks a
                dependency.
        """
        from .validate import validate_schedule  # below this module (it never imports it); lazy: import time

        validate_schedule(self)
        return self

    def to_json(self) -> str:
        """Canonical JSON of every field (sorted keys); stable across runs."""
        return json.dumps({name: getattr(self, name) for name in _FIELD_NAMES}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        """Inverse of :meth:`to_json`.

        Raises:
            ScheduleError: unknown field names.
        """
        from ..errors import ScheduleError

        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ScheduleError(f"unknown schedule field {unknown[0]!r} in JSON")
        return cls(**data)

    def summary(self) -> str:
        """One line per non-default knob, for headers of generated files."""
        default = Schedule()
        lines = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "name" or v != getattr(default, f.name):  # blog_stage 0 (outside the blog) is the default
                lines.append(f"{f.name} = {v!r}")
        return "\n".join(lines)


def _check_field_names(names) -> None:
    """Raise ScheduleError naming the first unknown field in ``names`` and the closest known one."""
    unknown = sorted(set(names) - _FIELD_NAMES)
    if unknown:
        import difflib

        from ..errors import ScheduleError

        close = difflib.get_close_matches(unknown[0], _FIELD_NAMES, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(sorted(_FIELD_NAMES))}"
        raise ScheduleError(f"Schedule has no field {unknown[0]!r}; {hint}")


def _with_field_check(init):
    import functools

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if not _FIELD_NAMES.issuperset(kwargs):  # a ScheduleError with a hint, not a bare TypeError
            _check_field_names(kwargs)
        init(self, *args, **kwargs)

    return __init__


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Schedule))
Schedule.__doc__ += knobs.table([f.name for f in dataclasses.fields(Schedule)])
Schedule.__init__ = _with_field_check(Schedule.__init__)

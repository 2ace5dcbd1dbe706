"""IR nodes of the tcgen05 backend (sm_100a): MMA issue into TMEM, commits,
TMEM loads/stores of the softmax, correction and epilogue blocks."""
from __future__ import annotations

from typing import Optional

from ..ir import AsyncArrive, Node


class Commit(AsyncArrive):
    """``tcgen05.commit`` to ``barrier[index]``: one arrival once every MMA this
    thread issued so far has completed (PTX ISA 9.7.16.12.1). ``elect``: the
    whole warp calls it and one elected lane issues it (as the MMAs)."""

    elect: bool = False

    def describe(self) -> str:
        idx = f"[{self.index}]" if self.index is not None else ""
        return f"tcgen05.commit -> {self.barrier}{idx}"

class MmaQK(Node):
    """S[tmem s_col] = Q[smem q] . K[smem k]^T: HEAD_DIM/16 MMAs of K=16 (blog
    ch.1 §A). ``q_desc``/``k_desc``: C expressions of the tiles' SMEM
    descriptors (``SmemDesc``); ``elect``: the whole warp calls, one elected
    lane issues (else the calling thread issues)."""

    q_stage: int
    s_col: str
    q_desc: str
    k_desc: str
    elect: bool = False

    def describe(self) -> str:
        return f"mma.qk  S{self.q_stage}[tmem {self.s_col}] = Q{self.q_stage}[smem {self.q_desc}] . K[smem {self.k_desc}]^T   (tcgen05.mma K=16 steps)"


class MmaPV(Node):
    """O[tmem o_col] (+)= P . V for K steps [k_lo, k_hi) (blog ch.1 §C, ch.2,
    ch.13). P from TMEM column ``p_col`` or SMEM buffer ``p_buf``; ``v_desc``:
    C expression of V's SMEM descriptor; ``elect`` as for :class:`MmaQK`."""

    q_stage: int
    o_col: str
    v_desc: str
    k_lo: int
    k_hi: int
    accumulate: str
    p_col: Optional[str] = None
    p_buf: Optional[str] = None
    elect: bool = False

    def describe(self) -> str:
        src = f"P{self.q_stage}[tmem {self.p_col}]" if self.p_col else f"P[smem {self.p_buf}]"
        return (f"mma.pv  O{self.q_stage}[tmem {self.o_col}] += {src} . V[smem {self.v_desc}]  k-steps "
                f"[{self.k_lo},{self.k_hi}) accumulate={self.accumulate}")


class RowmaxPass(Node):
    """Pass 1 over S (blog ch.1 §B): tile rowmax of this thread's row; columns
    from ``cache_from`` on are kept in the register array ``s_cache`` (ch.10).

    Attributes:
        s_col: TMEM column of S (C expression).
        ncols: S columns (block_n).
        load_width: columns per ``tcgen05.ld.32x32b.xW`` (minor 15: wide loads).
        wait_each: ``tcgen05.wait::ld`` after each load; else one deferred wait
            before P overwrites S (minor 15).
        chains: independent rowmax accumulators (minor 15).
        max3: 3-input ``max.f32`` (FMNMX3 on sm_100, PTX ISA 9.7.3.10).
        cache_from: first column kept in registers (``ncols``: none).
        mask: scores of columns >= ``col_lim`` become -inf before the max (the
            partial last K/V tile, the causal diagonal).
        nan_max: the max is ``max.NaN`` (a NaN score makes the row max NaN):
            schedules with the software exp2, whose exponent arithmetic turns a
            NaN input into FLT_MAX.
        sw_from: when set, columns whose index mod 16 is >= ``sw_from`` (the
            software-exp2 columns of blog ch.9) take a chain of their own
            whose maximum ``sw_max`` tells whether the tile's largest score is
            in one of them (``sw_max >= tile_max``, see :class:`TopPRound`).
    """

    s_col: str
    ncols: int
    load_width: int
    wait_each: bool
    chains: int
    max3: bool
    cache_from: int
    mask: bool = False
    sw_from: Optional[int] = None
    nan_max: bool = False
    mods: str = ""  # with mods: the statement putting each loaded score through mod_entry (before the mask)
    code: tuple = ()  # the C lines, written from these fields by tcgen05/softmax_text.py

    def describe(self) -> str:
        bits = [f"ld x{self.load_width}" + ("" if self.wait_each else " (deferred wait::ld)"),
                f"{self.chains} chain{'s' if self.chains > 1 else ''} of {'max3' if self.max3 else 'max'}"]
        if self.sw_from is not None:
            bits.append(f"columns {self.sw_from}..15 of every 16 (software exp2) in their own chain")
        if self.nan_max:
            bits.append("max.NaN (NaN scores make the row NaN)")
        if self.cache_from < self.ncols:
            bits.append(f"keep columns [{self.cache_from},{self.ncols}) in s_cache")
        if self.mask:
            bits.append("mask columns >= col_lim")
        return f"softmax.rowmax S[tmem {self.s_col}] columns [0,{self.ncols}): " + ", ".join(bits)


class Rebase(Node):
    """New running rowmax and rescale factor; rowsum *= rescale (blog ch.1, 8,
    11). ``mode``: ``expf`` (natural-log units) or ``ex2`` (log2 units, scale
    folded with log2 e); ``threshold``: rebase only when the tile max exceeds
    the kept one by this many log2 units (ch.11); ``packed``: also form the
    float2 ``scale2``/``neg_max2`` pairs of the f32x2 scale-and-subtract;
    ``top_p_rounding``: the tile's largest P is rounded separately into
    ``row_adj`` (:class:`TopPRound`), which the rescale multiplies too;
    ``mask``: masked tiles, where a row may have seen no key yet (max -inf):
    P subtracts ``max_use`` (0 then) and the rescale factor stays finite;
    ``rowsum_pairs``: float2 rowsum accumulators kept across K/V tiles, which
    the rescale multiplies (``mul.f32x2``) instead of ``row_sum``; ``nan``: a
    NaN row max (see :class:`RowmaxPass` ``nan_max``) stays NaN and, with the
    threshold, rebases, so NaN reaches the rowsum and O."""

    mode: str
    threshold: Optional[float] = None
    packed: bool = False
    top_p_rounding: bool = False
    mask: bool = False
    rowsum_pairs: tuple = ()
    nan: bool = False
    code: tuple = ()  # the C lines, written from these fields by tcgen05/softmax_text.py

    def describe(self) -> str:
        when = "always" if self.threshold is None else f"only if gap >= {self.threshold} (log2 units)"
        extra = f"; rowsum partial sums {', '.join(self.rowsum_pairs)} kept across tiles" if self.rowsum_pairs else ""
        extra += "; row_adj rescaled with the rowsum" if self.top_p_rounding else ""
        extra += "; -inf-safe (masked tiles)" if self.mask else ""
        return f"softmax.rebase ({self.mode}) {when}" + ("; pairs for f32x2" if self.packed else "") + extra


class TopPRound(Node):
    """After the P pass of a tile: ``row_adj += bf16(p_top) - p_top`` for the
    tile's largest P (blog ch.11's threshold lets P reach 2^threshold, and PV
    consumes it rounded to BF16; see
    :func:`b200c.codegen.tcgen05.softmax.top_p_rounding`). ``top_sw``: p_top
    is computed by the exp2 of the column holding the largest score (software
    exp2 when ``sw_max`` reaches ``tile_max``); ``mask``: masked tiles
    (relative to ``max_use``)."""

    threshold: float
    top_sw: bool = False
    mask: bool = False
    code: tuple = ()  # the C lines, written from these fields by tcgen05/softmax_text.py

    def describe(self) -> str:
        how = "by its column's exp2 (hardware or software)" if self.top_sw else "by ex2.approx"
        return f"softmax.top_p  row_adj += bf16(p_top) - p_top, p_top {how}"


class ColumnLoop(Node):
    """Unrolled loop over S/P columns: ``c0`` from ``start`` by ``step`` while
    it stays in [lo, hi) (descending when ``step`` < 0)."""

    start: int
    stop: int
    step: int
    note: str
    body: tuple = ()

    def describe(self) -> str:
        return f"for c0 = {self.start}; c0 {'<' if self.step > 0 else '>='} {self.stop}; c0 += {self.step}  // {self.note}"


class ScoresFromCache(Node):
    """``float s[width]`` = S columns c0.. from the register cache (ch.10)."""

    width: int
    cache_from: int

    def describe(self) -> str:
        return f"s[0:{self.width}] = s_cache[c0 - {self.cache_from} ...]"


class ScoresFromTmem(Node):
    """``float s[width]`` = S columns c0.. read again from TMEM in loads of
    ``load_width`` columns, each waited (blog ch.1 §B)."""

    s_col: str
    width: int
    load_width: int
    mask: bool = False
    mods: str = ""  # with mods: the statement putting each re-read score through mod_entry (before the mask)

    def describe(self) -> str:
        m = "; mask columns >= col_lim" if self.mask else ""
        return f"s[0:{self.width}] = tcgen05.ld x{self.load_width} S[tmem {self.s_col} + c0]; wait::ld{m}"


class ExpScores(Node):
    """``float p[width]`` = exp of the scaled scores minus the row max.

    ``mode``: ``expf`` (``__expf(s * scale - max)``, blog ch.1) or ``ex2``
    (``ex2.approx.ftz(s * scale_log2 - max)``, ch.8). ``ranges``: (lo, hi,
    ``hw``|``sw``) column ranges of every ``group`` columns of the chunk,
    ``sw`` through the degree-3 polynomial on the FMA pipes (ch.9).
    ``packed``: scale-and-subtract of column pairs with ``fma.rn.f32x2``
    (PTX ISA 9.7.3.5)."""

    width: int
    mode: str
    ranges: tuple
    packed: bool
    group: int = 16
    max_var: str = "row_max"
    neg: str = "exp_neg"  # P's addend: exp_neg, or in masked tiles with ch.11's threshold neg_use (0 without a key)

    def describe(self) -> str:
        parts = ", ".join(f"[{lo},{hi}) {kind}" for lo, hi, kind in self.ranges)
        return (f"p[0:{self.width}] = {self.mode}(s*scale - max){' as f32x2 pairs' if self.packed else ''}: "
                f"of every {self.group} columns {parts}")


class PackP(Node):
    """``uint32_t pk[width / 2]`` = P as BF16 pairs (``cvt.rn.bf16x2.f32``)."""

    width: int

    def describe(self) -> str:
        return f"pk[0:{self.width // 2}] = bf16x2(p)"


class RowsumAdd(Node):
    """Rowsum += this chunk's P. ``kind``: ``fp32`` (P before rounding, as
    FlashAttention-4) or ``bf16`` (the rounded P that PV consumes).
    ``acc``: the accumulator; ``acc_type``: ``float`` (one chain), ``float2``
    (two chains, ``add.f32x2`` when ``packed``) or ``pair`` (two scalar chains
    ``rs_a``/``rs_b``)."""

    width: int
    kind: str
    acc: str
    acc_type: str
    packed: bool

    def describe(self) -> str:
        return f"{self.acc} ({self.acc_type}{', f32x2' if self.packed else ''}) += sum of {self.kind} P[0:{self.width}]"


class StoreP(Node):
    """Store ``pk`` to TMEM (``tcgen05.st``, P over dead S columns, ch.2) at
    ``p_col + c0 / 2`` or into the K-major P tile in SMEM (ch.1)."""

    width: int
    p_col: Optional[str] = None
    p_buf: Optional[str] = None

    def describe(self) -> str:
        dst = f"tmem {self.p_col} + c0/2" if self.p_col else f"smem {self.p_buf} (K-major)"
        return f"store P[0:{self.width}] -> {dst}"


class TmemWait(Node):
    """``tcgen05.wait::ld`` or ``::st`` (PTX ISA 9.7.16.8.5)."""

    kind: str
    note: str = ""

    def describe(self) -> str:
        return f"tcgen05.wait::{self.kind}" + (f"  // {self.note}" if self.note else "")


class RescaleO(Node):
    """O *= rescale over this warp's 32 lanes of O (blog ch.1 §B, 11, 12).

    Attributes:
        o_col: TMEM column of O.
        ncols: O columns (head_dim).
        width: columns per tcgen05.ld/st.
        packed: multiply pairs with ``mul.f32x2``.
        source: ``reg`` (softmax warps) or ``smem`` (correction warps read the
            factor the softmax warps published, ch.12); ``q``: its Q stage.
        skip_unit: skip the warp's pass when no row rebased (ch.11).
        inflight: loads issued before one ``tcgen05.wait::ld``.
        wait_each: wait for each group of loads before using the registers;
            else (minor 15's deferred waits) the multiplies use the loaded
            registers directly and one ``wait::ld`` precedes the arrive.
    """

    o_col: str
    ncols: int
    width: int
    packed: bool
    source: str = "reg"
    q: str = "q"
    skip_unit: bool = False
    inflight: int = 1
    wait_each: bool = True

    def describe(self) -> str:
        s = " (skipped when no row of the warp rebased)" if self.skip_unit else ""
        waits = f"{self.inflight} x{self.width} loads per wait" if self.wait_each else \
            f"x{self.width} loads, one deferred wait::ld"
        return f"rescale.o O[tmem {self.o_col}] *= factor from {self.source} ({waits}{', f32x2' if self.packed else ''}){s}"


class StoreStats(Node):
    """Softmax publishes a per-row value to SMEM for the correction warps:
    ``what`` = ``scale`` (this tile's rescale factor), ``rowsum`` (final) or
    ``rowmax`` (final, for the LSE). With ``lse_adjust`` the rowsum published
    is ``row_sum + row_adj`` (the FP32 rowsum plus the BF16 rounding of each
    tile's largest P, O's normaliser) and the row max is shifted by
    ``lg2(row_sum / (row_sum + row_adj))`` so that the LSE comes from the
    exact FP32 rowsum, see :func:`b200c.codegen.tcgen05.softmax.top_p_rounding`."""

    q: str
    what: str
    lse_adjust: bool = False

    def describe(self) -> str:
        return f"stats.store {self.what}[q={self.q}][row]"


class Epilogue(Node):
    """O / rowsum -> BF16 -> global memory for this warp's 32 rows (blog ch.1),
    rows past S_q not stored. ``rowsum``: ``reg`` (softmax warps) or ``smem``
    (correction warps); ``q``: the Q stage; ``packed``: normalize with
    ``mul.f32x2``. Rows with a zero rowsum (no visible key) store 0. When the
    runtime passes an LSE buffer, the row's log-sum-exp (natural log; -inf
    for no key) is stored too, from the row max in ``mode`` units. ``width``:
    O columns per TMEM load (16 or 32). ``lse_adjust``: O is normalised by
    ``row_sum + row_adj`` and the LSE uses the exact FP32 ``row_sum`` (as
    :class:`StoreStats`; softmax warps only, the correction warps read the
    shifted row max)."""

    o_col: str
    ncols: int
    q: str
    rowsum: str = "reg"
    packed: bool = False
    mode: str = "ex2"
    width: int = 32
    lse_adjust: bool = False
    sinks: bool = False  # a per-head sink logit joins the denominator (and the LSE), not O
    split: bool = False  # split-KV: FP32 O and the LSE to the workspace (b200c/codegen/work.py), the sink at the merge
    split_sinks: bool = False  # split-KV with sinks: a call of one split stores O as the unsplit kernel, sink included

    def describe(self) -> str:
        if self.split:
            return (f"epilogue O[tmem {self.o_col}] / rowsum({self.rowsum}) -> split-KV workspace (fp32, Q stage "
                    f"{self.q}); one split: -> out (bf16)")
        return (f"epilogue O[tmem {self.o_col}] / rowsum({self.rowsum}) -> out (bf16, Q tile w.q_tile + {self.q})"
                + (", attention sinks" if self.sinks else ""))


class CtaSync(Node):
    """Named barrier 1 over the role threads (not the emulator warp), with the
    writers' fences before it (``fence.proxy.async`` for P in SMEM,
    ``tcgen05.wait::st`` + ``fence::before_thread_sync`` for TMEM) and
    ``tcgen05.fence::after_thread_sync`` after it."""

    threads: int
    proxy_fence: bool = False
    tcgen05_fences: bool = True

    def describe(self) -> str:
        pre = "fence.proxy.async; " if self.proxy_fence else ""
        pre += "tcgen05.wait::st; tcgen05.fence::before_thread_sync; " if self.tcgen05_fences else ""
        post = "; tcgen05.fence::after_thread_sync" if self.tcgen05_fences else ""
        return f"{pre}bar.sync 1, {self.threads}{post}"


class IssueEnd(Node):
    """The MMA issuer issues nothing more (emulator STOP; nothing natively).
    ``elect``: the whole warp reaches it, one elected lane ends the issue."""

    elect: bool = False

    def describe(self) -> str:
        return "tcgen05 issue end"


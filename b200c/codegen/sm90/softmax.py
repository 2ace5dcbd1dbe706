"""The sm_90a consumer's online softmax, decided here in Python: the device function
``softmax_tile`` (FlashAttention-3's softmax on the S accumulator registers) and ``rescale_o``,
written as C lines from the shared numerics rules (:mod:`b200c.codegen.softmax_rules`: exp2 mode,
software-exp2 registers, NaN row max, rebase test, top-P rounding). The templates of
:class:`~.ir.SoftmaxFn` / :class:`~.ir.RescaleFn` only print the lines.

Register layout (PTX ISA 9.7.15.5.1.1.1, wgmma D fragment): accumulator register ``4i + {0,1}``
belongs to row ``lane / 4`` of the warp's 16 rows, ``4i + {2,3}`` to row ``lane / 4 + 8``; columns
``8i + 2 (lane % 4) + {0,1}``. A row is spread over the 4 lanes of a quad.
"""
from __future__ import annotations

import msgspec

from .. import softmax_rules as rules
from ..mod_kernel import has_mods, has_score_mod, kv_col0
from .ir import ApplyModsFn, RescaleFn, Softmax, SoftmaxFn, StoreOFn


def softmax_fn(s, masked: bool = False, row_bias: bool = False, relative_limits: bool = False) -> SoftmaxFn:
    """The ``softmax_tile`` (``masked``: ``softmax_tile_masked``; ``row_bias``: ``softmax_tile_biased``)
    definition of a schedule (its decisions, then its lines). ``relative_limits``: the masked tile compares
    each column index against the row's limit minus the thread's first column, so every compare takes an
    immediate. Both forms are the same mask; how ptxas allocates around them differs by kernel and release,
    so :func:`b200c.codegen.sm90.lower` picks the form per kernel from measurements (its comment)."""
    n = SoftmaxFn(rules.exp_mode(s), s.rescale_threshold, s.sw_exp2_per16, nan=rules.nan_max(s),
                  top_p=rules.top_p_rounding(s), top_sw_from=rules.top_p_sw_from(s), masked=masked or row_bias,
                  row_bias=row_bias, relative_limits=relative_limits and masked and not row_bias)
    return msgspec.structs.replace(n, code=softmax_lines(n))


def store_fn(s, sinks: bool = False, split: bool = False) -> StoreOFn:
    """The ``store_o`` definition (the epilogue: O / l and the LSE; ``sinks``: with the per-head sink
    logit in the denominator; ``split``: split-KV, FP32 O and the LSE of the split to the workspace, the
    sink joining at the merge instead)."""
    n = StoreOFn(rules.exp_mode(s), rules.top_p_rounding(s), sinks and not split, split, split and sinks)
    return msgspec.structs.replace(n, code=store_lines(n))


def rescale_fn(s) -> RescaleFn:
    """The ``rescale_o`` definition (skips a warp none of whose rows rebased: blog ch.11)."""
    skip = s.rescale_threshold is not None
    return RescaleFn(skip, code=rescale_lines(skip))


def apply_mods_fn(plan) -> ApplyModsFn:
    """The ``apply_mods`` definition of a kernel with a score_mod or mask_mod (and ``apply_score_bias``
    when the score_mod is a bias split per row and per key: :func:`biased`)."""
    return ApplyModsFn(code=apply_mods_lines(plan) + (apply_score_bias_lines(plan) if biased(plan) else ()))


def biased(plan) -> bool:
    """Whether the whole tiles take the score_mod as ``s + slope * k`` per score plus a per-row offset
    (:func:`b200c.codegen.mods.score_bias_parts`: ALiBi, a per-head bias) handed to
    ``softmax_tile_biased``: one FMA per score (none for a bias that is the same for the whole row)."""
    from ..mods import score_bias_parts

    return has_score_mod(plan.mods) and bool(score_bias_parts(plan.mods))


# the widest S tile whose kernels hold the work item's row bias across the K/V loop without spilling (ALiBi,
# nvcc 13.0, softmax_regs 232: 160 / 176 columns spill-free at head dim 64 / 128, 192 / 224 at head dim 64
# spilled 20 / 84 B)
ROW_BIAS_MAX_BLOCK_N = 176


def row_bias_per_item(plan) -> bool:
    """Whether the split bias of a :func:`biased` kernel is evaluated once per work item (``row_bias_item``
    into ``rbias`` before the K/V loop, at the key where the bias crosses zero; each tile then adds the
    slope times its distance from there) rather than per whole tile at the tile's own column. Per item
    without a mask_mod and on S tiles of at most :data:`ROW_BIAS_MAX_BLOCK_N` columns; otherwise the values
    held across the loop made ptxas spill (with a mask_mod, whose partial tiles evaluate both functions per
    score: ALiBi with a document mask at the mods presets 48 -> 72 B at head dim 128, causal & document
    64 -> 112 B; the head dim 64 preset's 224 columns: 84 B; nvcc 13.0)."""
    return biased(plan) and plan.mods.mask_mod is None and plan.tile.block_n <= ROW_BIAS_MAX_BLOCK_N


def item_row_bias(head: str) -> str:
    """C expression of a work item's ``RowBias`` for query head ``head`` (:func:`apply_score_bias_lines`:
    ``row_bias_item``, evaluated once before the K/V loop)."""
    return f"row_bias_item(c, w, {head}, row_in_seq)"


def tile_row_bias(head: str, col: str) -> str:
    """C expression of the ``RowBias`` of the whole tile whose first key column is ``col``, evaluated
    there (distance 0: the kernels that do not hold it across the loop, :func:`row_bias_per_item`)."""
    return f"row_bias(c, w, {head}, row_in_seq, {col})"


def apply_score_bias_lines(plan) -> tuple:
    """The lines of ``row_bias`` (the bias's per-key slope and its value at a reference key for each of
    the thread's two rows, raw score units), ``row_bias_item`` (the same at the key where the first row's
    bias crosses zero, clamped into the sequence) and ``apply_score_bias`` (per whole tile: the rows'
    offsets at the tile's first column, one FMA each from the reference, and ``slope * k`` added per
    score). The bias is ``base + slope * kv_idx`` along the row
    (:func:`b200c.codegen.mods.score_bias_parts`), so one evaluation serves every tile of the work item
    (:func:`row_bias_per_item`: the slope's load and the index arithmetic leave the K/V loop); the
    other kernels evaluate it per tile at the tile's own column (distance 0).

    Why the zero crossing: an offset ``base + slope * (col - ref)`` is exact to FP32 rounding of the
    bias at ``col`` plus that of ``base``; near the crossing ``base`` is at most one key's slope.
    From a fixed key it cancels two values of size ``slope * distance`` where the bias is small, the
    tiles that carry the softmax: ALiBi (``slope * (kv_idx - q_idx)``) from key 0 was 3.6e-2 logits
    off near ``q_idx`` = 2^21, and ``-slope * kv_idx`` from the row's index as much near key 0. A bias
    without a per-key part (a per-head or per-row bias) adds nothing per score."""
    from ..mods import bias_varies_along_the_row, score_bias_parts

    varies = bias_varies_along_the_row(plan.mods)
    per_key = (
        "#pragma unroll",
        "  for (int i = 0; i < S_REGS / 4; ++i)",
        "#pragma unroll",
        "    for (int e = 0; e < 4; ++e) s[4 * i + e] = fmaf(b.slope[e >> 1], (float)(8 * i + (e & 1)), s[4 * i + e]);",
    ) if varies else ("  // the bias has no per-key part (slope 0)",)
    crossing = (
        "  float slope, base;  // the first row's bias at key 0: the key where it crosses zero",
        "  score_bias_parts(c, w.b, h, min(row0, w.len_q - 1), 0, slope, base);",
        "  const float k = fminf(fmaxf(-__fdividef(base, slope), 0.0f), (float)(w.len_kv - 1));  // NaN (slope 0): 0",
        "  return row_bias(c, w, h, row0, __float2int_rn(k));",
    ) if varies else ("  return row_bias(c, w, h, row0, 0);  // no per-key part: any reference",)
    return (
        *score_bias_parts(plan.mods),
        "",
        "// The score_mod's bias for this thread's two rows (row0, row0 + 8), raw score units: slope[r] per key",
        "// and base[r] at key ref + 2 (lane % 4), the fragment's first column if a tile started at key ref",
        "struct RowBias {",
        "  float slope[2];",
        "  float base[2];",
        "  int ref;",
        "};",
        "__device__ __forceinline__ RowBias row_bias(const Ctx& c, const WorkItem& w, const int h, const int row0,",
        "                                            const int ref) {",
        "  const int col0 = ref + 2 * (int)(threadIdx.x & 3);",
        "  RowBias b;",
        "  b.ref = ref;",
        "  score_bias_parts(c, w.b, h, min(row0, w.len_q - 1), col0, b.slope[0], b.base[0]);",
        "  score_bias_parts(c, w.b, h, min(row0 + 8, w.len_q - 1), col0, b.slope[1], b.base[1]);",
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r) {",
        "    b.slope[r] *= c.inv_scale;",
        "    b.base[r] *= c.inv_scale;",
        "  }",
        "  return b;",
        "}",
        "// The work item's: at the key where the first row's bias crosses zero, clamped into the sequence (the",
        "// offsets from there are exact to FP32 rounding of the bias itself where it is small)",
        "__device__ __forceinline__ RowBias row_bias_item(const Ctx& c, const WorkItem& w, const int h, const int row0) {",
        *crossing,
        "}",
        "// The bias on the whole S tile whose first key column is col: rb[r] = the bias at the fragment's first",
        "// column of row r (col - ref is exact in FP32: keys are below 2^21 when the bias varies along the row,",
        "// small_indices), and s += slope * k per score (k: the column within the thread's fragment, a",
        "// constant); the softmax adds rb per row (softmax_tile_biased)",
        "__device__ __forceinline__ void apply_score_bias(float (&s)[S_REGS], const RowBias& b, const int col, "
        "float (&rb)[2]) {",
        "  const float dk = (float)(col - b.ref);",
        "  rb[0] = fmaf(b.slope[0], dk, b.base[0]);",
        "  rb[1] = fmaf(b.slope[1], dk, b.base[1]);",
        *per_key,
        "}",
    )


def _fragment_col0(plan) -> str:
    """The line defining ``col0``: the first key column (in the sequence) of this thread's S fragment in
    K/V tile ``j`` (columns ``col0 + 8i + (e & 1)``, PTX ISA 9.7.15.5.1.1.1)."""
    return f"  const int col0 = {kv_col0(plan)} + 2 * (int)(threadIdx.x & 3);"


def apply_mods_lines(plan) -> tuple:
    """The lines of ``apply_mods``: S register ``4i + e`` of this thread holds row ``row0 + 8 (e >> 1)``
    and column ``8i + 2 (lane % 4) + (e & 1)`` of the tile (PTX ISA 9.7.15.5.1.1.1)."""
    return (
        "// score_mod / mask_mod on one S tile in place: register 4i + e holds row row0 + 8 (e >> 1) and column",
        "// 8i + 2 (lane % 4) + (e & 1) of the tile (wgmma D fragment, PTX 9.7.15.5.1.1.1); each through mod_entry",
        "__device__ __forceinline__ void apply_mods(float (&s)[S_REGS], const Ctx& c, const WorkItem& w, const int h, "
        "const int row0,",
        "                                           const int j, const bool masked) {",
        _fragment_col0(plan),
        "#pragma unroll",
        "  for (int i = 0; i < S_REGS / 4; ++i)",
        "#pragma unroll",
        "    for (int e = 0; e < 4; ++e)",
        "      s[4 * i + e] = mod_entry(c, w, h, row0 + 8 * (e >> 1), col0 + 8 * i + (e & 1), 8 * i + (e & 1), s[4 * i + e],",
        "                               masked);",
        "}",
    )


def softmax_node(plan, tile: str, masked=None, q: str = "q") -> Softmax:
    """The softmax of K/V tile ``tile`` (visit number, a C expression); ``masked``: known to be a masked
    (True) or whole (False) tile, None: decided at run time. With mods the call lines are written here:
    ``apply_mods`` first (score_mod on every tile, mask_mod on the masked ones), and whole tiles take
    the -inf-safe ``softmax_tile_masked`` with no column limit when a score_mod may give -inf."""
    if not has_mods(plan.mods):
        return Softmax(tile, masked, q)
    head = f"q_head_of(c, w, {q})"
    lims = f"col_limit(c, w, row_in_seq, {tile}), col_limit(c, w, row_in_seq + 8, {tile})"
    masked_lines = [f"apply_mods(s, c, w, {head}, row_in_seq, {tile}, true);",
                    f"softmax_tile_masked(s, st, c.scale_units, {lims});"]
    if biased(plan):
        col = kv_col0(plan, tile)
        bias = "rbias" if row_bias_per_item(plan) else tile_row_bias(head, col)
        whole_lines = ["float rb[2];  // the score_mod's bias at the fragment's first column, per row",
                       f"apply_score_bias(s, {bias}, {col}, rb);",
                       "softmax_tile_biased(s, st, c.scale_units, rb[0], rb[1]);"]
    elif has_score_mod(plan.mods):
        whole_lines = [f"apply_mods(s, c, w, {head}, row_in_seq, {tile}, false);",
                       "softmax_tile_masked(s, st, c.scale_units, BLOCK_N, BLOCK_N);  // a score_mod may give -inf"]
    else:
        whole_lines = ["softmax_tile(s, st, c.scale_units);"]
    if masked is None:
        code = [f"if ({tile} < w.n_full) {{", *("  " + x for x in whole_lines), "} else {",
                *("  " + x for x in masked_lines), "}"]
    else:
        code = masked_lines if masked else whole_lines
    return Softmax(tile, masked, q, code=tuple(code))


def _exp(mode: str) -> str:
    return "ex2_approx_ftz" if mode == "ex2" else "__expf"


def softmax_lines(n: SoftmaxFn) -> tuple:
    """The lines of ``softmax_tile`` (or ``softmax_tile_masked``) for the decisions of ``n``.

    The masked variant runs on the K/V tiles some row does not see whole (the partial last tile,
    the causal diagonal; :mod:`b200c.codegen.work`): each of the thread's two rows masks the
    columns >= its limit to -inf, and a row that has seen no key yet keeps its max at -inf with a
    rescale factor of 1 and P = 0 (its exponent subtracts 0, not -inf: NaN otherwise), per the
    shared rules' masked form of the rebase test."""
    thr = n.threshold is not None
    mx = rules.max_fn(n.nan)
    exp_words = ("exp2" if n.mode == "ex2" else "exp") + "(S c - m c) (one FFMA + one " + (
        "MUFU.EX2, the scale folded into log2 units (blog ch.8)" if n.mode == "ex2" else "__expf") + "),"
    out = [
        "// Softmax of one S tile in place (S -> unnormalised P, FP32), FA3's online softmax: tile row max",
        "// (4 independent chains, then 2 quad shuffles), rebase of the running max"
        + (" only when it grew" if thr else ", P = " + exp_words),
    ]
    if thr:
        out.append(f"// by >= {n.threshold} log2 units (blog ch.11), P = {exp_words}")
    if n.row_bias:
        out += [
            "// partial row sums in 4 independent chains. The tile's scores are s + rb0 / rb1 (this lane's offsets of its",
            "// two rows, raw units, from the score_mod's bias): each lane offsets its own max before the quad shuffles,",
            "// the exponent adds the offset to its FFMA addend (-m c). -inf-safe as softmax_tile_masked (a bias may be",
            "// -inf); no column limits.",
            "__device__ __forceinline__ void softmax_tile_biased(float (&s)[S_REGS], SoftmaxState& st, const float sc, "
            "const float rb0,",
            "                                                    const float rb1) {",
            "  const float rb[2] = {rb0, rb1};",
        ]
        if n.top_p:
            out.append("  const int q4 = threadIdx.x & 3;")
    elif n.masked:
        out += [
            "// partial row sums in 4 independent chains. Masked K/V tiles (the partial last tile, the causal",
            "// diagonal): the columns >= lim0 / lim1 of the thread's two rows are -inf first, and a row that has",
            "// seen no key yet keeps P = 0 (its max stays -inf, the exponent subtracts 0). Quad reductions:",
            "// shfl.sync.bfly (PTX 9.7.9.6); the warp-uniform rescale flag: vote.sync.any (9.7.13.9).",
            "__device__ __forceinline__ void softmax_tile_masked(float (&s)[S_REGS], SoftmaxState& st, const float sc, "
            "const int lim0,",
            "                                                    const int lim1) {",
            "  const int q4 = threadIdx.x & 3;",
            *(("  // the limits relative to the thread's first column 2 (lane % 4): each compare takes an immediate",
               "  const int lim[2] = {lim0 - 2 * q4, lim1 - 2 * q4};") if n.relative_limits else
              ("  const int lim[2] = {lim0, lim1};",)),
            "#pragma unroll",
            "  for (int i = 0; i < S_REGS / 4; ++i)",
            "#pragma unroll",
            "    for (int e = 0; e < 4; ++e)",
            ("      if (8 * i + (e & 1) >= lim[e >> 1]) s[4 * i + e] = -INFINITY;" if n.relative_limits else
             "      if (8 * i + 2 * q4 + (e & 1) >= lim[e >> 1]) s[4 * i + e] = -INFINITY;"),
        ]
    else:
        out += [
            "// partial row sums in 4 independent chains, on a K/V tile every row sees whole (masked tiles:",
            "// softmax_tile_masked). Quad reductions: shfl.sync.bfly (PTX 9.7.9.6); the warp-uniform rescale",
            "// flag: vote.sync.any (9.7.13.9).",
            "__device__ __forceinline__ void softmax_tile(float (&s)[S_REGS], SoftmaxState& st, const float sc) {",
        ]
        if n.top_p:
            out.append("  const int q4 = threadIdx.x & 3;")
    if n.nan:
        out.append("  // max.NaN: a NaN score makes the row max NaN; the software exp2 alone would lose it (it clamps "
                   "at -127)")
    out += [
        "  float mx[2][4];  // tile row max: 2 rows x 4 chains",
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r)",
        "#pragma unroll",
        "    for (int k = 0; k < 4; ++k) mx[r][k] = -INFINITY;",
        "#pragma unroll",
        "  for (int i = 0; i < S_REGS / 4; ++i) {",
        f"    mx[0][i & 3] = {mx}(mx[0][i & 3], {mx}(s[4 * i + 0], s[4 * i + 1]));",
        f"    mx[1][i & 3] = {mx}(mx[1][i & 3], {mx}(s[4 * i + 2], s[4 * i + 3]));",
        "  }",
    ]
    if n.top_sw_from is not None:
        out += [
            "  // the software-exp2 registers' own row max: the tile's largest P is rounded as the exp2 of its "
            "column",
            "  // computed it (the polynomial and ex2.approx may round to different BF16 values)",
            "  float sw_max[2] = {-INFINITY, -INFINITY};",
            "#pragma unroll",
            "  for (int i = 0; i < S_REGS; ++i)",
            f"    if ((i % 16) >= {n.top_sw_from}) sw_max[(i >> 1) & 1] = fmaxf(sw_max[(i >> 1) & 1], s[i]);",
            "#pragma unroll",
            "  for (int r = 0; r < 2; ++r) {",
            *(["    sw_max[r] += rb[r];"] if n.row_bias else []),
            "    sw_max[r] = fmaxf(sw_max[r], __shfl_xor_sync(0xffffffffu, sw_max[r], 1));",
            "    sw_max[r] = fmaxf(sw_max[r], __shfl_xor_sync(0xffffffffu, sw_max[r], 2));",
            "  }",
        ]
    out.append("  float neg_ms[2];  // -m * c: the FFMA addend of the exponent")
    out.append("  float exp_sc[2];  // c, or for rows whose |m * c| reaches 2^30 the power of two at or below c "
               "(softmax_rules.huge_lines)")
    if n.top_p:
        out.append("  float tile_max[2];  // the tile's row max (for the rounding of its largest P)")
    if thr:
        out.append("  bool changed = false;")
    out += [
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r) {",
        f"    float t = {mx}({mx}(mx[r][0], mx[r][1]), {mx}(mx[r][2], mx[r][3]));",
        *(["    t += rb[r];  // this lane's offset (the quad's lanes hold different columns): the row max in score units"]
          if n.row_bias else []),
        f"    t = {mx}(t, __shfl_xor_sync(0xffffffffu, t, 1));",
        f"    t = {mx}(t, __shfl_xor_sync(0xffffffffu, t, 2));",
        f"    const float m_new = {mx}(st.m[r], t);" + (
            "  // -inf while the row has seen no key; NaN if a score is NaN" if n.masked else
            "  // finite (every row sees the whole tile) unless a score is NaN"),
    ]
    if n.top_p:
        out.append("    tile_max[r] = t;")
    if thr:
        test = rules.rebase_test("(m_new - st.m[r]) * sc", "m_new", n.threshold, n.nan, masked=n.masked)
        out += [
            f"    // blog ch.11: keep the old max (P may reach 2^{n.threshold}) unless it grew by >= the threshold; the",
            "    // first tile a row sees always rebases (m = -inf)",
            f"    const bool rebase = {test};" + ("  // a NaN max rebases: NaN reaches l and O" if n.nan else ""),
            f"    st.scale[r] = rebase ? {_exp(n.mode)}((st.m[r] - m_new) * sc) : 1.f;",
            "    st.m[r] = rebase ? m_new : st.m[r];",
            "    changed |= rebase;",
        ]
    elif n.masked:
        out += [f"    st.scale[r] = m_new == -INFINITY ? 1.f : {_exp(n.mode)}((st.m[r] - m_new) * sc);  // no key yet: "
                "nothing to rescale",
                "    st.m[r] = m_new;"]
    else:
        out += [f"    st.scale[r] = {_exp(n.mode)}((st.m[r] - m_new) * sc);  // exp(-inf) = 0 on the first tile",
                "    st.m[r] = m_new;"]
    huge = [f"    // |m * c| >= 2^30: P from the power-of-two scale at or below c, exact at the max (FP32 logits of 1e30 or a",
            "    // row of finfo.min masks would otherwise overflow exp2: the FFMA's product is exact, m * c rounded)"]
    if n.row_bias:
        out += [*huge,
                f"    exp_sc[r] = {rules.exp_scale('st.m[r] * sc', 'sc')};",
                "    // no key yet: P = exp(-inf) = 0, not NaN",
                "    neg_ms[r] = st.m[r] == -INFINITY ? -INFINITY : (rb[r] - st.m[r]) * exp_sc[r];",
                "  }"]
    elif n.masked:
        out += ["    const float m_use = st.m[r] == -INFINITY ? 0.f : st.m[r];  // no key yet: P = exp(-inf) = 0, not NaN",
                *huge,
                f"    exp_sc[r] = {rules.exp_scale('m_use * sc', 'sc')};",
                "    neg_ms[r] = -m_use * exp_sc[r];",
                "  }"]
    else:
        out += [*huge,
                f"    exp_sc[r] = {rules.exp_scale('st.m[r] * sc', 'sc')};",
                "    neg_ms[r] = -st.m[r] * exp_sc[r];", "  }"]
    if thr:
        out.append("  st.rescale = __any_sync(0xffffffffu, changed);")
    out += [
        "  float sum[2][4];  // partial row sums: 2 rows x 4 chains",
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r)",
        "#pragma unroll",
        "    for (int k = 0; k < 4; ++k) sum[r][k] = 0.f;",
        "#pragma unroll",
        "  for (int i = 0; i < S_REGS; ++i) {",
        "    const int r = (i >> 1) & 1;",
        "    const float x = fmaf(s[i], exp_sc[r], neg_ms[r]);",
    ]
    if n.sw_per16:
        first_sw = rules.exp_ranges(n.sw_per16)[-1][0]
        out += [f"    // blog ch.9: the last {n.sw_per16} of every 16 registers use the FMA-pipe polynomial exp2",
                f"    const float pv = ((i % 16) >= {first_sw}) ? exp2_poly(x) : ex2_approx_ftz(x);"]
    else:
        out.append(f"    const float pv = {_exp(n.mode)}(x);")
    out += [
        "    s[i] = pv;",
        "    sum[r][(i >> 2) & 3] += pv;",
        "  }",
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r) st.l[r] = fmaf(st.l[r], st.scale[r], (sum[r][0] + sum[r][1]) + (sum[r][2] + "
        "sum[r][3]));",
    ]
    if n.top_p:
        out += [
            f"  // with the threshold the tile's largest P reaches 2^{n.threshold} and enters PV rounded to BF16: O's "
            "normaliser",
            "  // takes that rounding too (one thread of the row's quad adds it into adj, rescaled like l); the LSE uses "
            "the",
            "  // exact l (the shared top-P rule, as the sm_100a kernels)",
            "#pragma unroll",
            "  for (int r = 0; r < 2; ++r) {",
        ]
        # tile_max is in score units; with a row offset the top P is recomputed from it, equal to the P in the
        # registers up to the rounding of rb (its BF16 correction is approximate for offsets of ~1e3 and more)
        top_add = "neg_ms[r] - rb[r] * exp_sc[r]" if n.row_bias else "neg_ms[r]"
        if n.top_sw_from is not None:
            out += [f"    const float x_top = fmaf(tile_max[r], exp_sc[r], {top_add});",
                    "    const float p_top = sw_max[r] >= tile_max[r] ? exp2_poly(x_top) : ex2_approx_ftz(x_top);"]
        else:
            out.append(f"    const float p_top = ex2_approx_ftz(fmaf(tile_max[r], exp_sc[r], {top_add}));")
        keep = "q4 == 0 && tile_max[r] != -INFINITY" if n.masked else "q4 == 0"
        out.append(f"    st.adj[r] = fmaf(st.adj[r], st.scale[r], {keep} ? __bfloat162float(__float2bfloat16_rn(p_top)) "
                   "- p_top : 0.f);")
        out.append("  }")
    out.append("}")
    return tuple(out)


def store_lines(n: StoreOFn) -> tuple:
    """The lines of ``store_o``: quad-reduce the row sums (shfl.sync.bfly, PTX 9.7.9.6), O / l, BF16,
    32-bit stores of column pairs from the accumulator fragment; the LSE (shared rule)."""
    # the running max is in raw S units; m * sc is in the exponent's units (log2 with ex2, natural with expf)
    m_log2 = "st.m[r] * sc" if n.mode == "ex2" else "st.m[r] * sc * 1.4426950408889634f"
    norm = "l + a" if n.top_p else "l"
    out = [
        "// Epilogue: quad-reduce the row sums (shfl.sync.bfly, PTX 9.7.9.6), O / l, BF16, 32-bit stores of column",
        "// pairs straight from the accumulator fragment; rows past the sequence are not stored. A row that saw no key",
        "// has l = 0: O = 0 and LSE = -inf. The LSE (natural log) is written when the call asks for it (c.lse).",
        "__device__ __forceinline__ void store_o(const float (&o)[O_REGS], const SoftmaxState& st, const Ctx& c,",
        "                                        const WorkItem& w, const int q) {",
        "  const int tid = threadIdx.x & 127;",
        "  const int warp = tid >> 5, lane = tid & 31;",
        "  const int row0 = q_tile_of(c, w, q) * BLOCK_M + warp * 16 + (lane >> 2);  // row in the sequence",
        "  const int64_t head = q_head_of(c, w, q);",
        "  const float sc = c.scale_units;",
        "  float inv[2];",
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r) {",
        "    float l = st.l[r];",
        "    l += __shfl_xor_sync(0xffffffffu, l, 1);",
        "    l += __shfl_xor_sync(0xffffffffu, l, 2);",
    ]
    if n.top_p:
        out += ["    float a = st.adj[r];  // the top-P roundings: O's normaliser only",
                "    a += __shfl_xor_sync(0xffffffffu, a, 1);",
                "    a += __shfl_xor_sync(0xffffffffu, a, 2);"]
    if n.sinks:
        out += [
            "    // attention sink: the head's logit joins the denominator (not O), all in log2 units rebased to",
            "    // mx = max(row max, sink) so neither term overflows; a row that saw no key: O = 0, LSE = the sink",
            f"    const float m2 = {m_log2}, snk = c.sinks[head] * 1.4426950408889634f, mx = fmaxf(m2, snk);",
            "    const float f = st.m[r] == -INFINITY ? 0.f : ex2_approx_ftz(m2 - mx), es = ex2_approx_ftz(snk - mx);",
            f"    inv[r] = f / (({norm}) * f + es);",
        ]
        lse = rules.lse_natural("mx", "l * f + es")
    else:
        out.append(f"    inv[r] = l == 0.f ? 0.f : 1.f / ({norm});  // no visible key: the row stays 0 (a NaN sum stays "
                   "NaN)")
        lse = f"l == 0.f ? -INFINITY : {rules.lse_natural(m_log2, 'l')}"
    if n.split:
        # one split (the count is per call): the rows are final, stored as the unsplit kernel stores them (BF16 O,
        # the LSE, the sink) and the host launches no combine kernel (SplitLaunch.merges)
        direct = store_lines(msgspec.structs.replace(n, split=False, sinks=n.split_sinks, split_sinks=False))
        body = direct[direct.index("  float inv[2];"):-1]
        out = out[:out.index("  float inv[2];")] + [
            "  if (c.num_splits == 1) {  // one split: no workspace, no combine"] + [
            "  " + line if line and not line.startswith("#") else line for line in body] + [
            "    return;", "  }"] + out[out.index("  float inv[2];"):]
        return tuple(out + [
            "    const int row = row0 + 8 * r;",
            "    if ((lane & 3) == 0 && row < w.len_q) c.lse_part[part_row(c, w, head, row)] =",
            f"        {lse};",
            "  }",
            "  // split-KV: this split's O / l in FP32 (b200c/codegen/work.py); the combine kernel merges the splits",
            "#pragma unroll",
            "  for (int r = 0; r < 2; ++r) {",
            "    const int row = row0 + 8 * r;",
            "    if (row < w.len_q) {  // rows past the sequence are not stored",
            "      float2* dst = reinterpret_cast<float2*>(c.o_part + part_row(c, w, head, row) * HEAD_DIM + 2 * (lane & 3));",
            "#pragma unroll",
            "      for (int i = 0; i < O_REGS / 4; ++i)  // columns 8i + 2 (lane % 4) + {0, 1}",
            "        dst[4 * i] = make_float2(o[4 * i + 2 * r] * inv[r], o[4 * i + 2 * r + 1] * inv[r]);",
            "    }",
            "  }",
            "}",
        ])
    out += [
        "    const int row = row0 + 8 * r;",
        "    if (c.lse != nullptr && (lane & 3) == 0 && row < w.len_q)",
        "      c.lse[(int64_t)w.tma_b * c.lse_stride_b + head * c.lse_stride_h + (int64_t)(w.q_row0 + row) * "
        "c.lse_stride_s] =",
        f"          {lse};",
        "  }",
        "  __nv_bfloat16* base = c.out + (int64_t)w.tma_b * c.out_stride_b + head * c.out_stride_h + 2 * (lane & 3);",
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r) {",
        "    const int row = row0 + 8 * r;",
        "    if (row < w.len_q) {  // rows past the sequence (zero-filled or the next sequence's) are not stored",
        "      uint32_t* dst = reinterpret_cast<uint32_t*>(base + (int64_t)(w.q_row0 + row) * c.out_stride_s);",
        "#pragma unroll",
        "      for (int i = 0; i < O_REGS / 4; ++i)  // columns 8i + 2 (lane % 4) + {0, 1}",
        "        dst[4 * i] = pack_bf16x2(o[4 * i + 2 * r] * inv[r], o[4 * i + 2 * r + 1] * inv[r]);",
        "    }",
        "  }",
        "}",
    ]
    return tuple(out)


def rescale_lines(skip: bool) -> tuple:
    """The lines of ``rescale_o``."""
    out = ["// O *= the per-row factor of the last softmax before the next PV accumulates into it (FA3 rescale_o)"
           + (";" if skip else ".")]
    if skip:
        out.append("// blog ch.11: the warp skips it when none of its rows rebased.")
    out.append("__device__ __forceinline__ void rescale_o(float (&o)[O_REGS], const SoftmaxState& st) {")
    if skip:
        out.append("  if (!st.rescale) return;")
    out += ["#pragma unroll", "  for (int i = 0; i < O_REGS; ++i) o[i] *= st.scale[(i >> 1) & 1];", "}"]
    return tuple(out)

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

from .. import softmax_rules as rules
from .ir import RescaleFn, SoftmaxFn


def softmax_fn(s) -> SoftmaxFn:
    """The ``softmax_tile`` definition of a schedule (its decisions, then its lines)."""
    mode = rules.exp_mode(s)
    n = SoftmaxFn(mode, s.rescale_threshold, s.sw_exp2_per16, nan=rules.nan_max(s), top_p=rules.top_p_rounding(s),
                  top_sw_from=rules.top_p_sw_from(s))
    return SoftmaxFn(n.mode, n.threshold, n.sw_per16, n.nan, n.top_p, n.top_sw_from, code=softmax_lines(n))


def rescale_fn(s) -> RescaleFn:
    """The ``rescale_o`` definition (skips a warp none of whose rows rebased: blog ch.11)."""
    skip = s.rescale_threshold is not None
    return RescaleFn(skip, code=rescale_lines(skip))


def _exp(mode: str) -> str:
    return "ex2_approx_ftz" if mode == "ex2" else "__expf"


def softmax_lines(n: SoftmaxFn) -> tuple:
    """The lines of ``softmax_tile`` for the decisions of ``n``."""
    thr = n.threshold is not None
    mx = rules.max_fn(n.nan)
    out = [
        "// Softmax of one S tile in place (S -> unnormalised P, FP32), FA3's online softmax: tile row max",
        "// (4 independent chains, then 2 quad shuffles), rebase of the running max"
        + (" only when it grew" if thr else ", P = "
           + ("exp2" if n.mode == "ex2" else "exp") + "(S c - m c) (one FFMA + one "
           + ("MUFU.EX2, the scale folded into log2 units (blog ch.8)" if n.mode == "ex2" else "__expf") + "),"),
    ]
    if thr:
        out.append(f"// by >= {n.threshold} log2 units (blog ch.11), P = {'exp2' if n.mode == 'ex2' else 'exp'}(S c - m c) "
                   "(one FFMA + one " + ("MUFU.EX2, the scale folded into log2 units (blog ch.8)" if n.mode == "ex2"
                                        else "__expf") + "),")
    out += [
        "// partial row sums in 4 independent chains. `valid_cols` < BLOCK_N masks the columns of a partial",
        "// last K/V tile to -inf. Quad reductions: shfl.sync.bfly (PTX 9.7.9.6); the warp-uniform rescale",
        "// flag: vote.sync.any (9.7.13.9).",
        "__device__ __forceinline__ void softmax_tile(float (&s)[S_REGS], SoftmaxState& st, const float sc, "
        "const int valid_cols) {",
        "  const int q4 = threadIdx.x & 3;",
        "  if (valid_cols < BLOCK_N) {",
        "#pragma unroll",
        "    for (int i = 0; i < S_REGS / 4; ++i)",
        "#pragma unroll",
        "      for (int e = 0; e < 4; ++e)",
        "        if (8 * i + 2 * q4 + (e & 1) >= valid_cols) s[4 * i + e] = -INFINITY;",
        "  }",
    ]
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
    top_ex2 = n.top_p  # the top-P rounding (threshold with ex2): the tile max is kept for it
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
            "    sw_max[r] = fmaxf(sw_max[r], __shfl_xor_sync(0xffffffffu, sw_max[r], 1));",
            "    sw_max[r] = fmaxf(sw_max[r], __shfl_xor_sync(0xffffffffu, sw_max[r], 2));",
            "  }",
        ]
    out.append("  float neg_ms[2];  // -m * c: the FFMA addend of the exponent")
    if top_ex2:
        out.append("  float tile_max[2];  // the tile's row max (for the rounding of its largest P)")
    if thr:
        out.append("  bool changed = false;")
    out += [
        "#pragma unroll",
        "  for (int r = 0; r < 2; ++r) {",
        f"    float t = {mx}({mx}(mx[r][0], mx[r][1]), {mx}(mx[r][2], mx[r][3]));",
        f"    t = {mx}(t, __shfl_xor_sync(0xffffffffu, t, 1));",
        f"    t = {mx}(t, __shfl_xor_sync(0xffffffffu, t, 2));",
        f"    const float m_new = {mx}(st.m[r], t);  // finite (every tile has a valid column) unless a score is NaN",
    ]
    if top_ex2:
        out.append("    tile_max[r] = t;")
    if thr:
        test = rules.rebase_test("(m_new - st.m[r]) * sc", "m_new", n.threshold, n.nan, masked=False)
        out += [
            f"    // blog ch.11: keep the old max (P may reach 2^{n.threshold}) unless it grew by >= the threshold; the",
            "    // first tile always rebases (m = -inf)",
            f"    const bool rebase = {test};" + ("  // a NaN max rebases: NaN reaches l and O" if n.nan else ""),
            f"    st.scale[r] = rebase ? {_exp(n.mode)}((st.m[r] - m_new) * sc) : 1.f;",
            "    st.m[r] = rebase ? m_new : st.m[r];",
            "    changed |= rebase;",
        ]
    else:
        out += [f"    st.scale[r] = {_exp(n.mode)}((st.m[r] - m_new) * sc);  // exp(-inf) = 0 on the first tile",
                "    st.m[r] = m_new;"]
    out += ["    neg_ms[r] = -st.m[r] * sc;", "  }"]
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
        "    const float x = fmaf(s[i], sc, neg_ms[r]);",
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
    if top_ex2:
        out += [
            f"  // with the threshold the tile's largest P reaches 2^{n.threshold} and enters PV rounded to BF16; the "
            "FP32 rowsum takes",
            "  // that rounding too (one thread of the row's quad adds it), as in the sm_100a kernels (measured: "
            "emulated",
            "  // and native s384 at 1.684e-2 against a 1.658e-2 tolerance without it)",
            "#pragma unroll",
            "  for (int r = 0; r < 2; ++r) {",
        ]
        if n.top_sw_from is not None:
            out += ["    const float x_top = fmaf(tile_max[r], sc, neg_ms[r]);",
                    "    const float p_top = sw_max[r] >= tile_max[r] ? exp2_poly(x_top) : ex2_approx_ftz(x_top);"]
        else:
            out.append("    const float p_top = ex2_approx_ftz(fmaf(tile_max[r], sc, neg_ms[r]));")
        out += ["    st.l[r] += q4 == 0 ? __bfloat162float(__float2bfloat16_rn(p_top)) - p_top : 0.f;", "  }"]
    out.append("}")
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

"""The C text of the tcgen05 softmax's decision-heavy nodes (:class:`~.ir.RowmaxPass`,
:class:`~.ir.Rebase`, :class:`~.ir.TopPRound`), written here from the nodes' fields and the shared
numerics rules (:mod:`b200c.codegen.softmax_rules`); their templates only print the lines
(``code``). Each function returns a tuple of lines (nested lines carry their indentation)."""
from __future__ import annotations

from .. import softmax_rules as rules


def rebase(n) -> tuple:
    """New running max and rescale factor (blog ch.1 §B, ch.8, ch.11); see :class:`~.ir.Rebase`."""
    out = []
    rowsum = ([f"{a} = mul_f32x2({a}, make_float2(rescale, rescale));" + ("  // the rowsum's f32x2 partial sums"
                                                                          if i == 0 else "")
               for i, a in enumerate(n.rowsum_pairs)] if n.rowsum_pairs
              else ["row_sum *= rescale;", ""])  # the blank line the template this replaced printed (goldens)
    no_key = "  // no key seen yet: nothing to rescale"
    raw = ["row_ref = {}(row_ref, tile_max);  // the raw score the running max comes from"]
    monotone = "  // = max(row_max, tile_max * scale): the rounded product is monotone (scale > 0)"
    if n.mode == "expf":
        out.append("// running rowmax in natural-log units; rescale old rowsum/O by exp(old - new) (blog ch.1 §B)")
        out.append(raw[0].format("fmaxf"))
        out.append("const float m_new = row_ref * c.softmax_scale;" + monotone)
        out.append("const float rescale = m_new == -INFINITY ? 1.f : __expf(row_max - m_new);" + no_key if n.mask else
                   "const float rescale = __expf(row_max - m_new);")
        out += rowsum
        out.append("row_max = m_new;")
    elif n.threshold is None:
        out.append("// rowmax kept in log2 units (scale folded with log2(e)); ex2.approx.ftz without the __expf "
                   "wrapper (blog ch.8)")
        out.append(raw[0].format(rules.max_fn(n.nan)) + ("; a NaN max stays NaN" if n.nan else ""))
        out.append("const float m_new = row_ref * c.scale_log2();" + monotone)
        factor = "ex2_approx_ftz(row_max - m_new)"
        if n.nan:  # a NaN or +inf max makes the rowsum NaN here (the pair polynomial does not keep NaN)
            factor = rules.nan_rescale("m_new", factor)
        out.append(f"const float rescale = m_new == -INFINITY ? 1.f : {factor};" + no_key
                   if n.mask else f"const float rescale = {factor};")
        out += rowsum
        out.append("row_max = m_new;")
    else:
        # with ch.11's threshold the running max changes only on a rebase: the row carries P's scale and addend
        # (exp_sc, exp_neg) and no max of its own: the max is -exp_neg in units of exp_sc (the scale, or for a
        # huge row a power of two, softmax_rules.carried_exp_scale), +inf before the row's first key; after the
        # K/V loops row_max comes from exp_neg alone (softmax_rules.carried_row_max). A separate max, or exp_sc
        # read after the loops, cost a register: the stage 18 preset's split-KV builds and stages 15-16 spilled
        # 20-44 B, measured
        thr = f"{float(n.threshold)!r}"
        out.append(f"// blog ch.11: keep the old rowmax unless the tile max exceeds it by >= {thr} (log2 units); the "
                   "running max is -exp_neg")
        out.append(f"const float m_cand = {rules.max_fn(n.nan)}(-exp_neg, tile_max * exp_sc);"
                   + ("  // a NaN row max stays NaN" if n.nan else ""))
        test = rules.rebase_test("(m_cand + exp_neg)", "m_cand", n.threshold, n.nan, n.mask)
        if n.nan and n.mask:
            out.append("// a NaN row max rebases (NaN reaches the rowsum and O); a row with no key yet (-inf + inf) "
                       "does not")
            out.append(f"const bool rebase = {test};")
        elif n.nan:
            out.append(f"const bool rebase = {test};  // NaN rebases: NaN reaches the rowsum and O")
        else:
            out.append(f"const bool rebase = {test};")
        factor = "ex2_approx_ftz(-exp_neg - m_cand)"
        # P's scale for a new max, before the branch (inside it ptxas turned the rebase into a branch: +5
        # instructions in the stage 18 softmax loop, measured)
        # (m_cand in exp_sc units; softmax_rules.carried_exp_scale)
        out.append(f"const float sc_new = {rules.carried_exp_scale('m_cand', 'c.scale_log2()')};  // see exp_neg")
        out += ["float rescale = 1.f;", "if (rebase) {"]
        out += ["  " + line for line in rules.huge_lines("m_cand", "c.scale_log2()", "tile_max", carried="sc_new")]
        # NaN when the new addend is NaN or infinite (a NaN or +-inf max, or a product past FP32's range): NaN
        # reaches the rowsum, O and the LSE instead of a row that looks keyless (softmax_rules.nan_rescale)
        out.append(f"  rescale = {rules.nan_rescale('neg_new', factor)};")
        out += ["  " + line if line else "" for line in rowsum]
        if n.top_p_rounding:
            out.append("  row_adj *= rescale;")
        out += ["  exp_sc = sc_new;", "  exp_neg = neg_new;", "}"]
        if n.mask:
            out.append("const float neg_use = exp_neg == INFINITY ? 0.f : exp_neg;  // masked tiles: a row without "
                       "keys gets P = 0, not NaN")
        return tuple(out)
    if n.mask:
        out.append("const float max_use = row_max == -INFINITY ? 0.f : row_max;  // masked tiles: a row without keys "
                   "gets P = 0, not NaN")
    use = "max_use" if n.mask else "row_max"
    if n.threshold is None:
        out += rules.huge_lines(use, "c.softmax_scale" if n.mode == "expf" else "c.scale_log2()", "row_ref",
                                no_key="row_max == -INFINITY" if n.mask else None)
    return tuple(out)


def top_p_round(n) -> tuple:
    """``row_adj += bf16(p_top) - p_top`` after a tile's P pass; see :class:`~.ir.TopPRound`."""
    out = [
        "// the tile's largest P entered PV rounded to BF16: O's normaliser takes that rounding too (rowsum='fp32' "
        "with",
        f"// the ch.11 threshold, where P reaches 2^{n.threshold:g}); same fma + exp2 as the P pass, so the same "
        "value. After the P pass:",
        "// the register cache is free by then (computed before it, stage 15 spilled, measured)",
        f"const float x_top = fmaf(tile_max, exp_sc, {'neg_use' if n.mask else 'exp_neg'});",
    ]
    if n.top_sw:
        out += ["// the exp2 of the column holding the largest score (the polynomial's when sw_max reaches tile_max): "
                "the",
                "// polynomial and ex2.approx may round to different BF16 values",
                "const float p_top = select_ge(sw_max, tile_max, exp2_poly_bare(x_top), ex2_approx_ftz(x_top));"]
    else:
        out.append("const float p_top = ex2_approx_ftz(x_top);")
    out.append("row_adj += bf16_round(p_top) - p_top;  // kept apart: O is normalised by row_sum + row_adj, the LSE "
               "uses row_sum")
    return tuple(out)


def rowmax_pass(n) -> tuple:
    """Pass 1 over S: the tile's row max (blog ch.1 §B, ch.10 register cache, minor 15 wide loads,
    chains and 3-input max; the software-exp2 columns' own chain); see :class:`~.ir.RowmaxPass`."""
    out = []
    cached = n.cache_from < n.ncols
    out.append("// pass 1 over S: tile rowmax (blog ch.1 §B)"
               + (f"; columns {n.cache_from}..{n.ncols - 1} stay in registers (ch.10)" if cached else ""))
    if not n.wait_each:
        out.append(f"// minor 15: {n.ncols // n.load_width} x{n.load_width} loads with no wait after each; one "
                   "tcgen05.wait::ld before P overwrites S")
    sw = n.sw_from is not None
    hw_chains = n.chains - 1 if (sw and n.chains > 1) else n.chains
    max2 = rules.max_fn(n.nan_max)
    max3 = rules.max_fn(n.nan_max, three=True)
    if n.nan_max:
        out.append("// max.NaN: a NaN score makes the row max NaN (the software exp2 alone would turn it into FLT_MAX)")
    if n.chains > 1:
        out.append(f"float mx[{n.chains}];  // {n.chains} independent rowmax chains (minor 15)"
                   + (f"; mx[{n.chains - 1}]: the software-exp2 columns" if sw else ""))
        out += ["#pragma unroll", f"for (int k = 0; k < {n.chains}; ++k) mx[k] = -INFINITY;"]
    else:
        out.append("float tile_max = -INFINITY;")
        if sw:
            out.append("float sw_max = -INFINITY;  // the software-exp2 columns' own chain")
    out += ["#pragma unroll", f"for (int c0 = 0; c0 < {n.ncols}; c0 += {n.load_width}) {{",
            f"  float s[{n.load_width}];", f"  tmem_ld_x{n.load_width}(trow + {n.s_col} + c0, s);"]
    if n.wait_each:
        out.append("  tmem_wait_ld();")
    if n.mods:
        out += ["  #pragma unroll", "  " + n.mods]
    if n.mask:
        out += ["  #pragma unroll",
                f"  for (int k = 0; k < {n.load_width}; ++k) s[k] = c0 + k < col_lim ? s[k] : -INFINITY;  // masked key"]
    step = "k += 2" if n.max3 else "++k"
    fn = max3 if n.max3 else max2
    srcs = "s[k], s[k + 1]" if n.max3 else "s[k]"
    pick = "(k / 2)" if n.max3 else "k"
    acc = (f"mx[{pick} % {hw_chains}]" if hw_chains > 1 else "mx[0]") if n.chains > 1 else "tile_max"
    sw_acc = f"mx[{n.chains - 1}]" if n.chains > 1 else "sw_max"
    note = "  // 3-input max (FMNMX3)" if n.max3 else ""
    out.append("  #pragma unroll")
    if sw:
        out += [f"  for (int k = 0; k < {n.load_width}; {step}) {{{note}",
                f"    if (((c0 + k) & 15) >= {n.sw_from}) {sw_acc} = {fn}({sw_acc}, {srcs});  // software-exp2 "
                "columns (blog ch.9)",
                f"    else {acc} = {fn}({acc}, {srcs});", "  }"]
    else:
        out.append(f"  for (int k = 0; k < {n.load_width}; {step}) {acc} = {fn}({acc}, {srcs});{note}")
    if cached:
        out += [f"  if (c0 >= {n.cache_from}) {{  // keep for pass 2 (blog ch.10)", "    #pragma unroll",
                f"    for (int k = 0; k < {n.load_width}; ++k) s_cache[c0 - {n.cache_from} + k] = s[k];", "  }"]
    out.append("}")
    if n.chains > 1:
        if hw_chains > 1:
            out += ["#pragma unroll", f"for (int k = 1; k < {hw_chains}; ++k) mx[0] = {max2}(mx[0], mx[k]);"]
        if sw:
            out += [f"const float sw_max = {sw_acc};  // the largest score of the software-exp2 columns",
                    f"const float tile_max = {max2}(mx[0], sw_max);"]
        else:
            out.append("const float tile_max = mx[0];")
    elif sw:
        out.append(f"tile_max = {max2}(tile_max, sw_max);")
    return tuple(out)

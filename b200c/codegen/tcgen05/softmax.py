"""Softmax decisions of the tcgen05 backend, made in Python (the templates only
print): column passes and their order, TMEM load widths, which columns take
the polynomial exp2, the rowsum strategy, the register-cached columns, packed
f32x2 math. Every decision is a field of an IR node, so ``b200c compile --emit
ir`` shows what blog chapters 1, 2, 8-11, 13, 15 and 16 change.
"""
from __future__ import annotations

import msgspec

from .. import softmax_rules as rules
from ..mod_kernel import block_sparse, has_score_mod, kv_col0
from ..ir import Assign, Comment, Decl, Scope
from . import softmax_text
from .ir import (ColumnLoop, Epilogue, ExpScores, PackP, Rebase, RescaleO, RowmaxPass, RowsumAdd, ScoresFromCache,
                 ScoresFromTmem, StoreP, TmemWait, TopPRound)


def _cols(lw) -> int:
    return lw.plan.tile.block_n


def cache_from(lw) -> int:
    """First S column kept in registers after the rowmax pass (block_n: none; blog ch.10)."""
    return _cols(lw) - lw.s.s_cache_cols


def packed(lw) -> bool:
    """Elementwise FP32 math in f32x2 pairs (sm_100 fma/add/mul.f32x2)."""
    return lw.s.f32x2


def exp_mode(lw) -> str:
    """``expf`` (blog ch.1-7) or ``ex2`` (ch.8: scale folded into log2 units); :func:`b200c.codegen.softmax_rules.exp_mode`."""
    return rules.exp_mode(lw.s)


def _with_code(node, write):
    """``node`` with its C lines (``code``) written by ``write`` from its fields."""
    return msgspec.structs.replace(node, code=write(node))


def mods_statement(lw, width: int, masked: bool, q: str = "q") -> str:
    """With a score_mod or mask_mod: the loop putting ``s[0:width]`` (columns ``c0 ..`` of the visited
    tile ``j``, this thread's row ``row_in_seq``) through ``mod_entry`` (:mod:`b200c.codegen.mod_kernel`;
    ``masked``: the mask_mod applies); else "" (no mods, or a whole tile and no score_mod)."""
    if not (has_score_mod(lw.plan.mods) or (masked and block_sparse(lw.plan.mods))):
        return ""  # no mods, or a whole tile of a mask_mod alone: nothing to apply
    return (f"for (int k = 0; k < {width}; ++k) s[k] = mod_entry(c, w, q_head_of(c, w, {q}), row_in_seq, "
            f"{kv_col0(lw.plan)} + c0 + k, k, s[k], {'true' if masked else 'false'});  // score_mod / mask_mod")


def guard(lw, mask: bool) -> bool:
    """Whether a tile's softmax must be -inf-safe (a row may have no finite score): masked tiles, and
    every tile when a score_mod may give -inf."""
    return mask or has_score_mod(lw.plan.mods)


def rowmax_pass(lw, s_col: str, mask: bool = False, q: str = "q") -> RowmaxPass:
    """Pass 1 over S (blog ch.1 §B, ch.10 cache, minor 15 wide/deferred loads, chains, 3-input max);
    ``mask``: the masked-tile copy (partial last tile, causal diagonal). With mods each loaded score
    goes through ``mod_entry`` first (:func:`mods_statement`)."""
    s = lw.s
    # masked tiles re-read S instead of caching it: the register cache plus the mask spilled at stages
    # 10-11's 168 registers (measured); re-reading high to low keeps P's writes behind the reads
    return _with_code(RowmaxPass(s_col=s_col, ncols=_cols(lw), load_width=s.s_load_cols,
                                 wait_each=not s.deferred_s_wait, chains=s.rowmax_chains, max3=s.rowmax_max3,
                                 cache_from=_cols(lw) if mask else cache_from(lw), mask=mask,
                                 sw_from=top_p_sw_from(lw), nan_max=nan_max(lw),
                                 mods=mods_statement(lw, s.s_load_cols, mask, q)), softmax_text.rowmax_pass)


def nan_max(lw) -> bool:
    """Whether the row max is taken with ``max.NaN`` (:func:`b200c.codegen.softmax_rules.nan_max`)."""
    return rules.nan_max(lw.s)


def top_p_rounding(lw) -> bool:
    """Whether O's normaliser takes the BF16 rounding of each tile's largest P
    (:func:`b200c.codegen.softmax_rules.top_p_rounding`; see :func:`rebase`). The
    softmax accumulates those corrections apart (``row_adj``, rescaled with
    the rowsum): O is divided by ``row_sum + row_adj``, the LSE is computed
    from the exact FP32 ``row_sum``."""
    return rules.top_p_rounding(lw.s)


def top_p_sw_from(lw):
    """First column (of every 16) on the software exp2 when the top-P rounding
    must know which exp2 produced the tile's largest P, else None
    (:func:`b200c.codegen.softmax_rules.top_p_sw_from`): the software-exp2 columns
    then take their own rowmax chain (no extra max instructions) and
    :class:`TopPRound` picks the exp2 of the column that holds the tile's
    largest score."""
    return rules.top_p_sw_from(lw.s)


def rebase(lw, mask: bool = False, carried: tuple = ()) -> Rebase:
    """New rowmax / rescale factor (blog ch.1, 8, 11); ``mask``: -inf-safe copy for masked tiles;
    ``carried``: the float2 rowsum accumulators kept across tiles (:func:`carried_rowsum`), rescaled
    in place of ``row_sum``."""
    s = lw.s
    # with the ch.11 threshold the largest P of a tile is 2^gap (gap < threshold), not exactly 1, and PV
    # consumes it rounded to BF16: for a row dominated by one key the FP32 rowsum would miss that rounding
    # (relative error up to 2^-9; measured 1.68e-2 against a 1.66e-2 FlashAttention tolerance on the
    # emulated s384 shape). Adding bf16(p_top) - p_top restores the rounded-sum accuracy for a few
    # instructions per tile instead of unpacking every P (rowsum='bf16'); p_top is computed by the exp2 of
    # the column that holds the largest score (see top_p_sw_from).
    # The LSE (FlashAttention's tolerance 1e-3 in natural-log units) must not take that correction: it
    # measured 2-3e-3 off on the emulated real-inputs sweep, so the correction is kept apart in row_adj.
    top = top_p_rounding(lw)
    return _with_code(Rebase(exp_mode(lw), s.rescale_threshold, packed(lw) and exp_mode(lw) == "ex2", top, mask,
                             rowsum_pairs=carried, nan=nan_max(lw)), softmax_text.rebase)


def running_max(lw) -> list:
    """With ch.11's threshold the row keeps P's scale and addend instead of its max (see
    :func:`b200c.codegen.tcgen05.softmax_text.rebase`): after the K/V loops, the declaration of ``row_max``
    (log2 units of the scale) that the rowmax publication and the epilogue read. Empty otherwise."""
    if lw.s.rescale_threshold is None:
        return []
    return [Comment("the running max in log2 units of the scale (-inf: no key; softmax_rules.carried_row_max)"),
            Decl("const float", "row_max", rules.carried_row_max("exp_neg", "c.scale_log2()"))]


def carried_decls(lw) -> list:
    """The per-row softmax state declared at the start of a work item (before its K/V loops)."""
    if lw.s.rescale_threshold is None:
        # P's exponent for rows whose max reaches 2^30 (softmax_rules.huge_lines): the raw score row_max comes from
        return [Decl("float", "row_max", "-INFINITY"), Decl("float", "row_ref", "-INFINITY")]
    # with ch.11's threshold P's scale and addend, changed only on a rebase (the running max is -exp_neg)
    return [Decl("float", "exp_neg", "INFINITY"), Decl("float", "exp_sc", "c.scale_log2()")]


def top_p_round(lw, mask: bool = False) -> list:
    """The tile's largest P rounded into ``row_adj`` after the P pass (see :func:`rebase`); empty
    unless :func:`top_p_rounding`."""
    if not top_p_rounding(lw):
        return []
    return [_with_code(TopPRound(lw.s.rescale_threshold, top_p_sw_from(lw) is not None, mask),
                       softmax_text.top_p_round)]


exp_ranges = rules.exp_ranges  # (lo, hi, "hw"|"sw") of every 16 columns (blog ch.9)


def chunk_width(lw, bounds) -> int:
    """Columns per P chunk: 32 when P goes to TMEM and every pass boundary is a
    multiple of 32 (one x16 tcgen05.st per chunk), else 16."""
    p_tmem = lw.plan.tmem_array("P") is not None
    return 32 if p_tmem and all(b % 32 == 0 for b in bounds) else 16


def _acc_of(lw, cached: bool) -> tuple:
    """(name, type) of the rowsum accumulator of cached / re-read columns."""
    s = lw.s
    pk = packed(lw)
    if s.split_rowsum:  # minor 16: separate accumulators for the cached and the re-read columns
        if cached:
            return ("rs_ab", "float2") if pk else ("rs_a", "pair")
        return ("rs_c2", "float2") if pk else ("rs_c", "float")
    if pk and s.rowsum == "fp32":
        return "rs2", "float2"
    return "row_sum", "float"


def carried_rowsum(lw) -> tuple:
    """Names of the float2 rowsum accumulators the softmax warps keep across
    K/V tiles (f32x2 math): they are rescaled with the rowmax (two lanes per
    ``mul.f32x2``) and added into ``row_sum`` once after the last tile, instead
    of once per tile (net 2 instructions fewer per tile in the stage 18 loop,
    measured: one FADD2 and two FADD gone, one more FMUL2 under the rebase).
    Empty when the rowsum is a plain float, and with the runtime-indexed phase
    arrays (before minor 17's bitmasks): their registers and these four pushed
    stages 15-16's softmax warps into 32 B of spills (measured)."""
    if not packed(lw) or lw.s.phase_tracking != "bitmask":
        return ()
    names = [_acc_of(lw, False)]
    if lw.s.s_cache_cols:
        names.insert(0, _acc_of(lw, True))
    return tuple(dict.fromkeys(n for n, typ in names if typ == "float2"))


def _pairs_sum(names) -> tuple:
    """(nodes, name): the float2 accumulators ``names`` added pairwise first (one f32x2 add per extra
    accumulator, into ``rs_all``), and the name of the float2 that holds their sum."""
    if len(names) > 1:
        return [Decl("const float2", "rs_all", _nest_add(list(names)))], "rs_all"
    return [], names[0]


def rowsum_total(names) -> list:
    """``row_sum`` from the carried float2 accumulators ``names`` (after the last K/V tile)."""
    nodes, total = _pairs_sum(names)
    return nodes + [Assign("row_sum", f"{total}.x + {total}.y")]


def p_passes(lw, q: str, parts, mask: bool = False, carried: tuple = (), guarded: bool = False) -> list:
    """Pass 2 over S for one K/V tile: P = exp(S - max), rowsum +=, P stored.

    ``parts``: (lo, hi, label, nodes to emit after the part) in production
    order (blog ch.13 publishes the high columns first). The rowsum
    accumulators are declared once before the first part and combined into
    ``row_sum`` once after the last (minor 16), except those in ``carried``
    (see :func:`carried_rowsum`), which the caller declares before the K/V
    loop and combines after it. ``mask``: the masked-tile copy (re-read
    scores masked, P relative to ``max_use``); ``guarded``: P relative to
    ``max_use`` on a whole tile too (a score_mod may give a row no finite score).
    """
    accs = {}
    scopes = []
    for i, (lo, hi, label, after) in enumerate(parts):
        scopes.append((_p_part(lw, q, lo, hi, label, i == 0, accs, mask, guarded), after))
    for name in carried:
        accs.pop(name, None)
    out = []
    for name, typ in accs.items():
        if name == "row_sum":
            continue
        if typ == "float2":
            out.append(Decl("float2", name, "make_float2(0.f, 0.f)"))
        elif typ == "pair":
            out += [Decl("float", "rs_a", "0.f"), Decl("float", "rs_b", "0.f")]
        else:
            out.append(Decl("float", name, "0.f"))
    for scope, after in scopes:
        out += [scope, *after]
    pairs = [k for k, v in accs.items() if v == "float2"]
    if pairs:
        nodes, total = _pairs_sum(pairs)
        out += nodes
        pairs = [total]
    terms = [f"({k}.x + {k}.y)" for k in pairs] + [
        "(rs_a + rs_b)" if v == "pair" else k for k, v in accs.items() if v not in ("float2",) and k != "row_sum"]
    if terms:
        out.append(Assign("row_sum", "row_sum + " + " + ".join(terms)))
    return out


def _nest_add(names) -> str:
    """C expression adding float2 accumulators: add_f32x2(add_f32x2(a, b), c)."""
    expr = names[0]
    for n in names[1:]:
        expr = f"add_f32x2({expr}, {n})"
    return expr


def _p_part(lw, q: str, lo: int, hi: int, part: str, first: bool, accs: dict, mask: bool,
            guarded: bool = False) -> Scope:
    """One part of pass 2 over S columns [lo, hi). Cached columns (blog ch.10)
    are produced high to low from registers, the rest re-read from TMEM (also
    high to low when a cache exists, so P, written into the upper half of S,
    never overwrites an unread score). ``first``: the
    first part of the tile (takes minor 15's deferred ``wait::ld``)."""
    s = lw.s
    n = _cols(lw)
    split = n if mask else cache_from(lw)  # masked tiles re-read every column (see rowmax_pass)
    high_to_low = s.s_cache_cols > 0  # P lives in the upper half of S: produce it high to low
    # masked tiles keep 16-column chunks: the mask's limit and the -inf-safe max stay live (32-column
    # chunks spilled at stages 8-9's 168 registers, measured)
    w = 16 if mask else chunk_width(lw, (lo, hi, split if split < n else lo))
    mode = exp_mode(lw)
    pk = packed(lw)
    p_arr = lw.plan.tmem_array("P")
    store = StoreP(w, p_col=f"TMEM_P({q})") if p_arr is not None else StoreP(w, p_buf="SMEM_KV")
    ranges = exp_ranges(s.sw_exp2_per16) if s.sw_exp2_per16 else ((0, w, "hw"),)
    group = 16 if s.sw_exp2_per16 else w
    body = []
    if first and s.deferred_s_wait:
        body.append(TmemWait("ld", "minor 15: the one deferred wait for pass 1's loads, before P overwrites S columns"))

    def chunk(source, acc):
        name, typ = acc
        accs[name] = typ
        return (source, ExpScores(w, mode, ranges, pk and mode == "ex2", group,
                                  "max_use" if mask or guarded else "row_max",
                                  "neg_use" if (mask or guarded) and s.rescale_threshold is not None else "exp_neg"),
                PackP(w),
                RowsumAdd(w, s.rowsum, name, typ, pk), store)

    if split < n and hi > split:  # columns cached in registers, high to low
        body.append(ColumnLoop(hi - w, max(lo, split), -w, "columns cached in registers (blog ch.10)",
                               chunk(ScoresFromCache(w, split), _acc_of(lw, True))))
    top = min(hi, split)
    if top > lo:
        # minor 15's wide loads: one load per chunk; before it, loads of s_load_cols (one x32 re-read next to
        # the 96-column register cache pushes stage 10's softmax over its 168 registers: measured, spills)
        width = w if s.deferred_s_wait else min(s.s_load_cols, w)
        src = ScoresFromTmem(f"TMEM_S({q})", w, width, mask, mods_statement(lw, w, mask, q))
        if high_to_low:
            body.append(ColumnLoop(top - w, lo, -w, "columns re-read from TMEM", chunk(src, _acc_of(lw, False))))
        else:
            body.append(ColumnLoop(lo, top, w, "S read again from TMEM (blog ch.1 §B)", chunk(src, _acc_of(lw, False))))
    if p_arr is not None:
        body.append(TmemWait("st"))
    how = "exp(S * scale - rowmax)" if mode == "expf" else "exp2(S * scale_log2 - rowmax)"
    order = ", high to low (blog ch.10)" if high_to_low else ""
    return Scope(f"pass 2 over S columns [{lo}, {hi}) ({part}): P = {how}, rowsum += P{order}", tuple(body))


def rescale_o(lw, q: str, source: str, skip_unit: bool) -> RescaleO:
    """O *= rescale (blog ch.1 §B; ch.11 skip; ch.12 in the correction warps)."""
    d = lw.plan.tile.head_dim
    w = lw.s.o_load_cols
    # two loads per wait when the role has the registers for 2 x width live values (not the correction
    # warps' 80 at x32: measured, 604 B of spills)
    regs = lw.role_spec("correction").regs if source == "smem" else None
    inflight = 2 if d % (2 * w) == 0 and (regs is None or regs >= 128) else 1
    return RescaleO(f"TMEM_O({q})", d, w, packed(lw), source, q, skip_unit, inflight,
                    wait_each=not lw.s.deferred_s_wait)


def epilogue(lw, q: str, rowsum: str) -> Epilogue:
    """O / rowsum -> BF16 -> global (blog ch.1)."""
    # the correction warps' small budget (80 at stage 12) spilled with 32-column chunks (measured)
    regs = lw.role_spec("correction").regs if rowsum == "smem" else None
    width = 16 if regs is not None and regs < 128 else 32
    return Epilogue(f"TMEM_O({q})", lw.plan.tile.head_dim, q, rowsum, packed(lw), exp_mode(lw), width,
                    top_p_rounding(lw) and rowsum == "reg",
                    lw.plan.mods is not None and lw.plan.mods.sinks and not lw.plan.split_kv, lw.plan.split_kv,
                    lw.plan.mods is not None and lw.plan.mods.sinks and lw.plan.split_kv)

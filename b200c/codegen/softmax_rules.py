"""The online softmax's numerics rules, decided once for every backend (tcgen05's
``tcgen05/softmax*.py`` and sm90's ``sm90/softmax.py`` call these; none repeats them).

FlashAttention's online softmax per K/V tile: the tile's row max, a new running max (*rebase*) and
the factor ``exp(old - new)`` the rowsum and O are rescaled by, then ``P = exp(S scale - max)``.
The rules here are the choices that decide what that computes on special values and where it
rounds:

* :func:`exp_mode`: ``__expf`` of natural-log units (blog ch.1-7) or ``ex2.approx.ftz`` with the
  scale folded into log2 units (ch.8).
* :func:`exp_ranges` / :func:`sw_from`: which of every 16 columns take the FMA-pipe polynomial exp2
  (ch.9).
* :func:`nan_max`: the row max is ``max.NaN`` when the polynomial exp2 is used (its exponent add
  turns a NaN input into FLT_MAX, so a NaN score would leave its row finite; torch's FP32 softmax
  makes it NaN); then a NaN max stays NaN and rebases (:func:`rebase_test`), so NaN reaches the
  rowsum and O.
* :func:`rebase_test`: with ch.11's threshold the running max moves only when the tile max exceeds
  it by the threshold; a row that has seen no key yet (masked tiles: -inf - -inf is NaN) must not
  rebase on that NaN.
* :func:`top_p_rounding` / :func:`top_p_sw_from`: with the threshold a tile's largest P is up to
  2^threshold and enters PV rounded to BF16; the FP32 rowsum takes that rounding too (kept apart
  from the LSE's rowsum), computed by the exp2 of the column that holds the largest score.
* :func:`huge_lines`: P's scale-and-subtract is one FFMA, ``s * scale + (-max)``, whose product is exact
  while the running max was rounded: at the max itself the exponent is that rounding error, up to half
  an ulp of ``max``, which overflows ``exp2`` once ``|max| >= 2^31`` in exponent units (logits of 1e30,
  a row of additive ``finfo.min`` masks: P = inf, O NaN, where FP32 torch gives the softmax). Rows whose
  max reaches :data:`HUGE_MAX` take the power of two at or below the scale instead, so the product and
  the subtraction are exact and the max gets P = 1 (ties share the row); scores below it are then at
  least 2^6 ulps away in exponent units, where both scales give P < 2^-32 and torch's gives 0 or less.
  Below the bound the FFMA's error is under 64 in exponent units and common to the row (it cancels in
  O / rowsum and the LSE carries it through the rowsum).
* masked tiles (the partial last K/V tile, the causal diagonal): a row with no visible key yet keeps
  P = 0 and a finite rescale (its max stays -inf and P subtracts 0 instead); a row that saw no key
  at all gives O = 0 and LSE = -inf.
"""
from __future__ import annotations

from typing import Optional

EX2 = "ex2.approx.ftz"


def exp_mode(s) -> str:
    """``"expf"`` (natural-log units, ``__expf``) or ``"ex2"`` (log2 units, ``ex2.approx.ftz``)."""
    return "expf" if s.exp2 == "expf" else "ex2"


def exp_ranges(sw_per16: int) -> tuple:
    """(lo, hi, ``"hw"``|``"sw"``) column ranges of every 16 columns: the last ``sw_per16`` take
    the software exp2 (blog ch.9), the rest ``ex2.approx``."""
    out = [(0, 16 - sw_per16, "hw"), (16 - sw_per16, 16, "sw")]
    return tuple(r for r in out if r[0] < r[1])


def sw_from(s) -> Optional[int]:
    """First column of every 16 on the software exp2, or None without the split."""
    return 16 - s.sw_exp2_per16 if s.sw_exp2_per16 else None


def nan_max(s) -> bool:
    """Whether the row max is ``max.NaN`` (see the module docstring): ex2 with the software split.
    Same instruction count as the plain max (FMNMX3.NAN on sm_100)."""
    return exp_mode(s) == "ex2" and s.sw_exp2_per16 > 0


def nan_rescale(candidate: str, factor: str) -> str:
    """C expression of the rebase's rescale factor ``factor`` made NaN when the new running max ``candidate``
    is NaN or infinite (``candidate * 0`` is NaN then, a signed zero otherwise: one FFMA). With the software
    exp2 (:func:`nan_max`) the P pass's pair polynomial turns a NaN exponent into FLT_MAX (it skips the scalar
    polynomial's NaN-keeping FMA: 8 FFMA2 per K/V tile in the blog's stages), and a NaN exponent reaches a
    column only when the row's max is NaN or +inf; the factor multiplies the rowsum (and ``row_adj``), so the
    row's rowsum, O and LSE are NaN as torch's FP32 softmax gives."""
    return f"fmaf({candidate}, 0.f, {factor})"


def max_fn(nan: bool, three: bool = False) -> str:
    """The device max of the row max: ``fmaxf``/``fmax3`` or their ``max.NaN`` forms."""
    return ("fmax3_nan" if nan else "fmax3") if three else ("fmax_nan" if nan else "fmaxf")


def top_p_rounding(s) -> bool:
    """Whether O's normaliser takes the BF16 rounding of each tile's largest P (rowsum='fp32' with
    the ch.11 threshold and ex2; see the module docstring). O is divided by ``row_sum + row_adj``,
    the LSE is computed from the exact FP32 ``row_sum``."""
    return s.rescale_threshold is not None and s.rowsum == "fp32" and exp_mode(s) == "ex2"


def top_p_sw_from(s) -> Optional[int]:
    """First software-exp2 column (of every 16) when the top-P rounding must know which exp2
    produced the tile's largest P, else None: the polynomial and ``ex2.approx`` differ by up to
    ~5e-4 relative, enough to round to different BF16 values (measured on the emulated
    real-inputs sweep: 1.93e-2 against a 1.82e-2 tolerance, S_kv = 255, before this rule)."""
    if not (top_p_rounding(s) and s.sw_exp2_per16):
        return None
    return exp_ranges(s.sw_exp2_per16)[-1][0]


def c_float(x: float) -> str:
    """``x`` as an exact C float literal (``repr`` of the double, ``f`` suffix)."""
    return f"{float(x)!r}f"


def rebase_test(gap: str, candidate: str, threshold: float, nan: bool, masked: bool) -> str:
    """C condition for moving the running max (blog ch.11): the ``gap`` (new candidate max minus
    the kept one, in log2 units) reached ``threshold``. With ``nan`` a NaN candidate rebases, so NaN
    reaches the rowsum and O; on ``masked`` tiles a row that has seen no key has gap -inf - -inf =
    NaN and must not, so the NaN test is on the ``candidate`` itself there."""
    thr = c_float(threshold)
    if nan and masked:
        return f"{gap} >= {thr} || {candidate} != {candidate}"
    if nan:
        return f"!({gap} < {thr})"
    return f"{gap} >= {thr}"


HUGE_MAX = 2.0 ** 30  # |running max| in exponent units from which P takes the power-of-two scale (see huge_lines)


def huge_test(use: str) -> str:
    """C condition: the running max ``use`` (exponent units) is huge (see :func:`huge_lines`)."""
    return f"fabsf({use}) >= {c_float(HUGE_MAX)}"


def exp_scale(use: str, scale: str) -> str:
    """C expression of P's exponent scale for a row with running max ``use`` (exponent units): ``scale``, or
    ``pow2_floor(scale)`` when the max is huge (see :func:`huge_lines`)."""
    return f"{huge_test(use)} ? pow2_floor({scale}) : {scale}"


def carried_exp_scale(use: str, scale: str) -> str:
    """C expression of P's exponent scale kept across tiles with ch.11's threshold (the tcgen05 softmax) for a
    new running max ``use`` in the units of the old scale: ``scale``, or for a huge row (``|use| >= HUGE_MAX``)
    the power of two just above ``pow2_floor(scale)``, ``2 * pow2_floor(scale) >= scale``: products with it are
    exact (see :func:`huge_lines`), and the row's addend ``-ref * exp_sc`` then has ``|addend| >= HUGE_MAX``
    while a row that is not huge keeps ``|addend| < HUGE_MAX`` (in either units a huge max stays huge), so the
    addend alone tells which scale it is in (:func:`carried_row_max`). The larger scale only sharpens P below
    the max, where both give P < 2^-64 (scores there are at least 64 exponent units apart). A score whose
    product with it passes FP32's range (``|score| > FLT_MAX / (2 * pow2_floor(scale))``, possible from a
    scale of 1 in log2 units) makes the addend infinite: the rebase then makes the row NaN (loud, as a max
    past the range made it before) rather than keyless."""
    return f"{huge_test(use)} ? 2.f * pow2_floor({scale}) : {scale}"


def carried_row_max(neg: str, scale: str) -> str:
    """C expression of the running max in log2 units of ``scale`` from the carried addend ``neg`` (see
    :func:`carried_exp_scale`): ``-neg``, or for a huge row ``-neg * scale / (2 * pow2_floor(scale))``
    (exact: ``pow2_ratio``); ``neg = +inf`` (no key) gives -inf, NaN stays NaN."""
    return f"{huge_test(neg)} ? -{neg} * (0.5f * pow2_ratio({scale})) : -{neg}"


def huge_lines(use: str, scale: str, ref: str, carried=None, no_key=None) -> list:
    """C lines setting ``exp_sc`` / ``exp_neg``, P's exponent ``fmaf(s, exp_sc, exp_neg)`` for a row whose
    running max in exponent units is ``use`` (0 when the row has no key yet), ``ref * scale`` rounded, where
    ``ref`` is the raw score that max was taken from, at the exponent scale ``scale`` (see the module
    docstring: rows with ``|use| >= HUGE_MAX`` take ``pow2_floor(scale)``). ``-ref * exp_sc`` is ``-use``
    for a row that is not huge, NaN for a NaN max.

    ``carried``: the name of the caller's value holding :func:`exp_scale` of the new max (computed before the
    rebase's branch); then only assign the caller's ``exp_sc`` / ``exp_neg`` (kept across tiles) inside a
    rebase, where the new max is ``ref * exp_sc`` rounded.
    Otherwise declare both; ``no_key``: a C condition under which the row has seen no key yet (``exp_neg``
    0, not ``-(-inf)``)."""
    head = [f"// |max| >= 2^30: P from the power-of-two scale at or below {scale}, exact at the max (FP32 logits of",
            "// 1e30 or a row of finfo.min masks would otherwise overflow exp2: the FFMA's product is exact, the max "
            "rounded)"]
    if carried:
        return head + [f"const float neg_new = -{ref} * {carried};"]
    neg = f"-{ref} * exp_sc"
    return head + [f"const float exp_sc = {exp_scale(use, scale)};",
                   f"const float exp_neg = {f'{no_key} ? 0.f : ' if no_key else ''}{neg};"]


def lse_natural(max_log2: str, rowsum: str) -> str:
    """C expression of a row's log-sum-exp in natural-log units (FlashAttention's softmax_lse) from
    its running max in log2 units and its exact FP32 rowsum (>= 1 when the row saw a key; the
    caller handles rowsum 0: LSE -inf)."""
    return f"({max_log2} + lg2_approx_ftz({rowsum})) * 0.6931471805599453f"


__all__ = ["nan_rescale", "carried_exp_scale", "carried_row_max", "HUGE_MAX", "exp_scale", "huge_lines", "huge_test", "lse_natural", "EX2", "exp_mode", "exp_ranges", "sw_from", "nan_max", "max_fn", "top_p_rounding", "top_p_sw_from",
           "c_float", "rebase_test"]

"""Lowering of traced attention mods (:mod:`b200c.dsl.mods`) to CUDA C.

:func:`device_functions` writes the kernel's ``score_mod`` / ``mask_mod`` device functions, one
``const <type> vN = <expr>;`` line per traced value (literals are written where they are used), and
:func:`ctx_fields` the members of the kernel's ``struct Ctx`` they read: per captured tensor ``k`` a typed
pointer ``cap{k}`` and its element strides ``cap{k}_stride[d]``, plus ``sinks`` when the kernel has
attention sinks. The text needs ``<cuda_bf16.h>`` (which includes ``<cuda_fp16.h>``) and ``<stdint.h>``.

Values are ``float`` (f32), ``int`` (i32) and ``bool``; an operand of another type than the one an
operation computes in is converted explicitly (``(float)q_idx``), so C's implicit conversions never
decide a result. No torch import.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

from ..dsl.mod_records import ModGraph, ModNode, ModSet
from ..dsl.mods import COMPARISONS, FLOAT_FUNCTIONS, const_value

# canonical op -> C expression template ({0}, {1}, {2}: the operands, already converted to the type the op
# computes in); a dict gives one template per computing type
C_OPS: dict[str, object] = {
    "const": "{0}",  # the literal (see c_literal)
    "load": "c.cap{0}[{1}]",  # captured tensor index, element offset (see C_LOAD for the conversion)
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "truediv": "__fdividef({0}, {1})",  # 2 ulp (an IEEE division is a slow subroutine in the softmax's loop)
    "floordiv": "mod_floordiv({0}, {1})",
    "mod": "mod_floormod({0}, {1})",
    "neg": "-{0}",
    "abs": {"f32": "fabsf({0})", "i32": "abs({0})"},
    "pow": "powf({0}, {1})",
    "exp": "__expf({0})",
    "exp2": "exp2f({0})",
    "log": "logf({0})",
    "log2": "log2f({0})",
    "sqrt": "sqrtf({0})",
    "rsqrt": "rsqrtf({0})",
    # one MUFU.TANH (mod_tanh: PTX tanh.approx.f32); tanhf is a long subroutine (softcap ran at 197 TFLOPS with it
    # on the H200, scripts/bench_mods.py) and 1 - 2 / (1 + e^2x) two MUFU ops (an exp and a reciprocal)
    "tanh": "mod_tanh({0})",
    "sigmoid": "__fdividef(1.0f, 1.0f + __expf(-{0}))",
    "sin": "sinf({0})",
    "cos": "cosf({0})",
    # torch.minimum / maximum / clamp propagate NaN (fminf / fmaxf would return the other operand)
    "minimum": {"f32": "({0} != {0} || {1} != {1} ? NAN : fminf({0}, {1}))", "i32": "min({0}, {1})",
                "bool": "{0} && {1}"},
    "maximum": {"f32": "({0} != {0} || {1} != {1} ? NAN : fmaxf({0}, {1}))", "i32": "max({0}, {1})",
                "bool": "{0} || {1}"},
    "clamp": {"f32": "({0} != {0} ? {0} : fminf(fmaxf({0}, {1}), {2}))", "i32": "min(max({0}, {1}), {2})",
              "bool": "({0} || {1}) && {2}"},
    "where": "{0} ? {1} : {2}",
    "lt": "{0} < {1}",
    "le": "{0} <= {1}",
    "gt": "{0} > {1}",
    "ge": "{0} >= {1}",
    "eq": "{0} == {1}",
    "ne": "{0} != {1}",
    "logical_and": "{0} && {1}",
    "logical_or": "{0} || {1}",
    "logical_not": "!{0}",
    "bitwise_and": "{0} & {1}",
    "bitwise_or": "{0} | {1}",
    "bitwise_xor": "{0} ^ {1}",
    "bitwise_not": {"i32": "~{0}", "bool": "!{0}"},
    "to_float": "(float){0}",
    "to_int": "(int){0}",
    "to_bool": "(bool){0}",
    "round_bf16": "__bfloat162float(__float2bfloat16_rn({0}))",
    "round_f16": "__half2float(__float2half_rn({0}))",
}

# captured tensor dtype -> (C element type, conversion of an element to its value type)
C_TENSOR_TYPES: dict[str, str] = {"f32": "float", "bf16": "__nv_bfloat16", "f16": "__half", "i32": "int",
                                  "i64": "long long", "bool": "bool"}
C_LOAD: dict[str, str] = {"f32": "{0}", "bf16": "__bfloat162float({0})", "f16": "__half2float({0})", "i32": "{0}",
                          "i64": "(int){0}", "bool": "{0}"}
C_VALUE_TYPES: dict[str, str] = {"f32": "float", "i32": "int", "bool": "bool"}

# Python's floor division and modulo, as torch computes them (floor_divide / remainder: c10's
# div_floor_integer / div_floor_floating and remainder's fmod correction)
_I2F_HELPER = (
    "// int -> float for |x| < 2^22 (sums and differences of indices below 2^21) with an integer and an FP32 add",
    "// around the magic number 1.5 * 2^23: the I2F conversion runs on the quarter-rate pipe the softmax's exp2",
    "// needs (ALiBi: one per score, as many as the exp2s)",
    "__device__ __forceinline__ float mod_i2f(const int x) { return __int_as_float(0x4B400000 + x) - 12582912.0f; }",
)

_HELPERS = {
    "floordiv": (
        "// Python's floor division (torch.floor_divide): rounds toward -inf",
        "__device__ __forceinline__ int mod_floordiv(const int a, const int b) {",
        "  const int r = a % b;",
        "  return (r != 0 && ((r < 0) != (b < 0))) ? a / b - 1 : a / b;",
        "}",
        "__device__ __forceinline__ float mod_floordiv(const float a, const float b) {",
        "  if (b == 0.0f) return a / b;",
        "  const float m = fmodf(a, b);",
        "  float d = (a - m) / b;",
        "  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d -= 1.0f;",
        "  if (d == 0.0f) return copysignf(0.0f, a / b);",
        "  const float f = floorf(d);",
        "  return d - f > 0.5f ? f + 1.0f : f;",
        "}",
    ),
    "tanh": (
        "// tanh on the MUFU pipe: PTX tanh.approx.f32 (sm_75+; maximum relative error about 2^-11, the PTX ISA's",
        "// bound; FlashAttention-3's softcap uses it too). One MUFU op per score, the softmax's exp2 takes one more;",
        "// +-inf gives +-1, NaN stays NaN",
        "__device__ __forceinline__ float mod_tanh(const float x) {",
        "  float y;",
        "  asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x));",
        "  return y;",
        "}",
    ),
    "mod": (
        "// Python's modulo (torch.remainder): the result has the divisor's sign",
        "__device__ __forceinline__ int mod_floormod(const int a, const int b) {",
        "  const int r = a % b;",
        "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;",
        "}",
        "__device__ __forceinline__ float mod_floormod(const float a, const float b) {",
        "  const float r = fmodf(a, b);",
        "  return (r != 0.0f && ((b < 0.0f) != (r < 0.0f))) ? r + b : r;",
        "}",
    ),
}


def c_literal(value, vtype: str) -> str:
    """A Python value as a C literal of ``vtype``: f32 ``30.0f``, ``1e-05f``, ``INFINITY``, ``NAN`` (the
    shortest text that reads back as the same FP32 number, at full precision), i32 ``7``, bool ``true``.
    A negative literal is parenthesized (``(-2.0f)``) so that it can follow any operator."""
    if vtype == "bool":
        return "true" if value else "false"
    if vtype == "i32":
        v = int(value)
        if v == -(2 ** 31):
            return "(-2147483647 - 1)"
        return f"({v})" if v < 0 else str(v)
    v = float(value)
    if math.isnan(v):
        return "NAN"
    try:
        f32 = _f32(v)
    except OverflowError:
        f32 = math.copysign(math.inf, v)
    if math.isinf(f32):
        return "INFINITY" if f32 > 0 else "(-INFINITY)"
    text = _shortest_f32(f32)
    return f"({text}f)" if text.startswith("-") else f"{text}f"


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _reads_as(text: str, x: float) -> bool:
    """Whether C reads the decimal ``text`` as the FP32 number ``x`` (finite, >= 0): exact rounding to
    nearest, ties to even, without going through a double."""
    exact, fx = Fraction(text), Fraction(x)
    if x == 0:
        return exact == 0
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    below = Fraction(struct.unpack("<f", struct.pack("<I", bits - 1))[0])
    above_f = struct.unpack("<f", struct.pack("<I", bits + 1))[0]
    above = fx + (fx - below) if math.isinf(above_f) else Fraction(above_f)
    lo, hi = (fx + below) / 2, (fx + above) / 2
    return lo < exact < hi or (exact in (lo, hi) and bits % 2 == 0)


def _shortest_f32(x: float) -> str:
    """The shortest decimal C reads as the finite FP32 number ``x``, written like Python's repr
    (``30.0``, ``0.1``, ``1e-05``, ``-2.5``)."""
    mag = abs(x)
    text = repr(mag)
    for digits in range(1, 10):
        candidate = f"{mag:.{digits}g}"
        if _reads_as(candidate, mag):
            text = repr(float(candidate))
            if not _reads_as(text, mag):
                text = candidate
            break
    return ("-" if math.copysign(1.0, x) < 0 else "") + text


def _compute_types(node: ModNode, types: dict) -> list:
    """The type each operand of ``node`` is converted to before the op (None: as it is)."""
    op, args = node.op, node.args
    if op in ("truediv", "pow", "round_bf16", "round_f16") or op in FLOAT_FUNCTIONS:
        return ["f32"] * len(args)
    if op in COMPARISONS:
        ts = [types[a] for a in args]
        t = "f32" if "f32" in ts else "i32" if "i32" in ts else "bool"
        return [t, t]
    if op in ("logical_and", "logical_or", "logical_not"):
        return ["bool"] * len(args)
    if op == "where":
        return ["bool", node.type, node.type]
    if op in ("to_float", "to_int", "to_bool", "load"):
        return [None] * len(args)
    return [node.type] * len(args)  # arithmetic, min/max/clamp, bitwise: the result's type


SMALL_INDEX = 1 << 21  # B, H, S_q, S_kv below this when ModSet.small_indices
_I2F_EXACT = 1 << 22  # mod_i2f is exact for |x| < 2^22


def _bounds(graph: ModGraph, small: bool) -> dict:
    """An upper bound of |value| for the int values computed from the indices by add / sub / neg / abs /
    mul / min / max and int literals (None: unknown, e.g. a loaded value)."""
    by_name = {n.name: n for n in graph.nodes}
    out = {}
    for n in graph.nodes:
        b = None
        if n.type != "i32":
            pass
        elif n.op == "param":
            b = SMALL_INDEX - 1 if small else None  # B, H, S below 2^21: indices <= 2^21 - 1
        elif n.op == "const":
            b = abs(int(const_value(n)))
        else:
            args = [out.get(a) if by_name[a].type == "i32" else None for a in n.args]
            if all(x is not None for x in args):
                if n.op in ("add", "sub"):
                    b = args[0] + args[1]
                elif n.op in ("neg", "abs"):
                    b = args[0]
                elif n.op == "mul":
                    b = args[0] * args[1]
                elif n.op in ("minimum", "maximum", "clamp"):
                    b = max(args)
        out[n.name] = b
    return out


def _depends_on(graph: ModGraph, params: tuple) -> dict:
    """Per value of ``graph``, whether it depends on any of the parameters ``params`` (e.g.
    ``("score", "kv_idx")``: the values that differ between the keys of a row)."""
    out: dict = {}
    for n in graph.nodes:
        out[n.name] = n.name in params or any(out[a] for a in n.args)
    return out


def _kv_coefficients(graph: ModGraph) -> dict:
    """Per int value computed from the indices, its coefficient ``K`` in ``kv_idx`` when the value is
    ``A + K * kv_idx`` with ``A`` free of ``kv_idx`` (0: does not depend on kv_idx; None: not of that
    form, e.g. a loaded value indexed by kv_idx or a product of two index terms)."""
    by_name = {n.name: n for n in graph.nodes}
    out: dict = {}
    for n in graph.nodes:
        args = [out.get(a) for a in n.args]
        if n.op == "param":
            k = 1 if n.name == "kv_idx" else 0
        elif n.op == "const":
            k = 0
        elif None in args:
            k = None
        elif n.type == "i32" and n.op in ("add", "sub"):
            k = args[0] + args[1] if n.op == "add" else args[0] - args[1]
        elif n.type == "i32" and n.op == "neg":
            k = -args[0]
        elif n.type == "i32" and n.op == "mul":
            consts = [by_name[a].op == "const" for a in n.args]
            k = (args[1] * int(const_value(by_name[n.args[0]])) if consts[0]
                 else args[0] * int(const_value(by_name[n.args[1]])) if consts[1]
                 else 0 if args == [0, 0] else None)
        else:
            k = 0 if all(x == 0 for x in args) else None  # depends on kv_idx through another op
        out[n.name] = k
    return out


def _convert(atom: str, src: str, dst, bound=None, kv_coef=None) -> str:
    """``atom`` converted from ``src`` to ``dst``. An int that is ``A + K * kv_idx`` (``kv_coef`` = K)
    below 2^22 goes to float as ``mod_i2f(atom - K * kv_off) + (float)(K * kv_off)``: ``kv_off`` is the
    part of kv_idx the compiler knows after unrolling (the key's column within the thread's fragment),
    so the conversion is one per row and each key adds a constant (exact: both are integers below
    2^22)."""
    if dst is None or src == dst:
        return atom
    if src == "i32" and dst == "f32" and bound is not None and bound < _I2F_EXACT:
        if kv_coef:
            off = "kv_off" if kv_coef == 1 else f"{kv_coef} * kv_off" if kv_coef > 0 else f"({kv_coef}) * kv_off"
            return f"(mod_i2f({atom} - {off}) + (float)({off}))"
        return f"mod_i2f({atom})"
    return f"({C_VALUE_TYPES[dst]}){atom}"


def _template(op: str, vtype: str) -> str:
    t = C_OPS[op]
    return t[vtype] if isinstance(t, dict) else t


def _body(graph: ModGraph, mods: ModSet, bias_of: tuple | None = None) -> list:
    """The C lines of ``graph``'s function body (``return`` last). ``bias_of``: instead, the lines of
    ``score_bias_parts`` for the score_mod's bias terms ``bias_of`` (:func:`_bias`: the values they depend
    on, then ``slope = ...; base = ...;``), or None if a term is not ``base + slope * kv_off``."""
    by_name = {n.name: n for n in graph.nodes}
    types = {n.name: n.type for n in graph.nodes}
    bounds = _bounds(graph, mods.small_indices)
    coefs = _kv_coefficients(graph) if graph.kind == "score_mod" else {}

    def atom(name: str, want) -> str:
        n = by_name[name]
        if n.op == "const":  # literals are written in the type they are used in
            return c_literal(const_value(n), want or n.type)
        return _convert(name, n.type, want, bounds.get(name), coefs.get(name))

    # float values that are `base + slope * kv_off` with base and slope free of kv_off (per row / per head):
    # each is then one FMA per key (the int -> float conversion, the multiplies by per-head values and the
    # additions of per-row values happen once per row)
    affine: dict = {}
    varies = _depends_on(graph, ("score", "kv_idx"))  # the values that differ between the keys of a row

    def affine_of(name: str):
        """(base, slope) C expressions of value ``name`` used as a float, or None."""
        n = by_name[name]
        if n.type == "i32" and coefs.get(name) and bounds.get(name) is not None and bounds[name] < _I2F_EXACT:
            k = coefs[name]
            off = "kv_off" if k == 1 else f"{k} * kv_off" if k > 0 else f"({k}) * kv_off"
            return f"mod_i2f({name} - {off})", c_literal(float(k), "f32")
        return affine.get(name)

    def affine_node(n):
        if n.type != "f32" or n.op not in ("add", "sub", "mul", "neg", "to_float"):
            return None
        parts = [affine_of(a) for a in n.args]
        if n.op == "to_float":
            return parts[0]
        if n.op == "neg":
            return (f"-({parts[0][0]})", f"-({parts[0][1]})") if parts[0] else None
        if not any(parts) or any(p is None and varies[a] for p, a in zip(parts, n.args)):
            return None  # no affine operand, or one that varies otherwise (the score, a load by kv_idx)
        plain = [atom(a, "f32") for a in n.args]
        if n.op == "mul":
            if all(parts):
                return None  # a product of two per-key terms is not affine
            (base, slope), y = (parts[0], plain[1]) if parts[0] else (parts[1], plain[0])
            return f"({base}) * {y}", (y if slope == "1.0f" else f"({slope}) * {y}")
        sign = "+" if n.op == "add" else "-"
        base = f"({parts[0][0] if parts[0] else plain[0]}) {sign} ({parts[1][0] if parts[1] else plain[1]})"
        if parts[0] and parts[1]:
            slope = f"({parts[0][1]}) {sign} ({parts[1][1]})"
        else:
            slope = parts[0][1] if parts[0] else (parts[1][1] if sign == "+" else f"-({parts[1][1]})")
        return base, slope

    lines = []
    needed = None
    if bias_of is not None:  # the values the bias terms depend on
        needed, stack = set(), [name for name, _ in bias_of]
        while stack:
            x = stack.pop()
            if x not in needed:
                needed.add(x)
                stack.extend(by_name[x].args)
    bias_terms = {name for name, _ in bias_of or ()}  # per-key float terms: only their parts are needed
    for n in graph.nodes:
        if n.op in ("param", "const") or (needed is not None and n.name not in needed):
            continue
        aff = affine_node(n) if coefs else None
        if aff is not None and len(aff[0]) + len(aff[1]) < 240:
            affine[n.name] = aff
            if not (n.name in bias_terms and varies[n.name]):  # a per-key bias term: only its parts are needed
                lines.append(f"  const float {n.name} = fmaf({aff[1]}, (float)kv_off, {aff[0]});  // per row + per key")
            continue
        if n.name in bias_terms and varies[n.name] and n.type == "f32":
            return None  # a per-key float term that is not base + slope * kv_off: no split
        if n.op == "load":
            cap = mods.captured[n.tensor]
            terms, split = [], None
            for d, a in enumerate(n.args):
                if by_name[a].op == "const":
                    v = const_value(by_name[a])
                    if v:
                        terms.append(f"(int64_t){v} * c.cap{n.tensor}_stride[{d}]")
                elif split is None and d in cap.unit_dims and coefs.get(a) == 1 and mods.mask_mod is None:
                    # a key index along a dimension of stride 1: one address per tile (kv_idx - kv_off is the
                    # same for every key of the thread's fragment), each key at a constant offset from it
                    split = d
                    terms.append(f"(int64_t)({a} - kv_off)")
                else:
                    terms.append(f"(int64_t){a} * c.cap{n.tensor}_stride[{d}]")
            index = " + ".join(terms) or "0"
            if split is not None:
                index = f"({index}) + kv_off"
            expr = C_LOAD[cap.dtype].format(C_OPS["load"].format(n.tensor, index))
        else:
            want = _compute_types(n, types)
            operands = [atom(a, w) for a, w in zip(n.args, want)]
            if n.op == "to_float" and types[n.args[0]] == "i32":
                expr = _convert(operands[0], "i32", "f32", bounds.get(n.args[0]), coefs.get(n.args[0]))
            else:
                expr = _template(n.op, n.type).format(*operands)
        lines.append(f"  const {C_VALUE_TYPES[n.type]} {n.name} = {expr};")
    if bias_of is not None:
        slopes, bases = [], []
        for name, sign in bias_of:
            if varies[name]:
                aff = affine_of(name) if by_name[name].type == "i32" else affine_node(by_name[name])
                if aff is None:
                    return None
                slopes.append((aff[1], sign))
            else:
                aff = (atom(name, "f32"), None)
            bases.append((aff[0], sign))

        def total(parts):
            text = ""
            for x, sign in parts:
                text = (f"-({x})" if sign < 0 else x) if not text else f"{text} {'+' if sign > 0 else '-'} ({x})"
            return text or "0.0f"

        return [*lines, f"  slope = {total(slopes)};", f"  base = {total(bases)};"]
    out = graph.output
    lines.append(f"  return {atom(out, None)};")
    return lines


def additive_score_mod(mods: ModSet) -> bool:
    """Whether the score_mod is ``score + bias`` (or ``bias + score``, ``score - bias``) with a bias that
    does not read the score: the kernel then adds ``score_mod(-0.0f, ...)`` (exactly the bias, or its
    negation: ``-0 + x = x``) in raw score units with one FMA instead of scaling the score there and
    back (:func:`b200c.codegen.mod_kernel.functions`)."""
    return _bias(mods) is not None


def _bias(mods: ModSet):
    """The terms ``((value name, +1 / -1), ...)`` of the bias of a score_mod that is the score plus
    and minus values that do not read it (``score + a``, ``b + score - c``: the path from the result to
    the score goes through additions and the first operand of subtractions only), else None."""
    g = mods.score_mod
    if g is None:
        return None
    by_name = {n.name: n for n in g.nodes}
    reads = _depends_on(g, ("score",))
    terms, name = [], g.output  # the score keeps sign +1: the path takes only the minuend of a subtraction
    while name != "score":
        n = by_name[name]
        if n.op not in ("add", "sub") or n.type != "f32":
            return None
        x, y = n.args
        if reads[x] and not reads[y]:
            terms.append((y, 1 if n.op == "add" else -1))
            name = x
        elif n.op == "add" and reads[y] and not reads[x]:
            terms.append((x, 1))
            name = y
        else:
            return None
    return tuple(terms) if terms else None


def score_bias_parts(mods: ModSet) -> tuple:
    """The lines of ``score_bias_parts`` when the score_mod is ``score + bias`` (:func:`_bias`) with a bias
    that is ``base + slope * k`` at key ``kv_idx + k`` (``slope`` free of the key, ``base`` of the row:
    ALiBi's ``slope_h * (kv_idx - q_idx)``, a per-head or per-row bias with slope 0), else ``()``. The
    Hopper consumer then adds ``slope * k`` per score (one FMA) and hands ``base`` to the softmax as a
    per-row offset (:func:`b200c.codegen.sm90.softmax.softmax_node`). Index arithmetic needs
    ``mods.small_indices`` (the exact int -> float split)."""
    terms = _bias(mods)
    if terms is None:
        return ()
    body = _body(mods.score_mod, mods, bias_of=terms)
    if body is None:
        return ()
    return (
        "// The score_mod is score + bias with bias(kv_idx + k) = base + slope * k: slope is the same for every key",
        "// of the row, base is the row's value at key kv_idx (per-key index arithmetic split off as in score_mod)",
        "__device__ __forceinline__ void score_bias_parts(const Ctx& c, const int b, const int h, const int q_idx, "
        "const int kv_idx,",
        "                                                 float& slope, float& base) {",
        "  const int kv_off = 0;",
        *body,
        "}",
    )


def causal_top_left(mods: ModSet) -> bool:
    """Whether ``mods`` are only a mask_mod that says ``q_idx >= kv_idx`` (or ``kv_idx <= q_idx``): FlexAttention's
    causal mask, top-left aligned, which is the ``causal`` knob's (bottom-right aligned) mask when
    S_q == S_kv. The runtime then runs the causal kernel instead of the masked one (issue 36: the lambda ran
    0.77 of dense against the knob's 0.89 on the H200). Read from the traced graph, not the function's text."""
    g = mods.mask_mod
    if g is None or mods.score_mod is not None or mods.sinks or mods.captured:
        return False
    rest = [n for n in g.nodes if n.op != "param"]
    if len(rest) != 1 or rest[0].name != g.output:
        return False
    n = rest[0]
    return (n.op, n.args) in ((("ge", ("q_idx", "kv_idx"))), ("le", ("kv_idx", "q_idx")))


def band_top_left(mods: ModSet):
    """``(left, right)`` when ``mods`` are only a mask_mod that says ``q_idx - left <= kv_idx <= q_idx + right``
    (both >= 0; b200c.mods.sliding_window's mask, however spelt with + - <= < >= > and & over q_idx, kv_idx
    and integer literals), else None. Read from the traced graph: each comparison must bound ``q_idx -
    kv_idx`` alone, and their conjunction is the band. With S_q == S_kv that is ``window_size=(left,
    right)``'s mask (bottom-right aligned), so the runtime runs the window recipe's kernel
    (:func:`causal_top_left` is the band (inf, 0) with one comparison)."""
    g = mods.mask_mod
    if g is None or mods.score_mod is not None or mods.sinks or mods.captured:
        return None
    inf = float("inf")
    lin: dict = {"q_idx": (1, 0, 0), "kv_idx": (0, 1, 0)}  # value -> (coefficient of q_idx, of kv_idx, constant)
    band: dict = {}  # value -> (lo, hi): lo <= q_idx - kv_idx <= hi
    for n in g.nodes:
        if n.op == "param":
            continue
        if n.op == "const":
            if type(n.const) is not int:
                return None
            lin[n.name] = (0, 0, n.const)
        elif n.op in ("add", "sub") and all(a in lin for a in n.args):
            (a1, b1, c1), (a2, b2, c2) = (lin[a] for a in n.args)
            sign = 1 if n.op == "add" else -1
            lin[n.name] = (a1 + sign * a2, b1 + sign * b2, c1 + sign * c2)
        elif n.op in ("le", "lt", "ge", "gt") and all(a in lin for a in n.args):
            x, y = (lin[a] for a in (n.args if n.op in ("le", "lt") else n.args[::-1]))
            # x <= y (or <): 0 <= (y - x) - (1 if strict) = s * (q - kv) + c with s the q coefficient
            s_q, s_kv, c = y[0] - x[0], y[1] - x[1], y[2] - x[2] - (1 if n.op in ("lt", "gt") else 0)
            if s_q == 0 or s_q != -s_kv:
                return None  # not a bound on q_idx - kv_idx alone
            if s_q > 0:  # d >= ceil(-c / s_q)
                band[n.name] = (-(c // s_q), inf)
            else:  # d <= floor(c / -s_q)
                band[n.name] = (-inf, c // -s_q)
        elif n.op in ("bitwise_and", "logical_and") and all(a in band for a in n.args):
            (lo1, hi1), (lo2, hi2) = (band[a] for a in n.args)
            band[n.name] = (max(lo1, lo2), min(hi1, hi2))
        else:
            return None
    lo, hi = band.get(g.output, (None, None))
    if lo is None or lo == -inf or hi == inf or lo > 0 or hi < 0:
        return None
    return int(hi), int(-lo)


def mask_knob(mods: ModSet):
    """The knob a mask_mod alone stands for in a call with S_q == S_kv: ``"causal"`` (:func:`causal_top_left`),
    a window ``(left, right)`` (:func:`band_top_left`), or None. The runtime then runs that knob's kernel, and
    :func:`b200c.kernel_source` prints it."""
    return "causal" if causal_top_left(mods) else band_top_left(mods)


def light(mods: ModSet) -> bool:
    """Whether ``mods`` add at most one FMA per score on Hopper: no mask_mod, and no score_mod or one
    whose bias splits per row and per key (:func:`score_bias_parts`: ALiBi with ``small_indices``, a
    per-head or per-row bias). The Hopper presets keep the dense K/V tiles for light mods
    (:meth:`b200c.codegen.targets.Target.default_schedule`); the others take the mods presets' smaller
    tiles (at the dense tiles ptxas spilled them: softcap, per-key loads, masks, unsplit index
    arithmetic)."""
    if mods.mask_mod is not None:
        return False
    return mods.score_mod is None or bool(score_bias_parts(mods))


def bias_varies_along_the_row(mods: ModSet) -> bool:
    """Whether a split bias (:func:`score_bias_parts`) has a per-key part (a nonzero ``slope``): ALiBi yes,
    a per-head or per-row bias no (the kernel then adds nothing per score)."""
    terms = _bias(mods)
    if terms is None:
        return False
    varies = _depends_on(mods.score_mod, ("kv_idx",))
    return any(varies[name] for name, _ in terms)


def kv_indexed_dims(mods: ModSet) -> tuple:
    """Per captured tensor, the dimensions the score_mod indexes by ``kv_idx`` plus a value free of it
    (``t[h, kv_idx]``, ``t[b, kv_idx + 1]``): where a stride of 1 lets the kernel read consecutive keys
    at constant offsets (:attr:`b200c.dsl.mod_records.CapturedTensor.unit_dims`). A tuple of tuples of
    dimension numbers, one per captured tensor; all empty for a kernel with a mask_mod (its partial
    tiles evaluate both functions per score: with the per-tile addresses live beside them, ptxas
    spilled, 136 B at head dim 128, nvcc 13.0)."""
    out = [set() for _ in mods.captured]
    g = mods.score_mod
    if g is not None and mods.mask_mod is None:
        coefs = _kv_coefficients(g)
        by_name = {n.name: n for n in g.nodes}
        for n in g.nodes:
            if n.op == "load":
                out[n.tensor].update(d for d, a in enumerate(n.args)
                                     if by_name[a].op != "const" and coefs.get(a) == 1)
    return tuple(tuple(sorted(x)) for x in out)


def reads_by_kv(graph) -> bool:
    """Whether ``graph`` loads from a captured tensor at an index computed from ``kv_idx`` (then a key
    column past the sequence must be clamped into it before the call; arithmetic on such a column is
    harmless, its entry is masked after)."""
    if graph is None:
        return False
    depends = _depends_on(graph, ("kv_idx",))
    return any(n.op == "load" and any(depends[a] for a in n.args) for n in graph.nodes)


def _needs(mods: ModSet) -> set:
    ops = set()
    for g in (mods.score_mod, mods.mask_mod):
        if g is not None:
            ops.update(n.op for n in g.nodes)
    return ops


def device_functions(mods: ModSet) -> tuple:
    """The C lines (no trailing newlines) of the kernel's mod device functions, for the mods present:

    ``__device__ __forceinline__ float score_mod(const Ctx& c, const float score, const int b, const int h,
    const int q_idx, const int kv_idx, const int kv_off = 0)`` (``kv_off``: the part of ``kv_idx`` that is a
    compile-time constant at the call, used to convert index arithmetic to float once per row) and ``__device__ __forceinline__ bool mask_mod(const Ctx& c,
    const int b, const int h, const int q_idx, const int kv_idx)``, each after a comment with the traced
    expression, preceded by the helpers they call (``mod_floordiv`` / ``mod_floormod``, int and float
    overloads; ``mod_tanh``, PTX ``tanh.approx.f32``: emitted only when used). They read captured tensor ``k`` as ``c.cap{k}`` with the strides
    ``c.cap{k}_stride[d]`` (:func:`ctx_fields`). Empty when ``mods`` has neither function."""
    lines: list = []
    used = _needs(mods)
    for op in ("floordiv", "mod", "tanh"):
        if op in used:
            lines.extend(_HELPERS[op])
    body = {kind: _body(getattr(mods, kind), mods) for kind in ("score_mod", "mask_mod")
            if getattr(mods, kind) is not None}
    if any("mod_i2f(" in line for b in body.values() for line in b):
        lines.extend(_I2F_HELPER)
    signatures = {
        "score_mod": ("__device__ __forceinline__ float score_mod(const Ctx& c, const float score, const int b, "
                      "const int h, const int q_idx, const int kv_idx,",
                      "                                           const int kv_off = 0) {  // kv_off: the part of "
                      "kv_idx known at compile time"),
        "mask_mod": ("__device__ __forceinline__ bool mask_mod(const Ctx& c, const int b, const int h, "
                     "const int q_idx, const int kv_idx) {",),
    }
    for kind in ("score_mod", "mask_mod"):
        g = getattr(mods, kind)
        if g is None:
            continue
        lines.append(f"// {kind}, traced with torch.fx: {g.expression}")
        lines.extend(signatures[kind])
        lines.extend(body[kind])
        lines.append("}")
    return tuple(lines)


def ctx_fields(mods: ModSet) -> tuple:
    """The member declarations the mods add to the kernel's ``struct Ctx``: per captured tensor ``k`` a
    pointer ``const T* cap{k};`` (T from its dtype: float, __nv_bfloat16, __half, int, long long, bool)
    and ``int64_t cap{k}_stride[ndim];`` (element strides, torch's ``tensor.stride()``), then
    ``const float* sinks;`` (FP32, (H,)) when ``mods.sinks``."""
    lines = []
    for k, cap in enumerate(mods.captured):
        lines.append(f"const {C_TENSOR_TYPES[cap.dtype]}* cap{k};  // {cap.dtype}, {cap.ndim}-D")
        lines.append(f"int64_t cap{k}_stride[{cap.ndim}];")
    if mods.sinks:
        lines.append("const float* sinks;  // per-head attention sink logits, FP32, (H,)")
    return tuple(lines)


__all__ = ["C_OPS", "C_LOAD", "C_TENSOR_TYPES", "C_VALUE_TYPES", "c_literal", "device_functions", "ctx_fields",
           "additive_score_mod", "reads_by_kv", "kv_indexed_dims", "score_bias_parts", "light", "bias_varies_along_the_row"]

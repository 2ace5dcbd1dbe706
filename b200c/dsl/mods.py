"""Tracing of attention mods written in Python with FlexAttention's conventions.

A **score_mod** ``score_mod(score, b, h, q_idx, kv_idx) -> score`` rewrites one attention score (the
FP32 ``q . k * softmax_scale``, natural-log units, before the softmax); a **mask_mod**
``mask_mod(b, h, q_idx, kv_idx) -> bool`` says whether query ``q_idx`` sees key ``kv_idx`` (True: it
does). ``b`` is the batch index, ``h`` the query head, ``q_idx`` / ``kv_idx`` positions within the
sequence, all 32-bit ints on the device. :func:`trace_mods` runs each function once with
:mod:`torch.fx` proxies in place of the parameters (the source text is never parsed) and records what
it computes as a :class:`~b200c.dsl.mod_records.ModGraph`; the code generator
(:mod:`b200c.codegen.mods`) lowers that graph to CUDA. Only the operations of :data:`OPS` are
supported; tensors the function reads from its closure (``bias[h]``) become kernel inputs
("captured tensors").

Value types inside a mod are ``"f32"``, ``"i32"`` and ``"bool"``, with torch's promotion restricted to
them (an int with a float gives f32, ``/`` always gives f32, comparisons give bool, 64-bit ints are
read as 32-bit ones). Python control flow on a traced value (``if score > 0``, ``min(a, b)``,
``a and b``) cannot be traced: write ``torch.where`` / ``torch.minimum`` / ``&`` instead.

Importing this module does not import torch; :func:`trace_mods` does.
"""
from __future__ import annotations

import inspect
import linecache
import math
import operator
import os
import sys
import threading
import traceback
from typing import Any, Callable, Optional

from ..errors import ScheduleError

_TRACE_LOCK = threading.RLock()  # one torch.fx trace at a time in the process (see _trace_one)
from .mod_records import MASK_PARAMS, SCORE_PARAMS, TENSOR_DTYPES, CapturedTensor, ModGraph, ModNode, ModSet

# The canonical operations: name -> what it computes and how torch spells it. Operands of mixed types
# are promoted like torch does (bool < i32 < f32); the result type is given after "->".
OPS: dict[str, str] = {
    "const": "a literal: a Python float / int / bool, a 0-dim tensor made inside the function "
             "(torch.tensor(3.0)), torch.zeros_like / ones_like / full_like(x, v) -> its type",
    "load": "an element of a captured tensor: t[i], t[i, j, ...], t[i][j]; one i32 index per dimension, "
            "in range (not checked) -> f32 for f32/bf16/f16 tensors, i32 for i32/i64, bool for bool",
    "add": "a + b (torch.add) -> promoted type",
    "sub": "a - b (torch.sub, torch.rsub) -> promoted type",
    "mul": "a * b (torch.mul) -> promoted type",
    "truediv": "a / b (torch.div, torch.true_divide) -> f32",
    "floordiv": "a // b, Python's floor division (torch.floor_divide, torch.div(rounding_mode='floor')) "
                "-> promoted type; an int divisor of 0 is undefined",
    "mod": "a % b, Python's floor modulo: the sign of b (torch.remainder) -> promoted type; "
           "an int divisor of 0 is undefined",
    "neg": "-a (torch.neg) -> a's type (i32 or f32)",
    "abs": "abs(a) (torch.abs) -> a's type (i32 or f32)",
    "pow": "a ** b (torch.pow), computed in f32 with powf -> f32",
    "exp": "torch.exp(a) (fast __expf on the device) -> f32",
    "exp2": "torch.exp2(a) -> f32",
    "log": "torch.log(a), natural log -> f32",
    "log2": "torch.log2(a) -> f32",
    "sqrt": "torch.sqrt(a) -> f32",
    "rsqrt": "torch.rsqrt(a) = 1 / sqrt(a) -> f32",
    "tanh": "torch.tanh(a) -> f32",
    "sigmoid": "torch.sigmoid(a) = 1 / (1 + exp(-a)) -> f32",
    "sin": "torch.sin(a), radians -> f32",
    "cos": "torch.cos(a), radians -> f32",
    "minimum": "torch.minimum(a, b), torch.min(a, b), clamp(x, max=b) -> promoted type "
               "(f32: fminf, a NaN operand gives the other one)",
    "maximum": "torch.maximum(a, b), torch.max(a, b), clamp(x, min=b) -> promoted type "
               "(f32: fmaxf, a NaN operand gives the other one)",
    "clamp": "torch.clamp(x, lo, hi) = minimum(maximum(x, lo), hi), both bounds given (with one bound: "
             "maximum / minimum) -> promoted type",
    "where": "torch.where(cond, a, b), cond a bool -> promoted type of a and b",
    "lt": "a < b -> bool",
    "le": "a <= b -> bool",
    "gt": "a > b -> bool",
    "ge": "a >= b -> bool",
    "eq": "a == b -> bool",
    "ne": "a != b -> bool",
    "logical_and": "torch.logical_and(a, b): both nonzero -> bool",
    "logical_or": "torch.logical_or(a, b): either nonzero -> bool",
    "logical_not": "torch.logical_not(a): a is zero -> bool",
    "bitwise_and": "a & b (torch.bitwise_and) on bools or ints -> bool if both bool, else i32",
    "bitwise_or": "a | b (torch.bitwise_or) on bools or ints -> bool if both bool, else i32",
    "bitwise_xor": "a ^ b (torch.bitwise_xor) on bools or ints -> bool if both bool, else i32",
    "bitwise_not": "~a (torch.bitwise_not): logical not of a bool, bitwise not of an int -> a's type",
    "to_float": "a.float(), a.to(torch.float32) -> f32",
    "to_int": "a.int(), a.long(), a.to(torch.int32 / torch.int64): a float is truncated toward zero -> i32",
    "to_bool": "a.bool(), a.to(torch.bool): a is nonzero -> bool",
    "round_bf16": "a.bfloat16(), a.to(torch.bfloat16): rounded to BF16 (nearest even) and read back -> f32",
    "round_f16": "a.half(), a.to(torch.float16): rounded to FP16 (nearest even) and read back -> f32",
}

# op families (the type rules): comparisons give a bool; the float functions compute in f32
_ARITH = ("add", "sub", "mul", "floordiv", "mod")
FLOAT_FUNCTIONS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
_BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor")
_CASTS = {"to_float": "f32", "to_int": "i32", "to_bool": "bool", "round_bf16": "f32", "round_f16": "f32"}
# arity of every op but const/load (load: one index per dimension)
ARITY: dict[str, int] = {
    **{op: 2 for op in _ARITH + COMPARISONS + _BITWISE}, "truediv": 2, "pow": 2, "minimum": 2, "maximum": 2,
    "logical_and": 2, "logical_or": 2, **{op: 1 for op in FLOAT_FUNCTIONS}, "neg": 1, "abs": 1,
    "logical_not": 1, "bitwise_not": 1, **{op: 1 for op in _CASTS}, "clamp": 3, "where": 3, "const": 0,
}

# how the readable expression spells an op: infix operators with Python's precedence
_INFIX = {"add": ("+", 5), "sub": ("-", 5), "mul": ("*", 6), "truediv": ("/", 6), "floordiv": ("//", 6),
          "mod": ("%", 6), "pow": ("**", 8), "lt": ("<", 1), "le": ("<=", 1), "gt": (">", 1), "ge": (">=", 1),
          "eq": ("==", 1), "ne": ("!=", 1), "bitwise_or": ("|", 2), "bitwise_xor": ("^", 3),
          "bitwise_and": ("&", 4)}
_PREFIX = {"neg": "-", "bitwise_not": "~"}
_FUNC_NAME = {"to_float": "float", "to_int": "int", "to_bool": "bool"}
_UNARY_PREC, _ATOM_PREC = 7, 9
_EXPR_LIMIT = 160  # a shared subexpression longer than this is written by its value name

_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31 - 1
# tensor methods that turn a tensor's values (not its shape or dtype) into Python values
_READS_VALUES = frozenset({"item", "tolist", "__float__", "__int__", "__bool__", "__index__", "__complex__", "numpy",
                           "__array__", "__format__", "__repr__", "__str__", "equal", "allclose", "__contains__"})
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def const_value(node: ModNode):
    """The Python value of a ``const`` node: a float for ``"f32"`` (non-finite floats are stored as the
    strings ``"inf"``, ``"-inf"``, ``"nan"``, which JSON cannot hold as numbers), an int for ``"i32"``,
    a bool for ``"bool"``.

    Raises:
        ValueError: ``node`` is not a const node.
    """
    if node.op != "const":
        raise ValueError(f"{node.name} is a {node.op!r} node, not a const")
    v = node.const
    if node.type == "f32":
        return _NONFINITE[v] if isinstance(v, str) else float(v)
    if node.type == "i32":
        return int(v)
    return bool(v)


def _stored_const(value, vtype: str):
    if vtype == "f32":
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if vtype == "i32":
        return int(value)
    return bool(value)


def format_const(node: ModNode) -> str:
    """A const node's value as the readable expression writes it (Python syntax: ``30.0``, ``-inf``,
    ``7``, ``True``); floats keep their exact value (``repr``)."""
    v = const_value(node)
    if node.type == "f32":
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    return repr(v)


def uses(graph: ModGraph) -> frozenset[str]:
    """The parameters (``"score"``, ``"b"``, ``"h"``, ``"q_idx"``, ``"kv_idx"``) that ``graph``'s output
    depends on; e.g. ``frozenset({"q_idx", "kv_idx"})`` for a causal mask_mod."""
    by_name = {n.name: n for n in graph.nodes}
    seen, stack, params = set(), [graph.output], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = by_name[name]
        if node.op == "param":
            params.add(name)
        stack.extend(node.args)
    return frozenset(params)


def graph_expression(nodes, output: str) -> str:
    """``output`` of the SSA ``nodes`` (ModNodes) written as one infix expression in Python syntax
    (``tanh(score / 30.0) * 30.0``, ``cap0[q_idx] == cap0[kv_idx]``); captured tensors are ``cap{k}``.
    A subexpression used twice and longer than 160 characters is written by its value name."""
    by_name = {n.name: n for n in nodes}
    count: dict[str, int] = {}
    for n in nodes:
        for a in n.args:
            count[a] = count.get(a, 0) + 1
    memo: dict[str, tuple[str, int]] = {}

    def text(name: str) -> tuple[str, int]:
        if name in memo:
            return memo[name]
        n = by_name[name]
        if n.op == "param":
            r = (name, _ATOM_PREC)
        elif n.op == "const":
            s = format_const(n)
            r = (s, _UNARY_PREC if s.startswith("-") else _ATOM_PREC)
        elif n.op == "load":
            r = (f"cap{n.tensor}[{', '.join(text(a)[0] for a in n.args)}]", _ATOM_PREC)
        elif n.op in _INFIX:
            sym, prec = _INFIX[n.op]
            (ls, lp), (rs, rp) = text(n.args[0]), text(n.args[1])
            if n.op == "pow":  # right-associative, binds tighter than a unary minus on its left
                left_paren, right_paren = lp <= prec, rp < _UNARY_PREC
            else:  # left-associative; comparisons do not chain
                left_paren, right_paren = lp < prec or (prec == 1 and lp == 1), rp <= prec
            ls = f"({ls})" if left_paren else ls
            rs = f"({rs})" if right_paren else rs
            r = (f"{ls} {sym} {rs}", prec)
        elif n.op in _PREFIX:
            s, p = text(n.args[0])
            r = (f"{_PREFIX[n.op]}({s})" if p < _ATOM_PREC else f"{_PREFIX[n.op]}{s}", _UNARY_PREC)
        else:
            fname = _FUNC_NAME.get(n.op, n.op)
            r = (f"{fname}({', '.join(text(a)[0] for a in n.args)})", _ATOM_PREC)
        if count.get(name, 0) > 1 and len(r[0]) > _EXPR_LIMIT:
            r = (name, _ATOM_PREC)
        memo[name] = r
        return r

    return text(output)[0]


# ---------------------------------------------------------------------------------------------------
# tracing


class _Cap:
    """A captured tensor met while tracing (identity: the tensor object)."""

    __slots__ = ("tensor", "dtype", "ndim")

    def __init__(self, tensor, dtype: str):
        self.tensor, self.dtype, self.ndim = tensor, dtype, tensor.dim()


class _Raw:
    """A value under construction: op, operand values, type; named once the graph is final."""

    __slots__ = ("op", "args", "type", "const", "cap", "name")

    def __init__(self, op, args=(), vtype="f32", const=None, cap=None, name=None):
        self.op, self.args, self.type, self.const, self.cap, self.name = op, tuple(args), vtype, const, cap, name


class _TensorVal:
    """A tensor constant of the traced graph, not yet indexed."""

    __slots__ = ("tensor", "made")

    def __init__(self, tensor, made: bool):
        self.tensor, self.made = tensor, made


class _Partial:
    """A captured tensor indexed in fewer dimensions than it has (``t[b]`` of ``t[b][h]``)."""

    __slots__ = ("cap", "indices")

    def __init__(self, cap: _Cap, indices: tuple):
        self.cap, self.indices = cap, indices


class _DType:
    """``x.dtype`` of a traced value."""

    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype


class _Unsupported(Exception):
    """An fx node outside the table (the message names it)."""


def _promote(*types: str) -> str:
    return "f32" if "f32" in types else "i32" if "i32" in types else "bool"


def _torch_dtype_name(dtype) -> str:
    return str(dtype)


def _tensor_dtype(dtype) -> Optional[str]:
    import torch

    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.int32: "i32",
            torch.int64: "i64", torch.bool: "bool"}.get(dtype)


def _value_type_of_dtype(dtype) -> Optional[str]:
    import torch

    if dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        return "f32"
    if dtype in (torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8):
        return "i32"
    if dtype == torch.bool:
        return "bool"
    return None


_OPERATOR_SPELLING = {
    operator.lshift: "the << operator", operator.rshift: "the >> operator", operator.matmul: "the @ operator",
    operator.not_: "the not operator", operator.truth: "bool()", operator.contains: "the in operator",
}


def _op_spelling(kind: str, target) -> str:
    """How torch spells an fx node's operation: ``torch.erf``, ``torch.Tensor.erf``, ``math.sqrt``."""
    import torch

    if kind == "call_method":
        return f"torch.Tensor.{target}"
    if kind == "call_module":
        return f"module {target}"
    if target in _OPERATOR_SPELLING:
        return f"{_OPERATOR_SPELLING[target]} (operator.{target.__name__})"
    name = getattr(target, "__name__", None)
    if name:
        spaces = (("torch", torch), ("torch.special", torch.special), ("torch.nn.functional", torch.nn.functional),
                  ("torch.linalg", torch.linalg), ("torch.fft", torch.fft), ("math", math), ("operator", operator))
        for prefix, ns in spaces:
            if getattr(ns, name, None) is target:
                return f"{prefix}.{name}"
        module = getattr(target, "__module__", None)
        return f"{module}.{name}" if module else name
    return repr(target)


class _Site:
    """Where in the user's code an fx node was made: file, line and the source line."""

    __slots__ = ("file", "line", "code")

    def __init__(self, file: str, line: int, code: str):
        self.file, self.line, self.code = file, line, code

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" + (f" (`{self.code}`)" if self.code else "")


_NOT_USER: dict[str, bool] = {}  # file name -> it belongs to torch or to this module


def _user_site(frames) -> Optional[_Site]:
    """The first of ``frames`` ((file name, line) pairs, innermost first) outside torch and this module."""
    for filename, lineno in frames:
        skip = _NOT_USER.get(filename)
        if skip is None:
            import torch

            torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
            path = os.path.abspath(filename)
            skip = _NOT_USER[filename] = path.startswith(torch_dir) or path == os.path.abspath(__file__)
        if not skip:
            return _Site(filename, lineno, linecache.getline(filename, lineno).strip())
    return None


def _stack_frames():
    frame = sys._getframe(1)
    while frame is not None:
        yield frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back


def _traceback_frames(tb):
    return reversed([(f.f_code.co_filename, lineno) for f, lineno in traceback.walk_tb(tb)])


def _leaves(obj) -> list:
    """The values in ``obj`` (nested tuples, lists, dict values, slices' bounds), e.g. a torch function's
    arguments: real tensors, fx Proxies (traced values), Python numbers."""
    if isinstance(obj, (tuple, list)):
        return [x for o in obj for x in _leaves(o)]
    if isinstance(obj, dict):
        return _leaves(list(obj.values()))
    if isinstance(obj, slice):
        return _leaves([obj.start, obj.stop, obj.step])
    return [obj]


def _fmt_site(site: Optional[_Site]) -> str:
    return f" at {site}" if site else ""


class _Builder:
    """Turns one fx graph into SSA values with the type rules; raises ScheduleError naming the site."""

    def __init__(self, kind: str, caps: dict, where: str = ""):
        self.kind = kind
        self.where = where  # " (defined at file:line)" of the user's function, for errors without a node
        self.caps = caps  # id(tensor) -> _Cap, shared by the score_mod and the mask_mod
        self.values: list[_Raw] = []
        names = SCORE_PARAMS if kind == "score_mod" else MASK_PARAMS
        self.params = [_Raw("param", vtype="f32" if p == "score" else "i32", name=p) for p in names]
        self.site: Optional[_Site] = None

    # -- errors ---------------------------------------------------------------------------------------
    def fail(self, what: str, change: str) -> ScheduleError:
        where = _fmt_site(self.site) if self.site else self.where
        return ScheduleError(f"{self.kind}: {what}{where}; {change}")

    # -- values ---------------------------------------------------------------------------------------
    def add(self, raw: _Raw) -> _Raw:
        self.values.append(raw)
        return raw

    def const(self, value, vtype: Optional[str] = None) -> _Raw:
        """A literal: ``vtype`` from the Python type (bool, int, float) unless given (then converted)."""
        if vtype is None:
            if not isinstance(value, (bool, int, float)):
                raise self.fail(f"{type(value).__name__} value {value!r} cannot be an operand",
                                "use a Python float/int/bool, a traced value or an indexed captured tensor")
            vtype = "bool" if isinstance(value, bool) else "i32" if isinstance(value, int) else "f32"
        if vtype == "i32":
            value = int(value)
            if not _I32_MIN <= value <= _I32_MAX:
                raise self.fail(f"the integer constant {value} does not fit in 32 bits (values are int32 on the "
                                f"device: {_I32_MIN} .. {_I32_MAX})", "use a smaller constant or a float")
        return self.add(_Raw("const", vtype=vtype, const=_stored_const(value, vtype)))

    def operand(self, v) -> _Raw:
        """``v`` as a value: python scalars become consts, 0-dim tensors made inside the function too."""
        if isinstance(v, _Raw):
            return v
        if isinstance(v, (bool, int, float)):
            return self.const(v)
        if isinstance(v, _TensorVal):
            t = v.tensor
            if t.dim() == 0:
                if not v.made:
                    raise self.fail(
                        f"a captured tensor is 0-dim (a {_torch_dtype_name(t.dtype)} scalar tensor); captured "
                        "tensors must have at least 1 dimension and be indexed",
                        "use a Python number (compiled into the kernel) or a 1-element tensor read as t[b * 0] "
                        "(a kernel input: new values do not recompile)")
                vt = _value_type_of_dtype(t.dtype)
                if vt is None:
                    raise self.fail(f"a {_torch_dtype_name(t.dtype)} constant cannot be used",
                                    "use a float, int or bool constant")
                return self.const(t.item(), vt)
            raise self.fail(f"a captured {t.dim()}-D tensor is used without an index (shape {tuple(t.shape)})",
                            "index it with the mod's parameters, one index per dimension, e.g. bias[h] or "
                            "table[b, h, q_idx]")
        if isinstance(v, _Partial):
            raise self.fail(f"a captured {v.cap.ndim}-D tensor is indexed in only {len(v.indices)} "
                            f"dimension(s)", f"give one index per dimension ({v.cap.ndim} in all)")
        if isinstance(v, _DType):
            raise self.fail("a dtype is used as a value", "use x.dtype only as the argument of .to()")
        if v is None:
            raise self.fail("None is used as a value", "return or combine traced values and numbers only")
        raise self.fail(f"a {type(v).__name__} ({v!r}) is used as a value",
                        "use Python numbers, traced values and indexed captured tensors only")

    def op(self, op: str, *args) -> _Raw:
        """A new value ``op(*args)`` with the type rules (or an existing one for a no-op cast)."""
        a = [self.operand(x) for x in args]
        ts = [x.type for x in a]
        sym = _INFIX.get(op, (op,))[0]
        if op in _ARITH or op in ("neg", "abs"):
            if all(t == "bool" for t in ts):
                raise self.fail(f"{sym} ({op}) on bool values is not supported",
                                "convert with .int() first, or use & | ~ for logic on bools")
            vtype = _promote(*ts)
        elif op in ("truediv", "pow") or op in FLOAT_FUNCTIONS:
            vtype = "f32"
        elif op in ("minimum", "maximum", "clamp"):
            vtype = _promote(*ts)
        elif op == "where":
            if ts[0] != "bool":
                raise self.fail(f"torch.where's condition is {ts[0]}, not a bool",
                                "pass a comparison or a bool (e.g. torch.where(x > 0, a, b))")
            vtype = _promote(ts[1], ts[2])
        elif op in COMPARISONS or op in ("logical_and", "logical_or", "logical_not"):
            vtype = "bool"
        elif op in _BITWISE or op == "bitwise_not":
            if "f32" in ts:
                raise self.fail(f"{sym} ({op}) needs bool or integer operands, got a float",
                                "compare first (x > 0), or use torch.logical_and / logical_or / logical_not")
            vtype = "bool" if all(t == "bool" for t in ts) else "i32"
        elif op in _CASTS:
            vtype = _CASTS[op]
            if op in ("to_float", "to_int", "to_bool") and ts[0] == vtype:
                return a[0]
        else:  # pragma: no cover - every op of the dispatch table is handled above
            raise AssertionError(op)
        return self.add(_Raw(op, a, vtype))

    def cast_to_dtype(self, x, dtype) -> _Raw:
        import torch

        x = self.operand(x)
        if isinstance(dtype, _DType):
            dtype = dtype.dtype
        if isinstance(dtype, _Raw):
            return self.op({"f32": "to_float", "i32": "to_int", "bool": "to_bool"}[dtype.type], x)
        table = {torch.float32: "to_float", torch.bfloat16: "round_bf16", torch.float16: "round_f16",
                 torch.int32: "to_int", torch.int64: "to_int", torch.bool: "to_bool"}
        if dtype not in table:
            raise self.fail(f"a cast to {_torch_dtype_name(dtype)} is not supported (values are f32, int32 or bool "
                            "on the device)", "cast to torch.float32, torch.bfloat16, torch.float16, "
                            "torch.int32, torch.int64 or torch.bool")
        return self.op(table[dtype], x)

    def like(self, x, fill, dtype=None) -> _Raw:
        if isinstance(x, _Raw):
            vtype = x.type
        elif isinstance(x, _TensorVal):
            vtype = _value_type_of_dtype(x.tensor.dtype) or "f32"
        else:
            raise self.fail("torch.*_like needs a traced value", "write torch.zeros_like(score) or a Python number")
        if dtype is not None:
            vtype = _value_type_of_dtype(dtype.dtype if isinstance(dtype, _DType) else dtype)
            if vtype is None:
                raise self.fail(f"dtype {_torch_dtype_name(dtype)} is not supported",
                                "use a float, int or bool dtype")
        if isinstance(fill, _TensorVal) and fill.made and fill.tensor.dim() == 0:
            fill = fill.tensor.item()
        if not isinstance(fill, (bool, int, float)):
            raise self.fail("torch.full_like's fill value is not a Python number",
                            "use torch.where(cond, value, other) for a computed value")
        return self.const(fill, vtype)

    def capture(self, tv: _TensorVal) -> _Cap:
        t = tv.tensor
        if t.dim() == 0:
            if tv.made:
                raise self.fail("a 0-dim tensor is indexed", "index tensors with at least one dimension")
            raise self.fail(f"a captured tensor is 0-dim (a {_torch_dtype_name(t.dtype)} scalar tensor); captured "
                            "tensors must have at least 1 dimension",
                            "use a Python number or a 1-element tensor read as t[b * 0]")
        dt = _tensor_dtype(t.dtype)
        if dt is None:
            raise self.fail(f"a captured tensor has dtype {_torch_dtype_name(t.dtype)} (shape {tuple(t.shape)}), "
                            f"which the kernel cannot read; allowed: float32, bfloat16, float16, int32, int64, bool",
                            "convert it outside the function (e.g. t = t.float() or t = t.to(torch.int32)) "
                            "and capture the converted tensor")
        assert dt in TENSOR_DTYPES
        key = id(t)
        if key not in self.caps:
            self.caps[key] = _Cap(t, dt)
        return self.caps[key]

    def index(self, base, idx):
        if isinstance(base, _TensorVal):
            cap, have = self.capture(base), ()
        elif isinstance(base, _Partial):
            cap, have = base.cap, base.indices
        else:
            raise self.fail("a traced value is indexed", "only captured tensors (closure variables) can be "
                            "indexed; compute with the values instead")
        items = idx if isinstance(idx, tuple) else (idx,)
        new = []
        for i in items:
            if isinstance(i, bool) or i is None or i is Ellipsis or isinstance(i, slice):
                raise self.fail(f"a captured tensor is indexed with {i!r}", "index every dimension with one "
                                "integer value (a parameter, an int expression or a non-negative int)")
            if isinstance(i, int) and i < 0:
                raise self.fail(f"a captured tensor is indexed with the negative constant {i}",
                                "use a non-negative index (negative indices do not wrap on the device)")
            v = self.operand(i)
            if v.type != "i32":
                raise self.fail(f"a captured tensor is indexed with a {v.type} value",
                                "index with integers (convert a float with .int(); a bool mask cannot index)")
            new.append(v)
        indices = have + tuple(new)
        if len(indices) > cap.ndim:
            raise self.fail(f"a captured {cap.ndim}-D tensor is indexed with {len(indices)} indices",
                            f"give exactly {cap.ndim} (one per dimension)")
        if len(indices) < cap.ndim:
            return _Partial(cap, indices)
        return self.add(_Raw("load", indices, {"f32": "f32", "bf16": "f32", "f16": "f32", "i32": "i32",
                                               "i64": "i32", "bool": "bool"}[cap.dtype], cap=cap))

    def finish(self, out) -> tuple[list[_Raw], _Raw]:
        if isinstance(out, (tuple, list, dict)):
            raise self.fail(f"the function returns a {type(out).__name__}", "return one value")
        v = self.operand(out)
        if self.kind == "score_mod":
            if v.type == "bool":
                raise self.fail("the score_mod returns a bool", "a score_mod returns the new score (a float); "
                                "to hide keys write a mask_mod, or return torch.where(cond, score, -float('inf'))")
            if v.type != "f32":
                v = self.op("to_float", v)
        else:
            if v.type != "bool":
                what = "a float" if v.type == "f32" else "an int"
                raise self.fail(f"the mask_mod returns {what} ({v.type}), not a bool tensor",
                                "a mask_mod must return a bool tensor (True: the key is visible): a comparison "
                                "(q_idx >= kv_idx) or a combination of them with & | ~; for an int x meaning "
                                "'nonzero is visible' write (x) != 0, e.g. (q_idx - kv_idx) != 0")
        return self.values, v


def _handlers():
    """{("f", target) / ("m", method name): handler(builder, args, kwargs)} for the supported fx nodes."""
    import torch

    H: dict = {}

    def reg(funcs=(), methods=(), handler=None):
        for f in funcs:
            H[("f", f)] = handler
        for m in methods:
            H[("m", m)] = handler

    def no_kwargs(bld, kwargs, what):
        extra = [k for k in kwargs if k != "out" or kwargs[k] is not None]
        if extra:
            raise bld.fail(f"{what} with keyword argument(s) {', '.join(extra)} is not supported",
                           "write the operation without them")

    def binary(op, reflected=False):
        def h(bld, args, kwargs):
            no_kwargs(bld, kwargs, op)
            if len(args) != 2:
                raise bld.fail(f"{op} takes 2 operands, got {len(args)}", "pass two operands")
            a, b = args
            return bld.op(op, b, a) if reflected else bld.op(op, a, b)
        return h

    def unary(op):
        def h(bld, args, kwargs):
            no_kwargs(bld, kwargs, op)
            if len(args) != 1:
                raise bld.fail(f"{op} takes 1 operand, got {len(args)}", "pass one operand")
            return bld.op(op, args[0])
        return h

    def identity(bld, args, kwargs):
        return bld.operand(args[0])

    names = {"add": (("add",), ()), "sub": (("sub", "subtract"), ()), "mul": (("mul", "multiply"), ()),
             "truediv": (("true_divide",), ()), "floordiv": (("floor_divide",), ()), "mod": (("remainder",), ()),
             "pow": (("pow",), ()), "minimum": (("minimum",), ()), "maximum": (("maximum",), ()),
             "lt": (("lt", "less"), ()), "le": (("le", "less_equal"), ()), "gt": (("gt", "greater"), ()),
             "ge": (("ge", "greater_equal"), ()), "eq": (("eq",), ()), "ne": (("ne", "not_equal"), ()),
             "bitwise_and": (("bitwise_and",), ()), "bitwise_or": (("bitwise_or",), ()),
             "bitwise_xor": (("bitwise_xor",), ()), "logical_and": (("logical_and",), ()),
             "logical_or": (("logical_or",), ())}
    dunder = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "truediv", "floordiv": "floordiv", "mod": "mod",
              "pow": "pow", "bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor"}
    py_op = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
             "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "lt": operator.lt,
             "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
             "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor}
    for op, (tnames, _) in names.items():
        funcs = [getattr(torch, n) for n in tnames if hasattr(torch, n)]
        if op in py_op:
            funcs.append(py_op[op])
        methods = list(tnames)
        if op in dunder:
            methods.append(f"__{dunder[op]}__")
            reg(methods=(f"__r{dunder[op]}__",), handler=binary(op, reflected=True))
        if op in COMPARISONS:
            methods.append(f"__{op}__")
        reg(funcs, methods, binary(op))
    reg((torch.rsub,), ("rsub",), binary("sub", reflected=True))

    def div(bld, args, kwargs):
        mode = kwargs.get("rounding_mode")
        rest = {k: v for k, v in kwargs.items() if k != "rounding_mode"}
        no_kwargs(bld, rest, "torch.div")
        if mode is None:
            return bld.op("truediv", *args)
        if mode == "floor":
            return bld.op("floordiv", *args)
        raise bld.fail(f"torch.div(..., rounding_mode={mode!r}) is not supported",
                       "use rounding_mode='floor' (Python //) or None (true division)")
    reg((torch.div, torch.divide), ("div", "divide"), div)

    unaries = {"neg": ("neg", "negative"), "abs": ("abs", "absolute"), "exp": ("exp",), "exp2": ("exp2",),
               "log": ("log",), "log2": ("log2",), "sqrt": ("sqrt",), "rsqrt": ("rsqrt",), "tanh": ("tanh",),
               "sigmoid": ("sigmoid",), "sin": ("sin",), "cos": ("cos",), "bitwise_not": ("bitwise_not",),
               "logical_not": ("logical_not",)}
    for op, tnames in unaries.items():
        funcs = [getattr(torch, n) for n in tnames if hasattr(torch, n)]
        reg(funcs, tnames, unary(op))
    reg((operator.neg,), ("__neg__",), unary("neg"))
    reg((operator.abs, abs), ("__abs__",), unary("abs"))
    reg((operator.invert,), ("__invert__",), unary("bitwise_not"))
    reg((torch.special.exp2,), (), unary("exp2"))
    reg((torch.special.expit, torch.nn.functional.sigmoid), (), unary("sigmoid"))
    reg((torch.nn.functional.tanh,), (), unary("tanh"))
    reg((operator.pos, torch.positive), ("positive", "__pos__"), identity)

    def minmax(op, name):
        def h(bld, args, kwargs):
            if kwargs or len(args) != 2 or isinstance(args[1], int) and not isinstance(args[1], bool):
                raise bld.fail(f"torch.{name} with a dim or other arguments is not supported (there is no "
                               "tensor dimension to reduce in a mod)",
                               f"write torch.{name}(a, b) with two values, or torch.{op}(a, b)")
            return bld.op(op, *args)
        return h
    reg((torch.min,), ("min",), minmax("minimum", "min"))
    reg((torch.max,), ("max",), minmax("maximum", "max"))

    def clamp(bld, args, kwargs):
        x, lo, hi = (list(args) + [None, None])[:3]
        if len(args) > 3:
            raise bld.fail("torch.clamp takes at most 3 arguments", "write torch.clamp(x, min, max)")
        lo, hi = kwargs.get("min", lo), kwargs.get("max", hi)
        if lo is None and hi is None:
            raise bld.fail("torch.clamp without min and max", "give min= or max= (or both)")
        if lo is None:
            return bld.op("minimum", x, hi)
        if hi is None:
            return bld.op("maximum", x, lo)
        return bld.op("clamp", x, lo, hi)
    reg((torch.clamp, torch.clip), ("clamp", "clip"), clamp)

    def clamp_min(bld, args, kwargs):
        return bld.op("maximum", args[0], args[1] if len(args) > 1 else kwargs["min"])

    def clamp_max(bld, args, kwargs):
        return bld.op("minimum", args[0], args[1] if len(args) > 1 else kwargs["max"])
    reg((torch.clamp_min,), ("clamp_min",), clamp_min)
    reg((torch.clamp_max,), ("clamp_max",), clamp_max)

    def where(bld, args, kwargs):
        no_kwargs(bld, kwargs, "torch.where")
        if len(args) != 3:
            raise bld.fail("torch.where(cond) with one argument is not supported",
                           "write torch.where(cond, a, b)")
        return bld.op("where", *args)
    reg((torch.where,), (), where)

    def where_method(bld, args, kwargs):  # x.where(cond, y) = torch.where(cond, x, y)
        no_kwargs(bld, kwargs, "Tensor.where")
        return bld.op("where", args[1], args[0], args[2])
    reg((), ("where",), where_method)

    def cast(op):
        def h(bld, args, kwargs):
            return bld.op(op, args[0])
        return h
    reg((), ("float",), cast("to_float"))
    reg((), ("int", "long"), cast("to_int"))
    reg((), ("bool",), cast("to_bool"))
    reg((), ("bfloat16",), cast("round_bf16"))
    reg((), ("half",), cast("round_f16"))

    def to(bld, args, kwargs):
        dtype = kwargs.get("dtype")
        for a in args[1:]:
            if isinstance(a, (torch.dtype, _DType, _Raw)):
                dtype = a
        if dtype is None:  # .to(device) and the like: the value is unchanged
            return bld.operand(args[0])
        return bld.cast_to_dtype(args[0], dtype)
    reg((), ("to",), to)

    def type_as(bld, args, kwargs):
        return bld.cast_to_dtype(args[0], bld.operand(args[1]))
    reg((), ("type_as",), type_as)

    def like(fill_default):
        def h(bld, args, kwargs):
            fill = fill_default
            if fill is None:
                fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
            return bld.like(args[0], fill, kwargs.get("dtype"))
        return h
    reg((torch.zeros_like,), (), like(0))
    reg((torch.ones_like,), (), like(1))
    reg((torch.full_like,), (), like(None))

    def getitem(bld, args, kwargs):
        return bld.index(args[0], args[1])
    reg((operator.getitem,), ("__getitem__",), getitem)

    def get_attr(bld, args, kwargs):
        x, name = args[0], args[1]
        if name == "dtype" and isinstance(x, _Raw):
            return _DType({"f32": torch.float32, "i32": torch.int32, "bool": torch.bool}[x.type])
        raise _Unsupported(f"the attribute .{name}")
    reg((getattr,), (), get_attr)
    return H


_HANDLER_CACHE: dict = {}


def _handler_table() -> dict:
    if not _HANDLER_CACHE:
        _HANDLER_CACHE.update(_handlers())
    return _HANDLER_CACHE


def _takes(fn, n: int) -> tuple[bool, str]:
    """Whether ``fn`` can be called with ``n`` positional arguments, and what it takes."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False, "its signature cannot be read"
    P = inspect.Parameter
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is P.empty]
    required_kw = [p.name for p in params if p.kind == P.KEYWORD_ONLY and p.default is P.empty]
    var = any(p.kind == P.VAR_POSITIONAL for p in params)
    ok = len(required) <= n and (var or n <= len(positional)) and not required_kw
    what = f"it takes {len(positional)} {tuple(p.name for p in positional)}"
    if required_kw:
        what += f" and the required keyword-only parameters {tuple(required_kw)}"
    return ok, what


def _definition(fn) -> str:
    """`` (function defined at file:line)`` of a Python function, else ``""``."""
    code = getattr(inspect.unwrap(fn), "__code__", None) if not isinstance(fn, type) else None
    if code is None:
        return ""
    return f" (function defined at {code.co_filename}:{code.co_firstlineno})"


def _override_tables_ready(torch) -> None:
    """torch.fx's tracer asks ``torch.overrides`` for its table of overridable functions, built once
    from the ``__name__`` of every function of torch and torch.nn.functional; a ``functools.partial``
    swapped in for one of them (the one-line swap of ``F.scaled_dot_product_attention``, measured: the
    LTX-2 capstone's masked calls) has no ``__name__`` and breaks the build. Such partials are named
    after the function they wrap, then the table is built."""
    try:
        torch.overrides.get_overridable_functions()
        return
    except AttributeError:
        pass
    for ns in (torch, torch.nn.functional, torch.functional, torch.linalg, torch.fft, torch.special, torch.nn.init):
        for name, value in list(vars(ns).items()):
            if callable(value) and not isinstance(value, type) and not hasattr(value, "__name__"):
                try:
                    value.__name__ = getattr(getattr(value, "func", None), "__name__", name)
                except (AttributeError, TypeError):
                    pass
    try:
        torch.overrides.get_overridable_functions()
    except AttributeError as e:
        raise ScheduleError(f"torch.fx cannot trace the mods in this process: torch.overrides could not list torch's "
                            f"functions ({e}); a callable without a __name__ was swapped in for one of them: give it "
                            "a __name__ (functools.wraps) or swap in a plain function") from None


def _recipe_params(fn) -> str:
    """A recipe's parameter names, as a call would list them (``cap``; ``left, right=0``)."""
    import inspect

    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return "..."
    return ", ".join(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}" for p in ps)


def _trace_one(fn, kind: str, caps: dict) -> tuple[list[_Raw], _Raw, list[_Raw]]:
    import torch
    import torch.fx
    from torch.overrides import TorchFunctionMode

    _override_tables_ready(torch)

    params = SCORE_PARAMS if kind == "score_mod" else MASK_PARAMS
    signature = f"{kind}({', '.join(params)})"
    if not callable(fn):
        raise ScheduleError(f"{kind} is a {type(fn).__name__}, not a function; pass a function {signature}")
    ok, why = _takes(fn, len(params))
    if not ok:
        if getattr(fn, "__module__", None) == "b200c.mods":  # a recipe, not called: it returns the mod
            raise ScheduleError(f"{kind}=b200c.mods.{fn.__name__} is a recipe, which returns the {kind}: call it, "
                                f"{kind}=b200c.mods.{fn.__name__}({_recipe_params(fn)})")
        raise ScheduleError(f"{kind} must take exactly {len(params)} positional parameters {signature} "
                            f"(FlexAttention's convention), but {why}{_definition(fn)}; rewrite it with these "
                            f"parameters")

    if kind == "score_mod":
        def traced(score, b, h, q_idx, kv_idx):
            return fn(score, b, h, q_idx, kv_idx)
    else:
        def traced(b, h, q_idx, kv_idx):
            return fn(b, h, q_idx, kv_idx)

    class _Made(TorchFunctionMode):
        """Records the tensors torch functions create while the function runs (its constants)."""

        def __init__(self):
            super().__init__()
            self.made: dict[int, Any] = {}

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not isinstance(out, torch.Tensor):
                if getattr(func, "__name__", None) in _READS_VALUES:
                    t = next((x for x in _leaves((args, kwargs or {})) if isinstance(x, torch.Tensor)
                              and id(x) not in self.made), None)
                    if t is not None:
                        # a captured tensor's value read into Python: compiled into the kernel as a constant, it
                        # would not follow later writes to the tensor (its contents are kernel arguments)
                        raise ScheduleError(
                            f"{kind}: the values of a captured tensor of shape {tuple(t.shape)} are read into "
                            f"Python ({getattr(func, '__name__', func)}){_fmt_site(_user_site(_stack_frames()))}; "
                            "that value would be compiled into the kernel and new values of the tensor not seen; "
                            "index the tensor with the mod's arguments (t[b * 0] for a one-element tensor: a kernel "
                            "argument), or pass a Python number")
                return out
            leaves = _leaves((args, kwargs or {}))
            if not any(isinstance(x, torch.fx.Proxy) for x in leaves):
                captured = [x for x in leaves if isinstance(x, torch.Tensor) and id(x) not in self.made]
                if captured:
                    # computed now from a captured tensor's values: the kernel would read this trace-time
                    # result (a constant, or a copy passed as its input), so a later value of the captured
                    # tensor (written in place: the trace is reused) would not be seen
                    site = _user_site(_stack_frames())
                    t = captured[0]
                    what = ("indexed with constants only" if func is torch.Tensor.__getitem__ else
                            f"used in {getattr(func, '__name__', func)} with no argument of the mod")
                    raise ScheduleError(
                        f"{kind}: a captured tensor of shape {tuple(t.shape)} is {what}{_fmt_site(site)}; that is "
                        "computed once while tracing and its result compiled into the kernel (new values of the "
                        "tensor would not be seen); index it with the mod's arguments (t[b * 0] for a one-element "
                        "tensor), convert it outside the function (t = t.float()) and capture the result, or use a "
                        "Python number")
            self.made[id(out)] = out
            return out

    class _ModTracer(torch.fx.Tracer):
        """fx tracer of a plain function that keeps, per node, the user's frame that made it."""

        def __init__(self):
            super().__init__()
            self.sites: dict = {}

        def create_arg(self, a):
            if isinstance(a, torch.nn.Parameter):  # a learned table (T5's relative bias): read like any captured
                a = a.detach()                     # tensor (calls with mods are forward-only); same storage
                made.made.pop(id(a), None)         # not a value the function made: a kernel input, not a constant
            return super().create_arg(a)

        def create_node(self, kind, target, args, kwargs, name=None, type_expr=None):
            node = super().create_node(kind, target, args, kwargs, name, type_expr)
            site = _user_site(_stack_frames())
            if site is not None:
                self.sites[node] = site
                if not node.stack_trace:
                    node.stack_trace = f'File "{site.file}", line {site.line}\n    {site.code}'
            return node

    tracer = _ModTracer()
    made = _Made()
    try:
        # torch.fx's tracer patches module globals through one process-wide patcher (CURRENT_PATCHER):
        # two traces at once in two threads broke each other ("CURRENT_PATCHER is None in finally block")
        with _TRACE_LOCK, made:
            graph = tracer.trace(traced)
    except ScheduleError:
        raise
    except torch.fx.proxy.TraceError as e:
        site = _user_site(_traceback_frames(e.__traceback__))
        raise ScheduleError(
            f"{kind}: data-dependent Python control flow{_fmt_site(site)} cannot be compiled ({e}): `if`, "
            f"`while`, `and`/`or`/`not`, bool(), min()/max() and the like on a traced value need its value, "
            f"which exists only on the GPU; write torch.where(cond, a, b), torch.minimum / torch.maximum, and "
            f"& | ~ for logic") from e
    except Exception as e:  # noqa: BLE001 - the user's function failed under tracing: say where and why
        site = _user_site(_traceback_frames(e.__traceback__))
        raise ScheduleError(
            f"{kind}: tracing failed{_fmt_site(site)}: {type(e).__name__}: {e}; a mod may only use the torch "
            f"operations of b200c.dsl.mods.OPS on its parameters (no math.* functions, float()/int() of a "
            f"traced value, or Python lists indexed by one): use torch's functions instead") from e

    bld = _Builder(kind, caps, _definition(fn))
    env: dict = {}
    table = _handler_table()
    placeholders = iter(bld.params)

    def value(a):
        if isinstance(a, torch.fx.Node):
            return env[a]
        if isinstance(a, (tuple, list)):
            return tuple(value(x) for x in a)
        return a

    out = None
    for node in graph.nodes:
        bld.site = tracer.sites.get(node)
        if node.op == "placeholder":
            env[node] = next(placeholders)
        elif node.op == "get_attr":
            t = getattr(tracer.root, node.target)
            env[node] = _TensorVal(t, id(t) in made.made and made.made[id(t)] is t)
        elif node.op in ("call_function", "call_method"):
            key = ("f" if node.op == "call_function" else "m", node.target)
            try:
                handler = table.get(key)
            except TypeError:  # an unhashable target
                handler = None
            spelled = _op_spelling(node.op, node.target)
            try:
                if handler is None:
                    raise _Unsupported(spelled)
                env[node] = handler(bld, value(node.args), {k: value(v) for k, v in node.kwargs.items()})
            except _Unsupported as e:
                raise ScheduleError(
                    f"{kind}: {e} is not supported in a mod{_fmt_site(bld.site)}; the supported operations are "
                    f"b200c.dsl.mods.OPS ({', '.join(k for k in OPS if k not in ('const', 'load'))}); rewrite "
                    f"it with them") from None
            except (IndexError, KeyError) as e:
                raise ScheduleError(f"{kind}: {spelled} is called with arguments b200c cannot read "
                                    f"{_fmt_site(bld.site)} ({type(e).__name__}: {e}); call it as torch "
                                    f"documents, with positional operands") from None
        elif node.op == "output":
            out = value(node.args[0])
        else:
            raise ScheduleError(f"{kind}: {node.op} {node.target} is not supported in a mod{_fmt_site(bld.site)}; "
                                "write a plain function of its parameters")
    bld.site = None
    values, output = bld.finish(out)
    return values, output, bld.params


def _live(values: list[_Raw], output: _Raw) -> list[_Raw]:
    keep, stack = set(), [output]
    while stack:
        v = stack.pop()
        if id(v) in keep:
            continue
        keep.add(id(v))
        stack.extend(v.args)
    return [v for v in values if id(v) in keep]


def trace_mods(score_mod: Optional[Callable] = None, mask_mod: Optional[Callable] = None,
               sinks=None) -> tuple[ModSet, tuple]:
    """Trace a score_mod and/or a mask_mod into the records the kernel is generated and cached from.

    Args:
        score_mod: None, or ``score_mod(score, b, h, q_idx, kv_idx) -> score``: ``score`` is one FP32
            attention score (``q . k * softmax_scale``, natural-log units, before the softmax), ``b`` the
            batch index, ``h`` the query head, ``q_idx`` / ``kv_idx`` the query / key position within the
            sequence (int32). Returns the new score; an int result is converted to FP32, a bool is an error.
        mask_mod: None, or ``mask_mod(b, h, q_idx, kv_idx) -> bool``: True where the query sees the key.
            An int or float result is an error (write ``x != 0``).
        sinks: None, or a tensor of per-head sink logits (FP32, (H,), passed to the kernel separately);
            it only sets ``ModSet.sinks``.

    Both functions may read tensors from their closure or globals by indexing them with their
    parameters (``bias[h]``, ``table[b, h, q_idx]``, ``doc_ids[q_idx]``, ``t[b][h]``): dtype float32,
    bfloat16, float16, int32, int64 or bool, at least 1-D, one index per dimension (indices are not
    bounds-checked on the device). A tensor used by both functions is one captured tensor.

    Returns:
        ``(mods, tensors)``: the :class:`~b200c.dsl.mod_records.ModSet` (the kernel's identity: the same
        function written twice, whatever its name, file or closure tensors' values, gives an equal one)
        and the captured tensors in ``mods.captured`` order (kernel inputs: new values do not recompile).

    Raises:
        ScheduleError: a function is not callable or does not take 5 (score_mod) / 4 (mask_mod)
            positional parameters; it calls an operation outside :data:`OPS` (named, with the file:line);
            it branches on a traced value (Python control flow); it captures a tensor of another dtype or
            a 0-dim tensor; it indexes a tensor wrongly; it reads a captured tensor's values into Python
            (``t.item()``, ``float(t)``, ``t.tolist()``); a score_mod returns a bool or a mask_mod an int or a
            float; ``sinks`` is not a tensor.
    """
    if sinks is not None:
        import torch

        if not isinstance(sinks, torch.Tensor):
            raise ScheduleError(f"sinks is a {type(sinks).__name__}; pass None or a tensor of per-head sink logits "
                                "(FP32, shape (H,))")
    caps: dict = {}
    traced = {}
    for kind, fn in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if fn is not None:
            values, output, params = _trace_one(fn, kind, caps)
            traced[kind] = (params, _live(values, output), output)

    # captured tensors in order of first use (score_mod first), among the live loads only
    order: dict[int, int] = {}
    captured: list[CapturedTensor] = []
    tensors: list = []
    for kind in ("score_mod", "mask_mod"):
        if kind in traced:
            for v in traced[kind][1]:
                if v.op == "load" and id(v.cap.tensor) not in order:
                    order[id(v.cap.tensor)] = len(captured)
                    captured.append(CapturedTensor(dtype=v.cap.dtype, ndim=v.cap.ndim))
                    tensors.append(v.cap.tensor)

    graphs = {}
    for kind, (params, live, output) in traced.items():
        nodes = [ModNode(name=p.name, op="param", type=p.type) for p in params]
        k = 0
        for v in live:
            if v.op == "param":
                continue
            v.name = f"v{k}"
            k += 1
        for v in live:
            if v.op == "param":
                continue
            nodes.append(ModNode(name=v.name, op=v.op, args=tuple(a.name for a in v.args), type=v.type,
                                 const=v.const, tensor=order[id(v.cap.tensor)] if v.op == "load" else None))
        graphs[kind] = ModGraph(kind=kind, nodes=tuple(nodes), output=output.name,
                                expression=graph_expression(nodes, output.name))
    mods = ModSet(score_mod=graphs.get("score_mod"), mask_mod=graphs.get("mask_mod"), captured=tuple(captured),
                  sinks=sinks is not None)
    return mods, tuple(tensors)


__all__ = ["OPS", "ARITY", "COMPARISONS", "FLOAT_FUNCTIONS", "trace_mods", "uses", "const_value", "format_const",
           "graph_expression"]

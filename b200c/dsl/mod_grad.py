"""The derivative of a traced score_mod with respect to its score, from the traced graph (issue 31: the
backward's ``dS = dS_mod * d score_mod / d score``).

:func:`score_derivative` extends a score_mod's :class:`~b200c.dsl.mod_records.ModGraph` with one tangent
value per node that depends on the score (forward mode: ``t(score) = 1``, and each op's rule in
:data:`DERIVATIVES`), and returns a graph whose output is ``d out / d score``: the same SSA records, so the
kernel prints it as a device function and the host evaluates it with :func:`b200c.dsl.mod_eval.evaluate`.
Values that do not depend on the score (indices, captured tensors, constants) have tangent 0 and cost
nothing. The rules follow torch autograd where a function is not differentiable everywhere: ``abs`` has
derivative ``sign`` (0 at 0), ``minimum`` / ``maximum`` / ``clamp`` pass the tangent of the operand they
select (the first on a tie, as ``fmin`` keeps the non-NaN one), the casts to a float type
(``round_bf16``, ``round_f16``, ``to_float``) pass it through as torch's casts do. A score-dependent value
that goes through an op with no derivative (``floordiv``, ``mod``, a cast to int or bool, bitwise ops) is
refused by name: torch would give no gradient there.
"""
from __future__ import annotations

from ..errors import ScheduleError
from .mod_records import ModGraph, ModNode

# ops whose derivative is zero where it exists, with a bool or int result that only selects or compares
_NO_TANGENT = ("lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or", "logical_not")
# ops with no derivative: a score-dependent operand is refused
_REFUSED = ("floordiv", "mod", "to_int", "to_bool", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")


class _Emit:
    """Appends f32 nodes named ``d0, d1, ...`` (after the graph's own names)."""

    def __init__(self, graph: ModGraph):
        self.nodes = list(graph.nodes)
        self.n = 0

    def op(self, op: str, *args) -> str:
        name = f"d{self.n}"
        self.n += 1
        vtype = "bool" if op in _NO_TANGENT else "f32"  # comparisons and logical ops select; the rest are f32
        self.nodes.append(ModNode(name, op, tuple(args), vtype))
        return name

    def const(self, value: float) -> str:
        name = f"d{self.n}"
        self.n += 1
        self.nodes.append(ModNode(name, "const", (), "f32", float(value)))
        return name



def _rule(e: _Emit, n: ModNode, t: dict):
    """The tangent name of node ``n`` from its operands' tangents ``t`` (None: zero), or None."""
    a = n.args
    ta = [t.get(x) for x in a]
    op = n.op
    if op in ("add", "sub"):
        x, y = ta
        if y is None:
            return x
        if x is None:
            return y if op == "add" else e.op("neg", y)
        return e.op(op, x, y)
    if op == "mul":
        x, y = ta
        terms = [e.op("mul", x, a[1]) if x else None, e.op("mul", a[0], y) if y else None]
        terms = [z for z in terms if z]
        return terms[0] if len(terms) == 1 else e.op("add", *terms)
    if op == "truediv":
        x, y = ta
        out = e.op("truediv", x, a[1]) if x else None
        if y:  # d(u/v) = -u v' / v^2 = -(u/v) v' / v
            q = e.op("truediv", e.op("mul", n.name, y), a[1])
            out = e.op("sub", out, q) if out else e.op("neg", q)
        return out
    if op == "neg":
        return e.op("neg", ta[0])
    if op == "abs":  # sign(x) t, 0 at 0 (torch)
        zero = e.const(0.0)
        sign = e.op("sub", e.op("to_float", e.op("gt", a[0], zero)), e.op("to_float", e.op("lt", a[0], zero)))
        return e.op("mul", sign, ta[0])
    if op == "pow":
        x, y = ta
        out = None
        if x:  # b a^(b-1) a'
            b1 = e.op("sub", a[1], e.const(1.0))
            out = e.op("mul", e.op("mul", a[1], e.op("pow", a[0], b1)), x)
        if y:  # a^b ln(a) b'
            z = e.op("mul", e.op("mul", n.name, e.op("log", a[0])), y)
            out = e.op("add", out, z) if out else z
        return out
    if op == "exp":
        return e.op("mul", n.name, ta[0])
    if op == "exp2":
        return e.op("mul", e.op("mul", n.name, e.const(0.6931471805599453)), ta[0])
    if op == "log":
        return e.op("truediv", ta[0], a[0])
    if op == "log2":
        return e.op("truediv", ta[0], e.op("mul", a[0], e.const(0.6931471805599453)))
    if op == "sqrt":
        return e.op("truediv", ta[0], e.op("mul", n.name, e.const(2.0)))
    if op == "rsqrt":  # -1/2 x^(-3/2) = -r^3 / 2
        r3 = e.op("mul", e.op("mul", n.name, n.name), n.name)
        return e.op("mul", e.op("mul", r3, e.const(-0.5)), ta[0])
    if op == "tanh":
        return e.op("mul", e.op("sub", e.const(1.0), e.op("mul", n.name, n.name)), ta[0])
    if op == "sigmoid":
        return e.op("mul", e.op("mul", n.name, e.op("sub", e.const(1.0), n.name)), ta[0])
    if op == "sin":
        return e.op("mul", e.op("cos", a[0]), ta[0])
    if op == "cos":
        return e.op("neg", e.op("mul", e.op("sin", a[0]), ta[0]))
    if op in ("minimum", "maximum", "clamp", "where"):
        zero = None

        def tz(x):
            nonlocal zero
            if x is not None:
                return x
            if zero is None:
                zero = e.const(0.0)
            return zero

        if op == "where":
            return e.op("where", a[0], tz(ta[1]), tz(ta[2]))
        if op in ("minimum", "maximum"):  # the selected operand's tangent (the first on a tie)
            first = e.op("le" if op == "minimum" else "ge", a[0], a[1])
            first = e.op("logical_or", first, e.op("ne", a[1], a[1]))  # a NaN second operand: fmin keeps the first
            return e.op("where", first, tz(ta[0]), tz(ta[1]))
        # clamp(x, lo, hi) = minimum(maximum(x, lo), hi)
        inner = e.op("maximum", a[0], a[1])
        t_in = e.op("where", e.op("logical_or", e.op("ge", a[0], a[1]), e.op("ne", a[1], a[1])), tz(ta[0]), tz(ta[1]))
        keep = e.op("logical_or", e.op("le", inner, a[2]), e.op("ne", a[2], a[2]))
        return e.op("where", keep, t_in, tz(ta[2]))
    if op in ("to_float", "round_bf16", "round_f16"):
        return ta[0]
    raise ScheduleError(f"score_mod op {op!r} has no derivative rule in b200c.dsl.mod_grad (node {n.name})")


def _derivative(graph: ModGraph, seed: str, kind: str, what: str) -> ModGraph:
    """d output / d (value ``seed``) by forward-mode tangents (see :func:`score_derivative`)."""
    e = _Emit(graph)
    t: dict = {seed: e.const(1.0)}
    for n in graph.nodes:
        if n.op in ("param", "const", "load"):
            continue
        if not any(t.get(x) for x in n.args):
            continue
        if n.op in _NO_TANGENT:
            continue
        if n.op in _REFUSED:
            raise ScheduleError(
                f"the score_mod's {n.op} at {n.name} takes a value that depends on {what}, and {n.op} has no "
                f"derivative (torch gives no gradient through it): the backward cannot differentiate this "
                f"score_mod; compute that term from the indices and captured tensors only, or with float ops")
        t[n.name] = _rule(e, n, t)
    out = t.get(graph.output)
    if out is None:
        out = e.const(0.0)
    return ModGraph(kind, tuple(e.nodes), out, f"d({graph.expression})/d({what})")


def capture_derivatives(graph: ModGraph) -> tuple:
    """For a learned tensor the score_mod reads (a bias table that requires grad): one
    ``(tensor index, load node, graph)`` per float ``load`` of a captured tensor, ``graph`` giving
    ``d score_mod / d (the loaded element)``. The backward adds ``dS * that`` into the tensor's gradient at
    the load's indices (the values of the load node's arguments), as FlexAttention's captured-buffer
    gradients do.

    Raises:
        ScheduleError: as :func:`score_derivative`, for a loaded value through an op with no derivative.
    """
    if graph.kind != "score_mod":
        raise ScheduleError(f"capture_derivatives takes a score_mod graph, got a {graph.kind}")
    return tuple((n.tensor, n.name, _derivative(graph, n.name, "score_mod_capture_grad", f"{n.name} = cap{n.tensor}[...]"))
                 for n in graph.nodes if n.op == "load" and n.type == "f32")


def score_derivative(graph: ModGraph) -> ModGraph:
    """``d score_mod / d score`` as a graph over the same parameters and captured tensors.

    Args:
        graph: a traced score_mod (``kind == "score_mod"``).

    Returns:
        A ModGraph of kind ``"score_mod_grad"``: the original nodes, then the tangent nodes; its output is the
        derivative (f32; a constant 0 or 1 when the score does not reach the output or passes straight).

    Raises:
        ScheduleError: ``graph`` is not a score_mod, or a score-dependent value goes through an op with no
            derivative (``floordiv``, ``mod``, a cast to int or bool, a bitwise op): the message names the op,
            the node and what to write instead.
    """
    if graph.kind != "score_mod":
        raise ScheduleError(f"score_derivative takes a score_mod graph, got a {graph.kind}")
    return _derivative(graph, "score", "score_mod_grad", "score")


__all__ = ["capture_derivatives", "score_derivative"]

"""A traced mod (:class:`b200c.dsl.mod_records.ModGraph`) evaluated with torch ops, elementwise over
tensors of scores and indices: the host reference of what the kernel's generated device function computes
(the op semantics of :data:`b200c.dsl.mods.OPS`), in any float dtype (FP64 for derivative checks:
``tests/test_mod_grad.py``).

``evaluate(graph, env, captured)``: ``env`` maps the parameter names (``score``, ``b``, ``h``, ``q_idx``,
``kv_idx``) to tensors that broadcast together; ``captured`` the captured tensors by
``ModNode.tensor``. Returns the graph's output.
"""
from __future__ import annotations

from .mod_records import ModGraph


def _ops():
    import torch

    def floordiv(a, b):
        return torch.div(a, b, rounding_mode="floor")

    def clamp(x, lo, hi):
        return torch.minimum(torch.maximum(x, lo), hi)

    return {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.true_divide, "floordiv": floordiv,
        "mod": torch.remainder, "neg": torch.neg, "abs": torch.abs, "pow": torch.pow, "exp": torch.exp,
        "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
        "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sin": torch.sin, "cos": torch.cos, "minimum": torch.fmin,
        "maximum": torch.fmax, "clamp": clamp, "where": torch.where, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
        "ge": torch.ge, "eq": torch.eq, "ne": torch.ne, "logical_and": torch.logical_and,
        "logical_or": torch.logical_or, "logical_not": torch.logical_not, "bitwise_and": torch.bitwise_and,
        "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor, "bitwise_not": torch.bitwise_not,
        "to_int": lambda a: a.to(torch.int64), "to_bool": lambda a: a != 0,
        "round_bf16": lambda a: a.to(torch.bfloat16).to(a.dtype if a.is_floating_point() else torch.float32),
        "round_f16": lambda a: a.to(torch.float16).to(a.dtype if a.is_floating_point() else torch.float32),
    }


def evaluate(graph: ModGraph, env: dict, captured=()):
    """The value of ``graph``'s output for the parameter tensors ``env`` and captured tensors ``captured``.

    Raises:
        KeyError: a parameter missing from ``env``, or an op without a host form.
    """
    return values(graph, env, captured)[graph.output]


def values(graph: ModGraph, env: dict, captured=()) -> dict:
    """Every value of ``graph`` (node name -> tensor) for ``env`` and ``captured``; see :func:`evaluate`."""
    import torch

    from .mods import const_value

    ops = _ops()
    fdt = _float_dtype(env)  # the float type of the evaluation: the score's (FP64 for derivative checks)
    ops["to_float"] = lambda a: a if a.is_floating_point() else a.to(fdt)
    vals = {}
    for n in graph.nodes:
        if n.op == "param":
            vals[n.name] = env[n.name]
        elif n.op == "const":
            vals[n.name] = torch.tensor(const_value(n), dtype=fdt if n.type == "f32" else None)
        elif n.op == "load":
            t = captured[n.tensor]
            idx = torch.broadcast_tensors(*(vals[a].long() for a in n.args))
            v = t[idx]
            vals[n.name] = v if not v.is_floating_point() else v.to(fdt)
        else:
            vals[n.name] = ops[n.op](*(vals[a] for a in n.args))
    return vals


def _float_dtype(env: dict):
    import torch

    s = env.get("score")
    return s.dtype if s is not None and s.is_floating_point() else torch.float32


__all__ = ["evaluate", "values"]

"""Evaluation of the small integer C expressions the kernel IR carries
(``j > 0``, ``(kv_base + 2 * i + 1) % KV_STAGES``, ``c.n_kv - 1``), for the
protocol verifier. Only what the lowering emits is supported: integer
arithmetic, comparisons, ``&&``/``||``/``!``, casts to integer types, ``u``
suffixes, and ``c.x`` / ``w.x`` members (read as ``c_x`` / ``w_x``)."""
from __future__ import annotations

import functools
import re

_RULES = (
    (re.compile(r"\((?:const\s+)?(?:uint32_t|int32_t|int64_t|uint64_t|int|unsigned)\)"), ""),
    (re.compile(r"\b([cw])\.(\w+)"), r"\1_\2"),
    (re.compile(r"\b(\d+)[uU][lL]*\b"), r"\1"),
    (re.compile(r"&&"), " and "),
    (re.compile(r"\|\|"), " or "),
    (re.compile(r"!(?!=)"), " not "),
    (re.compile(r"(?<![/])/(?![/])"), "//"),
)


_TERNARY = re.compile(r"^(?P<cond>[^?:]+)\?(?P<yes>[^?:]+):(?P<no>[^?:]+)$")


@functools.lru_cache(maxsize=4096)
def compile_expr(text: str):
    """Python code object of the C expression ``text`` (one unnested ``a ? b : c`` allowed).

    Raises:
        SyntaxError: not an expression of the supported subset.
    """
    m = _TERNARY.match(text)
    py = f"(({m['yes']}) if ({m['cond']}) else ({m['no']}))" if m else text
    for rx, rep in _RULES:
        py = rx.sub(rep, py)
    return compile(py.strip(), "<ir expression>", "eval")


def evaluate(text: str, env: dict):
    """Value of the C expression ``text`` with variables from ``env``.

    Raises:
        NameError: a variable the environment lacks; SyntaxError: unsupported form.
    """
    return eval(compile_expr(text), {"__builtins__": {}}, env)  # noqa: S307 - IR text written by b200c

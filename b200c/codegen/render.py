"""Rendering IR nodes to CUDA text through jinja2 templates.

Each backend has a template folder (``b200c/codegen/<backend>/templates``)
searched before the shared one (``b200c/codegen/templates``); a node type
``Foo`` renders with ``stmt/Foo.j2``. Templates only print: every decision is
made in Python (plan, lowering) and arrives as node fields.
"""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

from ..compile_cache import template_bytecode_cache

_HERE = Path(__file__).parent
_OPTIONS = dict(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, autoescape=False)


@functools.lru_cache(maxsize=None)
def environment(backend_templates: str) -> jinja2.Environment:
    """The jinja2 environment of a backend (its folder first, then the shared one).

    Compiled templates are kept on disk (:func:`b200c.compile_cache.template_bytecode_cache`),
    so a fresh process loads their bytecode instead of compiling them again.
    """
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(backend_templates),
                                    jinja2.FileSystemLoader(str(_HERE / "templates"))]),
        undefined=jinja2.StrictUndefined,
        bytecode_cache=template_bytecode_cache(jinja2.__version__, repr(sorted(_OPTIONS.items())), "StrictUndefined"),
        **_OPTIONS,
    )


def indent(text: str, n: int = 2) -> str:
    """``text`` with every non-blank line indented by ``n`` spaces."""
    pad = " " * n
    return "\n".join((pad + line) if line.strip() else "" for line in text.splitlines())


def render_block(env: jinja2.Environment, nodes) -> str:
    """Render a list of IR nodes, children indented by two spaces."""
    out = []
    for node in nodes:
        tpl = env.get_template(f"stmt/{type(node).__name__}.j2")
        body = indent(render_block(env, node.children())) if node.children() else ""
        out.append(tpl.render(n=node, body=body).rstrip("\n"))
    return "\n".join(out)

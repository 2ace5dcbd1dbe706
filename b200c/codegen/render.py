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
    so a fresh process loads their bytecode instead of compiling them again. A
    template is loaded once per process (``auto_reload=False``: no ``stat`` of
    its file on every use; a template edited while a process runs is seen by
    the next process).
    """
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(backend_templates),
                                    jinja2.FileSystemLoader(str(_HERE / "templates"))]),
        undefined=jinja2.StrictUndefined,
        bytecode_cache=template_bytecode_cache(jinja2.__version__, repr(sorted(_OPTIONS.items())), "StrictUndefined"),
        auto_reload=False,
        **_OPTIONS,
    )


@functools.lru_cache(maxsize=None)
def _node_template(env: jinja2.Environment, node_type: type) -> jinja2.Template:
    return env.get_template(f"stmt/{node_type.__name__}.j2")


def indent(text: str, n: int = 2) -> str:
    """``text`` with every non-blank line indented by ``n`` spaces."""
    pad = " " * n
    return "\n".join((pad + line) if line.strip() else "" for line in text.splitlines())


def render_block(env: jinja2.Environment, nodes) -> str:
    """Render a list of IR nodes, children indented by two spaces."""
    out = []
    for node in nodes:
        kids = node.children()
        body = indent(render_block(env, kids)) if kids else ""
        out.append(_node_template(env, type(node)).render(n=node, body=body).rstrip("\n"))
    return "\n".join(out)

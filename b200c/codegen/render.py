"""Rendering IR nodes to CUDA text through jinja2 templates.

Each backend has a template folder (``b200c/codegen/<backend>/templates``)
searched before the shared one (``b200c/codegen/templates``); a node type
``Foo`` renders with ``stmt/Foo.j2``. Templates only print: every decision is
made in Python (plan, lowering) and arrives as node fields.
"""
from __future__ import annotations

import functools
import re
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


_NON_BLANK_LINE = re.compile(r"^(?=[^\n]*\S)", re.M)  # the start of a line with a non-space character
_BLANK_LINE = re.compile(r"^[^\S\n]+$", re.M)  # a line of white space only


def indent(text: str, n: int = 2) -> str:
    """``text`` with every non-blank line indented by ``n`` spaces, lines of spaces emptied and
    one final newline dropped (lines are separated by ``\\n``)."""
    if text.endswith("\n"):
        text = text[:-1]
    return _NON_BLANK_LINE.sub(" " * n, _BLANK_LINE.sub("", text))


def render_node(template: jinja2.Template, node, body: str) -> str:
    """``template.render(n=node, body=body)`` without merging the environment's globals into a new
    context for every node (``new_context(..., shared=True)``, jinja2's documented way to pass a
    context as is; ``range`` is the one global the node templates use): ~5 us per node instead of
    ~14 on the CPU machine, and a kernel renders ~200 nodes."""
    ctx = template.new_context({"n": node, "body": body, "range": range}, shared=True)
    try:
        return template.environment.concat(template.root_render_func(ctx))
    except Exception:
        template.environment.handle_exception()  # the template's own line in the traceback, as render() gives


def render_block(env: jinja2.Environment, nodes) -> str:
    """Render a list of IR nodes, children indented by two spaces."""
    out = []
    for node in nodes:
        kids = node.children()
        body = indent(render_block(env, kids)) if kids else ""
        out.append(render_node(_node_template(env, type(node)), node, body).rstrip("\n"))
    return "\n".join(out)

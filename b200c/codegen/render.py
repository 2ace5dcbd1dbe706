"""Rendering IR nodes to CUDA text through jinja2 templates.

Each backend has a template folder (``b200c/codegen/<backend>/templates``)
for its own node types and file skeleton, beside the shared one
(``b200c/codegen/templates``) of the shared nodes; a node type ``Foo``
renders with ``stmt/Foo.j2``. A backend template never has the name of a
shared one (:func:`environment` refuses it): a backend that prints a node
differently has its own node type, named as such. What a shared node means
on a target (a fence, a warp's arrival) comes from the backend's renderer
table (``<backend>/text.py``), printed as ``tt.<intent>``. Templates only
print: every decision is made in Python (plan, lowering) and arrives as node
fields.
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
def environment(backend_templates: str, text: tuple = ()) -> jinja2.Environment:
    """The jinja2 environment of a backend: its template folder and the shared one, and its
    renderer table ``text`` (``(intent, text)`` pairs, the templates' ``tt``).

    Compiled templates are kept on disk (:func:`b200c.compile_cache.template_bytecode_cache`),
    so a fresh process loads their bytecode instead of compiling them again. A
    template is loaded once per process (``auto_reload=False``: no ``stat`` of
    its file on every use; a template edited while a process runs is seen by
    the next process).
    """
    shadowed = shadowed_templates(backend_templates)
    if shadowed:
        raise RuntimeError(f"backend templates {backend_templates} shadow shared ones: {', '.join(shadowed)}; give "
                           f"the backend's node its own type (and template name)")
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(backend_templates),
                                    jinja2.FileSystemLoader(str(_HERE / "templates"))]),
        undefined=jinja2.StrictUndefined,
        bytecode_cache=template_bytecode_cache(jinja2.__version__, repr(sorted(_OPTIONS.items())), "StrictUndefined"),
        auto_reload=False,
        **_OPTIONS,
    )
    env.globals["tt"] = dict(text)
    return env


def shadowed_templates(backend_templates: str) -> list:
    """Templates of a backend folder that have the name of a shared template (there should be none)."""
    shared = {p.relative_to(_HERE / "templates") for p in (_HERE / "templates").rglob("*.j2")}
    return sorted(str(p.relative_to(backend_templates)) for p in Path(backend_templates).rglob("*.j2")
                  if p.relative_to(backend_templates) in shared)


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
    context as is; ``range`` and the renderer table ``tt`` are the globals the node templates use): ~5 us per node instead of
    ~14 on the CPU machine, and a kernel renders ~200 nodes."""
    ctx = template.new_context({"n": node, "body": body, "range": range, "tt": template.globals.get("tt")}, shared=True)
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

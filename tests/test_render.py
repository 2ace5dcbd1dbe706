"""b200c/codegen/render.py: the fast paths give what the plain ones gave."""
import random

import jinja2
import pytest

from b200c.codegen.render import indent, render_node


def _indent_by_lines(text: str, n: int = 2) -> str:
    """The line-by-line definition indent() must match."""
    pad = " " * n
    return "\n".join((pad + line) if line.strip() else "" for line in text.splitlines())


def test_indent_matches_the_line_by_line_definition():
    rng = random.Random(1)
    parts = ["a", "", "  ", "\t", " x ", "b;", "  y", "\n", "\n\n", "  \n  "]
    for _ in range(5000):
        text = "\n".join(rng.choice(parts) for _ in range(rng.randint(0, 7)))
        if rng.random() < 0.3:
            text += "\n"
        n = rng.choice([0, 2, 4])
        assert indent(text, n) == _indent_by_lines(text, n), repr(text)


def test_render_node_equals_render_and_reports_template_errors():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    t = env.from_string("{% for i in range(n.k) %}x{{ i }};{% endfor %}\n{{ body }}")

    class N:
        k = 3

    assert render_node(t, N(), "  y") == t.render(n=N(), body="  y")
    bad = env.from_string("{{ n.missing }}")
    with pytest.raises(jinja2.UndefinedError):
        render_node(bad, N(), "")

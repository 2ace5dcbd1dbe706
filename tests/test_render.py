"""b200c/codegen/render.py: the fast paths give what the plain ones gave."""
import importlib
import random
from pathlib import Path

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


def test_no_backend_template_shadows_a_shared_one(tmp_path):
    """A backend's node that prints differently is its own node type: its template has its own name
    (sm90's work loop is DenseWorkLoop.j2, not a second WorkLoop.j2); the environment refuses a folder
    that would shadow a shared template."""
    from b200c.codegen.render import environment, shadowed_templates
    from b200c.codegen.targets import REGISTRY

    for t in REGISTRY:
        folder = Path(t.backend_module().__file__).parent / "templates"
        assert shadowed_templates(str(folder)) == [], t.name
    (tmp_path / "stmt").mkdir()
    (tmp_path / "stmt" / "Arrive.j2").write_text("arrive\n")
    with pytest.raises(RuntimeError, match=r"shadow shared ones: stmt/Arrive.j2"):
        environment(str(tmp_path))


def test_shared_nodes_take_their_target_text_from_the_backend_table():
    """The shared Arrive/Wait templates print the backend's renderer table: a fence on tcgen05, the
    predicated warp arrival on sm90, and a backend without a fence fails to render one."""
    import jinja2

    from b200c.codegen.ir import Arrive, PhaseRef, Wait
    from b200c.codegen.render import render_block

    sm90_emit = importlib.import_module("b200c.codegen.sm90.emit")
    tc_emit = importlib.import_module("b200c.codegen.tcgen05.emit")

    arrive = Arrive("p_ready", "q", by="warp", fence_before=True)
    wait = Wait("s_full", "q", PhaseRef("ph"), 7, fence_after=True)
    tc = render_block(tc_emit._env(), [arrive, wait])
    assert tc.splitlines()[:3] == ["tcgen05_fence_before();", "__syncwarp();",
                                   "if (lane_id() == 0) mbar_arrive(c.bar(BAR_P_READY + q));  // one arrival per warp"]
    assert tc.splitlines()[-1] == "tcgen05_fence_after();"
    plain = Arrive("kv_empty", "slot", by="warp")
    assert render_block(sm90_emit._env(), [plain]) == (
        "mbar_arrive_if(c.bar(BAR_KV_EMPTY + slot), lane_id() == 0);  // one arrival per warp (predicated, no branch)")
    with pytest.raises(jinja2.UndefinedError, match="fence_before_sync"):
        render_block(sm90_emit._env(), [arrive])

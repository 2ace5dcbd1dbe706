"""Layers import only downward (dsl <- codegen <- runtime <- cli), and no module imports itself back
through others: the import graph of b200c/ (every ``import`` statement, function-level ones too, read
with ast) has no cycle and no edge from a lower layer to a higher one."""
import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "b200c"

# lowest first; a module may import its own layer and the ones before it
LAYERS = (
    ("b200c.errors", "b200c.version", "b200c.compile_cache"),
    ("b200c.dsl",),
    ("b200c.codegen",),
    ("b200c.toolchain", "b200c.nvcc", "b200c.sass", "b200c.draw"),
    ("b200c.runtime",),
    ("b200c.bench", "b200c.check"),
    ("b200c.cli", "b200c.__main__", "b200c"),  # the package root: the public facade
)


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    best = None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                if best is None or len(p) > best[1]:
                    best = (i, len(p))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def import_graph() -> nx.DiGraph:
    mods = {_module(p): p for p in PKG.rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for m, path in mods.items():
        base = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = base[:len(base) - (node.level - 1)]
                    target = ".".join(pkg + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for t in names:
                if t in mods and t != m:
                    g.add_edge(m, t)
    return g


def test_no_import_cycle():
    g = import_graph()
    if not nx.is_directed_acyclic_graph(g):
        raise AssertionError(f"an import cycle: {' -> '.join(a for a, _ in nx.find_cycle(g))}")


def test_layers_import_only_downward():
    up = [(a, b) for a, b in import_graph().edges if _layer(b) > _layer(a)]
    assert not up, "imports that run back up a layer: " + ", ".join(f"{a} -> {b}" for a, b in up)


def test_the_graph_sees_imports():
    """The graph is not empty by mistake: known edges are found (a lazy one too)."""
    g = import_graph()
    assert g.has_edge("b200c.runtime.api", "b200c.runtime.launcher")
    assert g.has_edge("b200c.codegen", "b200c.dsl.validate")  # inside make_plan
    assert g.has_edge("b200c.codegen.tcgen05.emit", "b200c.version")

"""No two of our modules import each other, directly or round a longer circle.

A circle works in Python only while every import on it stays inside functions, or happens after
the names it needs are bound: one import moved to the top, or one name read at import time, and
the package fails to import. Issue 40 found two (`interop/exporter.py` and
`interop/onnx_export.py`, `bench/accelerator*.py` and `bench/gpu_profile.py`). Every ``import``
counts, the ones inside functions included, but those under ``if TYPE_CHECKING:`` (never run),
read from the source with `ast` (nothing is imported): the graph is of which module needs which.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parents[2]


def modules() -> dict[str, Path]:
    """Every module of the package and of bench/ (a folder of scripts that import each other
    as ``bench.NAME``), by dotted name; a package by its own name."""
    out = {}
    for root in ("lbdl_dsl", "bench"):
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _run_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that can run: all but those under ``if TYPE_CHECKING:``."""
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for n in ast.walk(block)
    }
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in typing_only
    ]


def graph() -> nx.DiGraph:
    known = modules()
    g = nx.DiGraph()
    g.add_nodes_from(known)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _run_imports(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 folders
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                # `from a import b` needs the submodule a.b where there is one, else a
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
                ]
            else:
                continue
            g.add_edges_from((name, t) for t in targets if t in known and t != name)
    return g


def test_the_graph_sees_imports() -> None:
    g = graph()
    assert g.has_edge("lbdl_dsl.cli.build", "lbdl_dsl.cli.common")
    assert g.has_edge("bench.accelerator", "bench.harness")


def test_no_module_imports_itself_round_a_circle() -> None:
    circles = [sorted(c) for c in nx.strongly_connected_components(graph()) if len(c) > 1]
    assert not circles, "import circles: " + "; ".join(" ⇄ ".join(c) for c in circles)

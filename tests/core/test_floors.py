"""No import runs up a floor (docs/architecture.md): checked on the source, module by module.

The floors are what keep ``--check`` free of JAX and Graphviz and the compiler testable without
any backend; an import that runs up would not fail any other test until it made something slow
or circular, so the rule is checked directly on every ``import`` statement, including the ones
inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lbdl_dsl"

# Every module's floor, one line per part of the package: a prefix matches a folder's modules,
# the package itself (`lbdl_dsl`, its __init__) only itself. A module no line names fails the
# test: there is no catch-all floor for it to fall into.
FLOORS = {
    "lbdl_dsl.core": 0,  # source spans and errors, the shape algebra, the layer registry
    "lbdl_dsl.compiler": 1,  # text to a checked graph
    "lbdl_dsl.report": 2,  # analyses and text over a checked graph, no JAX
    "lbdl_dsl.memory_report": 2,
    "lbdl_dsl.boxtext": 2,
    "lbdl_dsl.diff": 2,
    "lbdl_dsl.output": 2,
    "lbdl_dsl.npzfile": 2,
    "lbdl_dsl.bytes_text": 2,  # files read safely, for the backends and training
    "lbdl_dsl.backends": 3,  # diagram and JAX, from a checked graph
    "lbdl_dsl.training": 4,  # applications over a Model
    "lbdl_dsl.interop": 4,
    "lbdl_dsl.serve": 4,
    "lbdl_dsl.api": 5,  # the front doors: Python and the command line
    "lbdl_dsl.cli": 5,
    "lbdl_dsl.tools": 5,
    "lbdl_dsl.__main__": 5,
    "lbdl_dsl": 5,
}


def floor(module: str) -> int:
    if module == "lbdl_dsl":
        return FLOORS[module]
    named = [p for p in FLOORS if p != "lbdl_dsl" and (module == p or module.startswith(p + "."))]
    assert named, f"{module} has no floor: give its part of the package a line in FLOORS"
    return FLOORS[max(named, key=len)]


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out.append((name, path))
    return out


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every module of ours that ``path`` imports, with the line."""
    known = {name for name, _ in modules()}
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # `from lbdl_dsl import report` imports the submodule
                sub = f"{node.module}.{alias.name}"
                found.append((sub if sub in known else node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return [(m, line) for m, line in found if m == "lbdl_dsl" or m.startswith("lbdl_dsl.")]


@pytest.mark.parametrize(("name", "path"), modules(), ids=[n for n, _ in modules()])
def test_no_import_runs_up_a_floor(name: str, path: Path) -> None:
    mine = floor(name)
    for imported, line in imports_of(path):
        assert floor(imported) <= mine, f"{name}:{line} imports {imported} from a higher floor"


def test_the_compiler_never_imports_a_backend() -> None:
    for name, path in modules():
        if name.startswith("lbdl_dsl.compiler") or name.startswith("lbdl_dsl.core"):
            for imported, line in imports_of(path):
                assert not imported.startswith("lbdl_dsl.backends"), f"{name}:{line}"
                assert imported != "lbdl_dsl.report", f"{name}:{line}"

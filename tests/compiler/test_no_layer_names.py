"""No pass of the compiler, nor the figure, tests a layer's name: what a layer does is its
registry entry's.

A comparison of a box's op (``inst.node.op``, ``node.op``, a variable ``op``) against a string
literal, or a set, tuple or list of them, in ``lbdl_dsl/compiler/`` is a special case that
belongs in the layer's entry (`lbdl_dsl/core/layers/`), where every pass reads it the same
way (as memory.py reads attention's `kept`). The registry itself may name its layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "lbdl_dsl"
COMPILER = PACKAGE / "compiler"
# the passes, and the figure and reports that read a checked model: a layer's look is its entry's
# (`Layer.glyph`, `Layer.tall`, `Layer.ports`), as its memory rule is (`Layer.kept`)
PASSES = (COMPILER, PACKAGE / "backends" / "diagram", PACKAGE)


def _is_op(node: ast.expr) -> bool:
    """``x.op``, or a bare name ``op`` / ``op_name``: where a pass holds a box's layer name."""
    if isinstance(node, ast.Attribute):
        return node.attr == "op"
    return isinstance(node, ast.Name) and node.id in {"op", "op_name"}


def _literal(node: ast.expr) -> bool:
    """A string, or a literal collection of strings."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_literal(e) for e in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # frozenset({...})
        return node.func.id in {"frozenset", "set", "tuple"} and all(_literal(a) for a in node.args)
    return False


def name_tests(source: str) -> list[int]:
    """Lines of ``source`` that compare a box's op with a literal name."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_is_op(a) for a in sides) and any(_literal(a) for a in sides):
            lines.append(node.lineno)
    return lines


def test_the_checker_finds_a_name_test() -> None:
    bad = 'if inst.node.op != "mha":\n    pass\nok = op in ("fc", "conv-2d")\n'
    assert name_tests(bad) == [1, 3]
    assert name_tests("if layer.kept is None:\n    pass\nx = inst.kind == 'layer'\n") == []


def test_no_pass_tests_a_layer_name() -> None:
    found = [
        f"{path.relative_to(COMPILER.parents[1])}:{line}"
        for folder in PASSES
        for path in sorted(folder.glob("*.py"))
        if not path.name.startswith("_")
        for line in name_tests(path.read_text(encoding="utf-8"))
    ]
    assert not found, "a pass tests a layer's name (move the rule into its registry entry): " + (
        ", ".join(found)
    )

"""The `experts e=E k=K cap=C:` group through the compiler's stages: its syntax, what build
refuses without shapes, the graph and shapes texts, and what checking refuses with shapes (the
golden errors of tests/golden/errors/experts_*.lbdl show the full messages)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lbdl_dsl.compiler.driver import CheckFailed
from lbdl_dsl.compiler.graph import ExpertsNode, verify
from lbdl_dsl.compiler.textform import graph_text, shapes_text
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers import LAYERS

HEAD = "model m(E=4):\n  input X: 6×8\n"
BODY = "    fc 16\n    relu\n    fc 8\n"


def _message(run: Callable[[], Any]) -> tuple[str, str | None, int, int]:
    with pytest.raises(LbdlError) as info:
        run()
    d = info.value.diagnostics[0]
    assert d.span is not None
    return d.message, d.hint, d.span.line, d.span.column


def test_the_group_builds_one_node_whose_body_is_one_expert(compile_text) -> None:
    built = compile_text(HEAD + "  experts e=E k=1 cap=2.0:\n" + BODY, stop_after="build")
    program = built.program
    verify(program, set(LAYERS))
    (node,) = [n for n in program.model.body.nodes() if isinstance(n, ExpertsNode)]
    assert (str(node.experts), str(node.k), node.capacity) == ("E", "1", 2.0)
    assert [n.op for n in node.body.nodes() if n.op] == ["fc", "relu", "fc"]
    assert "experts_0 = experts(input:X) e=E k=1 cap=2.0" in graph_text(program)


def test_k_defaults_to_two_and_there_is_no_capacity_unless_asked(compile_text) -> None:
    checked = compile_text(HEAD + "  experts e=E:\n" + BODY)
    assert "experts_0: experts -> 6×8" in shapes_text(checked)
    assert "[e=4 k=2]" in shapes_text(checked)


@pytest.mark.parametrize(
    ("header", "words", "column"),
    [
        ("experts e=4 n=2:", "has no hyper-parameter `n`", 15),
        ("experts k=2:", "needs `e`", 3),
        ("experts e=4 cap=0:", "`cap` is a positive number", 19),
        ("experts e=1.5:", "`e` is a whole number", 13),
    ],
)
def test_build_refuses_what_is_wrong_without_shapes(compile_text, header, words, column) -> None:
    text = HEAD + f"  {header}\n" + BODY
    message, _, line, col = _message(lambda: compile_text(text, stop_after="build"))
    assert words in message and (line, col) == (3, column)


def test_an_expert_count_without_a_value_asks_for_one(compile_text) -> None:
    text = "model m:\n  input X: 6×8\n  experts e=E:\n" + BODY
    with pytest.raises(LbdlError) as info:  # E is no parameter: unknown in this size
        compile_text(text, stop_after="build")
    assert "unknown name `E`" in info.value.diagnostics[0].message
    text = "model m:\n  input X: T×8\n  experts e=T:\n" + BODY  # a size left symbolic
    with pytest.raises(CheckFailed) as failed:
        compile_text(text)
    diag = failed.value.checked.diagnostics[0]
    assert "`e` of `experts` must be a whole number" in diag.message
    assert "--set" in (diag.hint or "")


def test_an_expert_must_give_a_vector_per_token(compile_text) -> None:
    text = HEAD + "  experts e=2:\n    fc 16\n    reshape 4×4\n"
    with pytest.raises(CheckFailed) as failed:
        compile_text(text)
    assert "one vector per token" in failed.value.checked.diagnostics[0].message


def test_an_expert_may_change_the_width(compile_text) -> None:
    checked = compile_text(HEAD + "  experts e=2 k=1:\n    fc 16\n    gelu\n    fc 5\n")
    assert str(checked.root[-1].output) == "6×5"

"""Where the parser says things are, now that it builds the tree while lark reduces.

The nodes are made inside lark's parse, each from its rule's tokens and children, with no tree
and no ``propagate_positions``: a span is the text from the rule's first token to its last,
through the parentheses around a child, as lark counted it. These tests pin the spans that
depend on that (a value in parentheses, a shape whose last size is one, a block's typed
pattern), errors raised deep inside an expression, a group or a block, after constructs of
several lines, and the order of errors: a syntax error anywhere in the file comes before an
error of a node above it, as when the whole tree was built first.
"""

from __future__ import annotations

import pytest

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.parser import parse
from lbdl_dsl.core.errors import LbdlError, Span


def where(span: Span) -> tuple[int, int, int, int]:
    return (span.line, span.column, span.end_line, span.end_column)


def error(text: str) -> tuple[str, tuple[int, int, int, int]]:
    with pytest.raises(LbdlError) as caught:
        parse(text, "t.lbdl")
    first = caught.value.first
    assert first.span is not None
    return first.message, where(first.span)


def test_a_value_in_parentheses_ends_at_its_closing_parenthesis() -> None:
    module = parse("model m:\n  input X: 8\n  fc out=(8) bias=(1)\n  relu\n", "t.lbdl")
    fc = module.models[0].body[1]
    assert isinstance(fc, ast.Box)
    out, bias = fc.hparams
    assert where(out.span) == (3, 6, 3, 13)  # `out=(8)`, parentheses included
    assert isinstance(out.value, ast.SizeExpr)
    assert where(out.value.span) == (3, 11, 3, 12)  # the size itself: `8`
    assert where(bias.span) == (3, 14, 3, 22)
    assert where(fc.span) == (3, 3, 3, 22)  # the line's code, not its newline


def test_a_shape_ends_at_its_last_size_with_its_parentheses() -> None:
    module = parse("model m(H=4):\n  input X: 3×((H+1))   # c\n  relu\n", "t.lbdl")
    decl = module.models[0].body[0]
    assert isinstance(decl, ast.InputDecl)
    assert where(decl.shape.span) == (2, 12, 2, 21)
    assert [d.text for d in decl.shape.dims] == ["3", "H+1"]
    assert where(decl.shape.dims[1].span) == (2, 16, 2, 19)
    assert where(decl.span) == (2, 3, 2, 21)  # the comment is not the statement's


def test_a_typed_block_pattern_ends_after_its_range() -> None:
    module = parse("block b on X: T int<(V)>, Y: T×D:\n  relu\n", "t.lbdl")
    typed, plain = module.blocks[0].inputs
    assert where(typed.span) == (1, 12, 1, 25)  # `X: T int<(V)>`
    assert typed.vocab is not None and typed.vocab.text == "V"
    assert where(plain.span) == (1, 27, 1, 33)
    assert where(module.blocks[0].span) == (1, 1, 1, 34)


def test_a_tuple_and_a_string_span_their_delimiters() -> None:
    module = parse('model m:\n  input X: 3×8×8\n  maxpool k=(2, 2) pad="same"\n', "t.lbdl")
    pool = module.models[0].body[1]
    assert isinstance(pool, ast.Box)
    k, pad = pool.hparams
    assert isinstance(k.value, ast.TupleValue) and isinstance(pad.value, ast.Literal)
    assert (k.value.text, where(k.value.span)) == ("(2, 2)", (3, 13, 3, 19))
    assert (pad.value.text, where(pad.value.span)) == ('"same"', (3, 24, 3, 30))


def test_groups_and_definitions_span_their_header_line() -> None:
    text = (
        "block b(S=2) on C:\n"
        "  residual:\n"
        "    ×2:   # twice\n"
        "      fc out=C\n"
        "  shortcut:\n"
        "    relu\n"
        "model m:\n"
        "  input X: 4\n"
        "  experts e=4 k=2:\n"
        "    b\n"
    )
    module = parse(text, "t.lbdl")
    block = module.blocks[0]
    assert where(block.span) == (1, 1, 1, 19)
    residual = block.body[0]
    assert isinstance(residual, ast.ResidualGroup)
    assert where(residual.span) == (2, 3, 2, 12)
    assert residual.shortcut_span is not None and where(residual.shortcut_span) == (5, 3, 5, 12)
    repeat = residual.body[0]
    assert isinstance(repeat, ast.RepeatGroup) and where(repeat.span) == (3, 5, 3, 8)
    experts = module.models[0].body[1]
    assert isinstance(experts, ast.ExpertsGroup)
    assert where(experts.span) == (9, 3, 9, 19)
    assert [where(h.span) for h in experts.hparams] == [(9, 11, 9, 14), (9, 15, 9, 18)]


def test_division_by_zero_deep_in_an_expression_after_a_group() -> None:
    text = (
        "block b on C:\n"
        "  residual:\n"
        "    relu\n"
        "  shortcut:\n"
        "    fc out=C\n"
        "  fc out=(C + 2*(3/(1-1)))\n"
    )
    assert error(text) == ("division by zero", (6, 18, 6, 25))  # `3/(1-1)`


def test_a_repeated_hyper_parameter_inside_nested_groups() -> None:
    text = "model m:\n  input X: 4\n  ×2:\n    residual:\n      fc out=4 out=(2+2)\n"
    assert error(text) == ("hyper-parameter `out` is given twice", (5, 16, 5, 25))


def test_a_bad_power_in_a_block_parameter_default() -> None:
    text = "block b(S=2, T=(S+1)^9) on C:\n  relu\n"
    assert error(text) == ("exponent 9 is too large", (1, 16, 1, 23))  # `(S+1)^9`


def test_an_unknown_input_type_spans_the_pattern() -> None:
    assert error("block b on X: T text<V>:\n  relu\n") == (
        "unknown input type `text`",
        (1, 12, 1, 24),
    )


def test_a_syntax_error_later_comes_before_a_node_s_error() -> None:
    text = "model m:\n  input X: 4\n  fc out=1/0\n  relu:\n"
    message, place = error(text)
    assert message.startswith("only group headers end with `:`")
    assert place[:2] == (4, 7)
    # without the syntax error, the division is the error
    assert error(text.replace("relu:", "relu")) == ("division by zero", (3, 10, 3, 13))


def test_a_long_file_places_its_last_error() -> None:
    lines = ["model m:", "  input X: 4"] + ["  fc out=4"] * 5000 + ["  fc out=(4/(2-2))"]
    assert error("\n".join(lines) + "\n") == ("division by zero", (5003, 11, 5003, 18))

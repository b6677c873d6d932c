"""Stage 1, parse: every construct of grammar/lbdl.lark becomes the syntax tree it should.

The tree is the contract between the parser and the rest of the compiler, so these tests build
the expected values (statement types, values, expressions, spans) and compare; the wording of
syntax errors is tested with the error table elsewhere. No lark object may appear in a tree.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.parser import parse
from lbdl_dsl.core.errors import LbdlError, Span
from lbdl_dsl.core.symbolic import Expr, sym

C, D, H, S, T, V, W = (sym(n) for n in "CDHSTVW")


def body(text: str) -> tuple[ast.Stmt, ...]:
    """The statements of a one-model spec whose body is ``text`` (indented by two spaces)."""
    lines = "".join(f"  {line}\n" if line else "\n" for line in text.split("\n"))
    module = parse("model m:\n" + lines, "t.lbdl")
    return module.models[0].body


def box(text: str) -> ast.Box:
    """The box of ``input X: 3`` followed by one box line."""
    stmts = body("input X: 3\n" + text)
    assert isinstance(stmts[1], ast.Box)
    return stmts[1]


def dims(shape: ast.ShapeAST | None) -> tuple[Expr, ...]:
    assert shape is not None
    return tuple(d.expr for d in shape.dims)


def walk_values(obj):
    """Every value reachable in a tree, for the no-lark-objects check."""
    yield obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from walk_values(getattr(obj, f.name))
    elif isinstance(obj, tuple):
        for item in obj:
            yield from walk_values(item)


# -- definitions ---------------------------------------------------------------------------


def test_a_file_holds_imports_blocks_and_a_model() -> None:
    module = parse(
        'import "blocks/resnet.lbdl"\n'
        'import "../lib.lbdl"\n'
        "block b on C:\n  relu\n"
        "model m:\n  input X: 3\n  b\n",
        "f.lbdl",
    )
    assert module.file == "f.lbdl"
    assert [i.path for i in module.imports] == ["blocks/resnet.lbdl", "../lib.lbdl"]
    assert module.imports[0].span == Span("f.lbdl", 1, 1, 1, 28)
    assert [b.name for b in module.blocks] == ["b"]
    assert [m.name for m in module.models] == ["m"]


def test_block_header_with_parameters_and_named_patterns() -> None:
    module = parse(
        "block merge(S, k=3, act=relu) on C×H×W, skip: D×HxW:\n  concat(skip)\n", "f.lbdl"
    )
    (b,) = module.blocks
    assert b.name == "merge" and b.name_span == Span("f.lbdl", 1, 7, 1, 12)
    assert [(p.name, p.default) for p in b.params][0] == ("S", None)
    k, act = b.params[1].default, b.params[2].default
    assert isinstance(k, ast.SizeExpr) and k.expr == 3
    assert isinstance(act, ast.SizeExpr) and act.bare_name == "relu"
    first, second = b.inputs
    assert first.name is None and dims(first.shape) == (C, H, W)
    assert second.name == "skip" and dims(second.shape) == (D, H, W)
    assert second.span == Span("f.lbdl", 1, 41, 1, 52)


def test_block_on_a_single_size() -> None:
    (b,) = parse("block mlp on D:\n  fc  D\n").blocks
    assert dims(b.inputs[0].shape) == (D,)


def test_model_parameters_take_every_value_type() -> None:
    module = parse(
        'model m(N=2, D=4*8, W=D/2, p=0.1, eps=1e-5, name="x", flag=true, k=(3, 5), M):\n'
        "  input X: 3\n"
    )
    params = {p.name: p.default for p in module.models[0].params}
    assert params["N"].expr == 2
    assert params["D"].expr == 32 and params["D"].text == "4*8"
    assert params["W"].expr == D / 2
    assert params["p"] == ast.Literal(0.1, "0.1", params["p"].span)
    assert params["eps"].value == 1e-5
    assert params["name"].value == "x" and params["name"].text == '"x"'
    assert params["flag"].bare_name == "true"
    assert [i.expr for i in params["k"].items] == [3, 5] and params["k"].text == "(3, 5)"
    assert params["M"] is None


# -- boxes ---------------------------------------------------------------------------------


def test_a_box_line_in_order_op_repeat_hyper_parameters_shape_name() -> None:
    line = "conv-2d k=3 s=2 p=1 bias=false   64×112×112  -> y"
    b = box(line)
    assert b.op == "conv-2d" and b.args == () and b.count is None
    assert [h.key for h in b.hparams] == ["k", "s", "p", "bias"]
    assert [h.value.text for h in b.hparams] == ["3", "2", "1", "false"]
    assert dims(b.shape) == (64, 112, 112)
    assert b.name is not None and b.name.name == "y"

    def at(text: str) -> Span:  # the span of ``text`` on line 3, indented by two
        col = line.index(text) + 3
        return Span("t.lbdl", 3, col, 3, col + len(text))

    assert b.op_span == at("conv-2d")
    assert b.hparams[1].span == at("s=2")
    s_col = at("s=2").column
    assert b.hparams[1].value.span == Span("t.lbdl", 3, s_col + 2, 3, s_col + 3)
    assert b.shape is not None and b.shape.span == at("64×112×112")
    assert b.name.span == at("y")
    assert b.span == at(line)


def test_hyper_parameter_values() -> None:
    b = box('x k=(3, 5) p=same causal=true a=0.2 eps=1e-5 c=C/4 d=4C/S name="hi" n=-1')
    v = {h.key: h.value for h in b.hparams}
    assert isinstance(v["k"], ast.TupleValue) and [i.expr for i in v["k"].items] == [3, 5]
    assert v["p"].bare_name == "same" and v["causal"].bare_name == "true"
    assert v["a"] == ast.Literal(0.2, "0.2", v["a"].span)
    assert v["eps"].value == pytest.approx(1e-5)
    assert v["c"].expr == C / 4 and v["c"].text == "C/4" and v["c"].bare_name is None
    assert v["d"].expr == 4 * C / S and v["d"].text == "4C/S"
    assert v["name"].value == "hi"
    assert v["n"].expr == -1


def test_expressions_with_unicode_operators_powers_and_underscores() -> None:
    b = box("x a=(D−1)·2 b=D÷2 c=D^2 d=D**2 e=50_257 f=2*(H+1) g=-D")
    v = {h.key: h.value.expr for h in b.hparams}
    assert v == {
        "a": 2 * D - 2,
        "b": D / 2,
        "c": D * D,
        "d": D * D,
        "e": Expr.lift(50257),
        "f": 2 * H + 2,
        "g": -D,
    }


def test_a_fraction_written_as_numbers_is_a_float_literal() -> None:
    (a,) = box("dropout p=1/2").hparams
    assert isinstance(a.value, ast.Literal) and a.value.value == 0.5


def test_extra_inputs_in_parentheses_keep_their_order() -> None:
    b = box("attention(K, V, M) causal=true")
    assert [r.name for r in b.args] == ["K", "V", "M"]
    assert b.args[1].span == Span("t.lbdl", 3, 16, 3, 17)
    plus = box("+(skip)")
    assert plus.op == "+" and [r.name for r in plus.args] == ["skip"]


def test_repeat_on_a_box_with_times_or_ascii_x() -> None:
    for line in ("resblock ×3", "resblock x3", "resblock ×N", "resblock x(N)"):
        b = box(line)
        assert b.op == "resblock" and b.count is not None, line
    assert box("resblock ×3").count.expr == 3
    assert box("resblock xN").count.expr == sym("N")
    b = box("dresblock ×2 S=2  512×28×28")
    assert b.count.expr == 2 and [h.key for h in b.hparams] == ["S"]
    assert dims(b.shape) == (512, 28, 28)


def test_layer_names_as_the_book_writes_them() -> None:
    assert box("leaky relu a=0.2").op == "leaky relu"
    assert box("leaky   relu").op == "leaky relu"
    assert box("self-att h=12 causal=true").op == "self-att"
    assert box("pos-enc").op == "pos-enc"
    assert box("conv_2d k=3").op == "conv_2d"


# -- shapes and the ASCII x ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("32×24×24", (32, 24, 24)),
        ("32x24x24", (32, 24, 24)),
        ("32 x 24 x 24", (32, 24, 24)),
        ("C/4×H×W", (C / 4, H, W)),
        ("C/4xHxW", (C / 4, H, W)),
        ("4C/SxH/SxW/S", (4 * C / S, H / S, W / S)),
        ("(C+D)xHxW", (C + D, H, W)),
        ("2x(H+1)", (2, H + 1)),
        ("Tx4D", (T, 4 * D)),
        ("T×D", (T, D)),
    ],
)
def test_an_ascii_x_before_a_digit_a_capital_or_a_parenthesis_separates(written, expected):
    assert dims(box(f"fc  {written}").shape) == tuple(Expr.lift(e) for e in expected)


def test_an_x_inside_a_lower_case_name_stays_in_the_name() -> None:
    (p,) = parse("model m(max_len=8):\n  input X: 3\n").models[0].params
    assert p.name == "max_len"
    b = box("fc out=x1 bias=false")
    assert b.hparams[0].value.bare_name == "x1"
    b = box("fc  xs")
    assert b.shape is not None and b.shape.dims[0].bare_name == "xs"


def test_names_in_any_script_and_the_book_s_y_hat() -> None:
    stmts = body("input X: 3\nrelu\noutput Ŷ\n-> ŷ_1\noutput Ŷ")
    out = stmts[2]
    assert isinstance(out, ast.OutputDecl) and out.name.name == "Ŷ"
    assert out.name.span == Span("t.lbdl", 4, 10, 4, 11)
    assert stmts[3].name.name == "ŷ_1"
    (p,) = parse("model m(Δ=2):\n  input X: Δ\n").models[0].params
    assert p.name == "Δ"


# -- other statements ----------------------------------------------------------------------


def test_inputs_of_floats_tokens_and_booleans() -> None:
    x, tok, mask = body("input X: 3x224x224\ninput T0: T int<V>\ninput M: T×T bool")[:3]
    assert isinstance(x, ast.InputDecl) and x.dtype == "float" and x.vocab is None
    assert dims(x.shape) == (3, 224, 224)
    assert tok.dtype == "int" and tok.vocab is not None and tok.vocab.expr == V
    assert dims(tok.shape) == (T,)
    assert mask.dtype == "bool" and dims(mask.shape) == (T, T)
    assert x.span == Span("t.lbdl", 2, 3, 2, 21)


def test_outputs_names_froms_and_assertions() -> None:
    stmts = body(
        "input X: 3\nrelu\n-> a\nfrom X\noutput Y\nassert params <= 26M\n"
        "assert macs == 1_000\nassert a: 3"
    )
    name, frm, out, count, exact, shape = stmts[2:]
    assert isinstance(name, ast.NameStmt) and name.name.name == "a"
    assert isinstance(frm, ast.FromStmt) and frm.name.name == "X"
    assert isinstance(out, ast.OutputDecl) and out.name.name == "Y"
    assert isinstance(count, ast.AssertCount) and count.quantity.name == "params"
    assert count.op == "<=" and count.value.text == "26M"
    assert exact.op == "==" and exact.value.expr == 1000
    assert isinstance(shape, ast.AssertShape) and shape.name.name == "a"
    assert dims(shape.shape) == (3,)


def test_the_arrow_may_be_written_as_unicode() -> None:
    assert box("relu → r").name.name == "r"
    assert body("input X: 3\nrelu\n→ r")[2].name.name == "r"


def test_repeat_and_residual_groups_nest() -> None:
    stmts = body(
        "input X: 3\n×N:\n  relu\n  x2:\n    tanh\nresidual:\n  relu\nshortcut:\n  tanh\n"
        "residual:\n  gelu"
    )
    rep, res, plain = stmts[1:]
    assert isinstance(rep, ast.RepeatGroup) and rep.count.expr == sym("N")
    assert rep.span == Span("t.lbdl", 3, 3, 3, 6)
    inner = rep.body[1]
    assert isinstance(inner, ast.RepeatGroup) and inner.count.expr == 2
    assert [b.op for b in inner.body] == ["tanh"]
    assert isinstance(res, ast.ResidualGroup)
    assert [b.op for b in res.body] == ["relu"] and [b.op for b in res.shortcut] == ["tanh"]
    assert res.shortcut_span == Span("t.lbdl", 9, 3, 9, 12)
    assert isinstance(plain, ast.ResidualGroup) and plain.shortcut is None


# -- layout --------------------------------------------------------------------------------


def test_comments_blank_lines_and_alignment_are_ignored() -> None:
    text = (
        "# a header comment\n\n"
        "model m:   # trailing comment\n"
        "  input X: 3×8×8\n\n"
        "  # a comment inside\n"
        "  conv-2d k=3 p=1        16×8×8   # aligned\n"
        "  relu\t\t\t# tabs between columns\n"
        "      \n"
        "  maxpool k=2            16×4×4\n"
    )
    stmts = parse(text).models[0].body
    assert [type(s).__name__ for s in stmts] == ["InputDecl", "Box", "Box", "Box"]
    assert [s.op for s in stmts[1:]] == ["conv-2d", "relu", "maxpool"]
    assert stmts[1].span.line == 7 and stmts[3].span.line == 10
    assert stmts[1].span.end_column == len("  conv-2d k=3 p=1        16×8×8") + 1


def test_crlf_bom_no_final_newline_and_bytes_parse_the_same() -> None:
    plain = parse("model m:\n  input X: 3\n  relu\n", "f.lbdl")
    for variant in (
        "model m:\r\n  input X: 3\r\n  relu\r\n",
        "\ufeffmodel m:\n  input X: 3\n  relu\n",
        "model m:\n  input X: 3\n  relu",
        "\n\nmodel m:\n  input X: 3\n  relu\n\n\n",
    ):
        got = parse(variant, "f.lbdl")
        assert [type(s) for s in got.models[0].body] == [type(s) for s in plain.models[0].body]
        assert got.models[0].body[1].op == "relu"
    assert parse(b"model m:\n  input X: 3\n  relu\n", "f.lbdl") == plain
    assert parse("\ufeffmodel m:\r\n  input X: 3\r\n  relu", "f.lbdl") == plain


def test_a_tab_in_indentation_is_an_error_at_the_tab() -> None:
    with pytest.raises(LbdlError) as info:
        parse("model m:\n\tinput X: 3\n", "f.lbdl")
    assert info.value.first.span == Span.point("f.lbdl", 2, 1)
    assert "tab" in info.value.first.message


def test_no_lark_object_leaves_the_parser() -> None:
    module = parse(
        'import "a.lbdl"\nblock b(S=2) on C×H×W:\n  conv-2d k=1 s=S  C×H/S×W/S\n'
        "model m(N=2):\n  input X: 3×8×8\n  b ×N\n  residual:\n    relu\n  output Y\n"
        "  assert params == 0\n",
        "f.lbdl",
    )
    allowed = (str, int, float, bool, type(None), Fraction, Expr, Span, tuple)
    for value in walk_values(module):
        if dataclasses.is_dataclass(value):
            assert type(value).__module__ == ast.__name__ or isinstance(value, Span)
        else:
            assert isinstance(value, allowed), type(value)
    parsers = ("lark", "lbdl_dsl.compiler._lbdl_parser")  # a Token is a str: its module tells
    assert all(not type(v).__module__.startswith(parsers) for v in walk_values(module))


def test_trees_are_frozen_and_comparable() -> None:
    a = parse("model m:\n  input X: 3\n  relu\n", "f.lbdl")
    b = parse("model m:\n  input X: 3\n  relu\n", "f.lbdl")
    assert a == b and hash(a) == hash(b)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.models[0].name = "n"  # type: ignore[misc]


def test_the_parser_tables_come_from_the_generated_module_alone(tmp_path, monkeypatch):
    """The tables are in `compiler/_lbdl_parser.py`: a parse builds none, and reads and writes
    no cache file (the JSON cache of earlier versions is gone with the need for it)."""
    from lbdl_dsl.compiler import parser

    text = "model m:\n  input X: 4\n  fc 2\n  output Y\n"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    parser._lark.cache_clear()
    try:
        first = parser.parse(text, "m.lbdl")
        assert parser._lark().__class__.__module__ == "lbdl_dsl.compiler._lbdl_parser"
        parser._lark.cache_clear()
        assert parser.parse(text, "m.lbdl") == first
        assert list(tmp_path.iterdir()) == []
    finally:
        parser._lark.cache_clear()


def test_floor_and_ceiling_round_a_written_size() -> None:
    """LLaMA's hidden-size rule, 256·⌈⌊8D/3⌋/256⌉, exact for every D given by --set; and a
    symbolic ceiling ⌈D/C⌉ exact for every D and C."""
    import math

    from lbdl_dsl.compiler.driver import compile_spec
    from lbdl_dsl.core.symbolic import Expr

    text = "model t(D=4096, F=256*⌈⌊8D/3⌋/256⌉):\n  input X: T×D\n  fc out=F\n  output Y\n"
    for d in (1, 64, 4096, 5120, 2999):
        env = compile_spec(text, file="t.lbdl", overrides={"D": str(d)}).env
        assert env["F"].as_int() == 256 * math.ceil(math.floor(8 * d / 3) / 256), d
    shape = "model u:\n  input X: ⌈D/C⌉×C\n  output X\n"
    x = compile_spec(shape, file="u.lbdl").inputs["X"].shape[0]
    for d, c in ((7, 2), (8, 2), (1, 5), (9, 3)):
        assert x.subs({"D": Expr.lift(d), "C": Expr.lift(c)}).as_int() == -(-d // c)

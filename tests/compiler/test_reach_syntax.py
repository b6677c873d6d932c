"""Issue 13's faults in the language itself: names in headers, typed block inputs, the summary's
inputs line, and receptive fields on sequences."""

from __future__ import annotations

import pytest

from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.parser import parse
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.report import render_table, rows

MASKED = """\
block masked on X: T×D, M: T×T bool:
  relu
  +(X)

block tokens on X: T int<V>:
  embed d=8

model m:
  input M: 5×5 bool
  input X: 5×16
  masked(M)
  output A
  input Y: 5 int<10>
  tokens
"""


@pytest.mark.parametrize("name", ["mixtral_8x7b", "x1", "vit_b16x2", "net_3x3"])
def test_a_header_name_is_one_name_even_with_an_x_between_digits(name: str) -> None:
    module = parse(f"block {name}_b on C:\n  relu\n\nmodel {name}:\n  input X: 3\n  relu\n")
    assert module.models[0].name == name
    assert module.blocks[0].name == f"{name}_b"


def test_an_x_between_digits_still_separates_dimensions_in_shapes() -> None:
    module = parse("model m:\n  input X: 3x8x8\n  relu\n")
    assert [d.text for d in module.models[0].body[0].shape.dims] == ["3", "8", "8"]


def test_a_block_input_pattern_may_carry_a_type() -> None:
    compiled = compile_spec(MASKED, file="masked.lbdl")
    assert compiled.ok
    block = compiled.program.blocks["masked"]
    assert [s.dtype for s in block.inputs] == [None, "bool"]
    assert compiled.program.blocks["tokens"].inputs[0].dtype == "int"


def test_a_typed_pattern_refuses_a_tensor_of_another_type() -> None:
    with pytest.raises(LbdlError) as err:
        compile_spec(MASKED.replace("5×5 bool", "5×5"), file="masked.lbdl")
    message = err.value.render()
    assert "block `masked` takes a bool tensor as `M`, got a float tensor of shape 5×5" in message
    assert "masked.lbdl:11:3" in message
    assert "hint: masks are declared `bool`" in message


def test_a_typed_pattern_matches_the_token_range() -> None:
    text = MASKED.replace("embed d=8", "embed d=V") + "  output P\n"
    compiled = compile_spec(text, file="masked.lbdl")
    assert compiled.outputs["P"].shape[-1].as_int() == 10


def test_an_unknown_type_in_a_pattern_is_refused_where_it_is_written() -> None:
    with pytest.raises(LbdlError, match="unknown input type `mask`"):
        parse("block b on X: T, M: T mask:\n  relu\n")


def test_the_summary_writes_the_inputs_types() -> None:
    table = render_table(compile_spec(MASKED, file="masked.lbdl"))
    assert "inputs   M: 5×5 bool, X: 5×16, Y: 5 int<10>" in table


def test_sequences_have_no_receptive_field_but_maps_do() -> None:
    text = (
        "model m:\n  input X: T×16\n  input Z: 8×32×32\n  conv-2d k=3 p=1  8×32×32\n"
        "  relu\n  +(Z)\n  output A\n  from X\n  relu\n  mul(X)\n  +(X)\n"
    )
    checked = compile_spec(text, file="rf.lbdl")
    got = [(r.label, r.rf) for r in rows(checked)]
    assert got == [
        ("conv-2d k=3 p=1", "3/1"),
        ("relu", "3/1"),
        ("+", "3/1"),  # the map's field; the raw input it adds has none of its own
        ("relu", ""),
        ("mul", ""),
        ("+", ""),
    ]

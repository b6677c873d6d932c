"""Every did-you-mean names something valid where it is given (issue 41, item 8).

Each case is a spec with one misspelt name; the hint's suggestion is put in its place and the
spec must then compile: a hint that names a block the box cannot call (itself, or a block that
calls it back), a word the hyper-parameter does not take, or a name unknown there fails.
"""

from __future__ import annotations

import re

import pytest

import lbdl_dsl
from lbdl_dsl.core.errors import LbdlError

CASES = {
    "a layer": ("model m:\n  input X: 8\n  fcc 4\n", "fcc"),
    "a block": ("block blk on D:\n  fc D\nmodel m:\n  input X: 8\n  blkk\n", "blkk"),
    "a hyper-parameter": ("model m:\n  input X: 8\n  fc outt=4\n", "outt"),
    "a hyper-parameter by its doc": ("model m:\n  input X: 4×8\n  self-att heads=2\n", "heads"),
    "a word": ("model m:\n  input X: 4×8\n  ffw act=gelu_tanh\n", "gelu_tanh"),
    "a word's case": ("model m:\n  input X: 4×8\n  ffw act=relU\n", "relU"),
    "a size": ("model m(D=8):\n  input X: D\n  fc Dd\n", "Dd"),
    "a tensor": ("model m:\n  input X: 8\n  fc 8 -> hidden\n  +(hiden)\n", "hiden"),
    "a block parameter": (
        "block blk(width) on D:\n  fc width\nmodel m:\n  input X: 8\n  blk widht=3\n",
        "widht",
    ),
    "an experts group": ("model m:\n  input X: 4×8\n  experts e=4 kk=2:\n    fc 8\n", "kk"),
    "a formula's size": (
        'model m(T=4, NB=8):\n  input X: 1\n  output X\n  table int=NB f="min(i, nb - 1)"  T×T\n',
        "nb",
    ),
    "a formula's function": (
        'model m(T=4):\n  input X: 1\n  output X\n  table f="lgo(i + 1)"  T×T\n',
        "lgo",
    ),
}


def _suggested(hint: str | None) -> str:
    match = re.search(r"did you mean `([^`]+)`", hint or "")
    assert match, f"no suggestion in {hint!r}"
    return match.group(1)


@pytest.mark.parametrize("text,typo", CASES.values(), ids=list(CASES))
def test_the_suggestion_compiles_in_place_of_the_typo(text: str, typo: str) -> None:
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(text=text)
    fixed = text.replace(typo, _suggested(info.value.first.hint), 1)
    lbdl_dsl.check(text=fixed)


@pytest.mark.parametrize(
    "text",
    [
        # inside `blk`, `blk` itself would be a cycle
        "block blk on D:\n  fc D\n  blkk\nmodel m:\n  input X: 8\n  blk\n",
        # inside `a`, `b` calls `a` back
        "block a on D:\n  bb\nblock b on D:\n  a\nmodel m:\n  input X: 8\n  a\n",
    ],
)
def test_a_block_is_not_suggested_where_it_would_call_itself(text: str) -> None:
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(text=text)
    err = info.value.first
    assert err.message.startswith("unknown layer") and "did you mean" not in (err.hint or "")


def test_a_block_that_does_not_lead_back_is_suggested_in_a_block() -> None:
    text = "block leaf on D:\n  fc D\nblock top on D:\n  leaff\nmodel m:\n  input X: 8\n  top\n"
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(text=text)
    assert _suggested(info.value.first.hint) == "leaf"


def test_a_set_parameter_s_suggestion_is_the_model_s() -> None:
    text = "model m(width=8):\n  input X: 4\n  fc width\n"
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(text=text, widht=16)
    assert lbdl_dsl.check(text=text, **{_suggested(info.value.first.hint): 16})


def test_a_flag_value_s_suggestion_is_one_of_the_flag_s_choices(capsys) -> None:
    from lbdl_dsl.cli import main, parser_of

    with pytest.raises(SystemExit) as info:
        main(["train", "specs/mlp.lbdl", "--optimizer", "adamm"])
    assert info.value.code == 1
    word = _suggested(capsys.readouterr().err)
    optimizer = next(a for a in parser_of("train")._actions if a.dest == "optimizer")
    assert word in optimizer.choices

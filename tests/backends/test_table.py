"""`table`: a constant written as a formula over positions (`core/formula.py`).

T5's bucket function is written in `specs/t5-small.lbdl` as two formulas; here they are read
from the spec as written and held to `rel-buckets` (T5's `_relative_position_bucket` in Python)
on every (i, j) of a 512×512 table, through the NumPy evaluator of the tree and through the
JAX backend's generated code. A table's value depends on (i, j) alone, so every smaller T×S
table is a corner of that one. Then the formula's errors: each at its place in the spec, with
a hint that names only what may stand there.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.runtime.constants import formula_table, relative_buckets
from lbdl_dsl.compiler.formula_parse import parse_formula
from lbdl_dsl.core.errors import LbdlError, Span
from lbdl_dsl.core.formula import evaluate
from lbdl_dsl.core.layers.constants import BucketAttrs, buckets_ref
from lbdl_dsl.core.symbolic import Expr

REPO = Path(__file__).resolve().parents[2]
T5 = (REPO / "specs" / "t5-small.lbdl").read_text("utf-8")
ENCODER, DECODER = re.findall(r'table int=NB f="([^"]*)"', T5)
SIZES = (("FAR", Expr.lift(128)), ("NB", Expr.lift(32)))


def _numpy_table(text: str, shape: tuple[int, ...]) -> np.ndarray:
    formula = parse_formula(text, Span.point("t.lbdl", 1, 1), {"NB", "FAR"})
    return evaluate(formula.with_sizes(SIZES), shape)


@pytest.mark.parametrize("text,both", [(ENCODER, True), (DECODER, False)])
def test_t5_s_formula_in_the_spec_is_rel_buckets(text: str, both: bool) -> None:
    want = buckets_ref(BucketAttrs(512, 512, 32, 128, both))[0]
    np.testing.assert_array_equal(_numpy_table(text, (512, 512)), want)
    runtime = relative_buckets(512, 512, 32, 128, bidirectional=both)[0]
    np.testing.assert_array_equal(want, np.asarray(runtime))


def test_the_generated_code_computes_the_spec_s_tables() -> None:
    spec = f"""model t(NB=32, FAR=128, T=512, S=384):
  input X: 1
  output X
  table int=NB f="{ENCODER}"  T×S
  output E
  table int=NB f="{DECODER}"  T×S
  output D
"""
    model = lbdl_dsl.compile(text=spec)
    assert model.param_count == 0
    lambdas = [line for line in model.source.split("\n") if "lambda i, j:" in line]
    assert len(lambdas) == 2 and not any("NB" in line or "FAR" in line for line in lambdas)
    out, _ = model.apply({}, {}, np.zeros((1, 1), np.float32))
    for name, both in (("E", True), ("D", False)):
        assert out[name].dtype == np.int32 and out[name].shape == (1, 512, 384)
        want = buckets_ref(BucketAttrs(512, 384, 32, 128, both))
        np.testing.assert_array_equal(np.asarray(out[name]), want)


def test_a_float_table_and_its_broadcast() -> None:
    """A formula that reads one index is broadcast over the others; floats by default."""
    table = np.asarray(formula_table(lambda i, j: np.exp(-1.0 * i), (3, 4)))
    assert table.dtype == np.float32 and table.shape == (1, 3, 4)
    np.testing.assert_allclose(table[0, :, 2], np.exp(-np.arange(3.0)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"not a whole number in \[0, 4\)"):
        formula_table(lambda i, j: i + j, (3, 4), n=4)


def _error(line: str) -> LbdlError:
    spec = f"model m(T=8, NB=4):\n  input X: 1\n  output X\n  {line}\n  output Y\n"
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(text=spec)
    return info.value


@pytest.mark.parametrize(
    "line,message,column,hint",
    [
        ('table f="abs(j - q)"  T×T', "unknown name `q`", 20, "known here: `i`, `j`, `NB`, `T`"),
        ('table f="abs(j - nb)"  T×T', "unknown name `nb`", 20, "did you mean `NB`?"),
        ('table f="lgo(j + 1)"  T×T', "unknown function `lgo`", 12, "did you mean `log`?"),
        ('table f="__import__(i)"  T×T', "unknown function `__import__`", 12, "may call `exp`"),
        ('table f="min(i)"  T×T', "`min` takes 2 or more arguments", 12, "the smallest"),
        ('table f="log + i"  T×T', "unknown name `log`", 12, "`log` is a function"),
        ('table f="2 * (i + j"  T×T', "the formula ends too soon", 22, "close every `(`"),
        ('table f="i $ j"  T×T', "`$` cannot stand in a formula", 14, "a formula has"),
        ('table f="i j"  T×T', "unexpected `j`", 14, "expected"),
        ('table f=""  T×T', "the formula is empty", 11, "e.g."),
        ("table f=3  T×T", "`f` is a formula in quotes", 11, 'f="abs(j - i)"'),
    ],
)
def test_a_formula_s_errors_point_into_the_string(
    line: str, message: str, column: int, hint: str
) -> None:
    err = _error(line).first
    assert message in err.message and hint in (err.hint or "")
    assert err.span is not None and (err.span.line, err.span.column) == (4, column)


@pytest.mark.parametrize("line", ['table f="i + k"  T×T', 'table f="i + k" size=(T, T)'])
def test_an_index_beyond_the_table_s_axes_is_refused_at_its_place(line: str) -> None:
    err = _error(line).first
    assert "reads `k`, but a table of 2 axes has only `i`, `j`" in err.message
    assert err.span is not None and (err.span.line, err.span.column) == (4, 16)


def test_one_size_is_one_axis() -> None:
    spec = 'block b on T:\n  table f="j" size=S\nmodel m(S=4):\n  input X: 1\n  b\n'
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(text=spec)
    assert "reads `j`, but a table of 1 axis has only `i`" in info.value.first.message


def test_a_typo_near_an_index_beyond_the_axes_is_not_answered_with_it() -> None:
    err = _error('table f="kk + i"  T×T').first  # `k` is no index of a 2-axis table
    assert "unknown name `kk`" in err.message and "`k`" not in (err.hint or "")

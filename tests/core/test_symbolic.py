"""The symbolic size algebra: canonical forms, floors, substitution, exactness and printing.

Every shape the checker compares and every count it prints goes through `Expr`, so the algebra is
tested twice: by hand on the forms the book writes (``C/4``, ``4C/S``, a strided convolution's
floor) and by property tests that build random expressions alongside the same arithmetic on
Python's `Fraction`, and demand that the two agree for random whole-number values.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lbdl_dsl.core.symbolic import Expr, Floor, InexactDivision, const, fmt_count, sym, total

C, D, H, S, T, W = (sym(n) for n in "CDHSTW")
NAMES = ("C", "H", "T", "W")

# -- by hand -------------------------------------------------------------------------------


def test_the_book_s_forms_print_as_the_figures_write_them() -> None:
    assert str(C / 4) == "C/4"
    assert str(4 * C / S) == "4C/S"
    assert str(C / S * 4) == "4C/S"
    assert str(H / S) == "H/S"
    assert str(2 * H / (3 * S)) == "2H/(3·S)"
    assert str(12 * D * T * T + T) == "12D·T² + T"
    assert str(C - H) == "C - H"
    assert str(-C) == "-C"
    assert str(const(0)) == "0"
    assert str(const(Fraction(3, 4))) == "3/4"
    assert repr(C / 4) == "Expr(C/4)"


def test_canonical_form_is_independent_of_how_an_expression_was_built() -> None:
    assert C / 4 == C * Fraction(1, 4) == (C + C + C + C) / 16
    assert hash(C / 4) == hash(C * Fraction(1, 4))
    assert (C + H) * (C - H) == C * C - H * H
    assert 4 * C / S * S == 4 * C
    assert C - C == 0 == Expr()
    assert (C**2).terms == (C * C).terms
    assert C**0 == 1


def test_equality_with_numbers_and_not_with_booleans() -> None:
    assert const(3) == 3
    assert const(Fraction(1, 2)) == Fraction(1, 2)
    assert const(1) != True  # noqa: E712 - a size is never a flag
    assert C != "C"
    with pytest.raises(TypeError):
        Expr.lift(True)
    with pytest.raises(TypeError):
        Expr.lift(1.5)  # type: ignore[arg-type]


def test_queries() -> None:
    assert const(7).as_int() == 7
    assert const(Fraction(7, 2)).as_int() is None
    assert (C / 4).as_int() is None
    assert (C * H / S + 1).free_symbols == {"C", "H", "S"}
    assert H.floordiv(2).free_symbols == {"H"}
    assert const(5).is_const and not C.is_const
    assert Expr().const_value == 0
    with pytest.raises(ValueError, match="not a constant"):
        _ = C.const_value


def test_division_by_a_sum_or_by_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="sum"):
        C / (H + 1)
    with pytest.raises(ZeroDivisionError):
        C / 0
    with pytest.raises(ZeroDivisionError):
        C / Expr()
    with pytest.raises(ZeroDivisionError):
        C.floordiv(0)


def test_floors_pull_whole_parts_out() -> None:
    # A 3×3 convolution with stride 2 and padding 1 on a symbolic height: ⌊(H + 2 − 3)/2⌋ + 1.
    out = (H + 2 - 2 - 1).floordiv(2) + 1
    assert out == (H + 1).floordiv(2)
    assert str(out) == "⌊(H + 1)/2⌋"
    assert (2 * H + 3).floordiv(2) == H + 1
    assert (4 * H).floordiv(2) == 2 * H
    assert (H + 2 * C).floordiv(2) == C + H.floordiv(2)
    assert H.floordiv(1) == H
    assert const(7).floordiv(2) == 3
    assert const(-7).floordiv(2) == -4
    assert isinstance(H.floordiv(2).floors()[0], Floor)
    assert H.floordiv(2).has_floor and not (H / 2).has_floor


def test_floors_reduce_common_factors() -> None:
    """⌊2H/4⌋ and ⌊H/2⌋ are one size: two paths of a network must compare equal."""
    assert (2 * H).floordiv(4) == H.floordiv(2)
    assert (2 * H + 2).floordiv(4) == (H + 1).floordiv(2)
    assert str((6 * H + 3).floordiv(9)) == "⌊(2H + 1)/3⌋"


def test_drop_floors_is_the_book_s_exact_reading() -> None:
    assert (H - 1).floordiv(2).drop_floors() == H / 2 - Fraction(1, 2)
    assert H.floordiv(2).drop_floors() == H / 2
    assert (C + 1).drop_floors() == C + 1


def test_substitution_by_numbers_and_by_expressions() -> None:
    assert (C / 4).subs({"C": 256}) == 64
    assert (4 * C / S).subs({"C": 64, "S": 1}) == 256
    assert (4 * C / S).subs({"S": 2}) == 2 * C
    assert (C * H).subs({"H": W + 1}) == C * W + C
    assert (H + 1).floordiv(2).subs({"H": 223}) == 112
    assert (H + 1).floordiv(2).subs({"H": 2 * W}) == W
    assert (C / S).subs({"S": const(2)}).subs({"C": 6}) == 3
    assert (C + 1).subs({}) == C + 1
    assert (C + 1).subs({"Z": 3}) == C + 1


def test_evaluate_names_the_values_of_an_inexact_size() -> None:
    assert (H / 2).evaluate({"H": 8}) == 4
    with pytest.raises(InexactDivision) as info:
        (H / 2).evaluate({"H": 7, "C": 3})
    message = str(info.value)
    assert message == "H/2 = 7/2 is not a whole number for H=7"
    assert info.value.values == {"H": 7}
    assert info.value.result == Fraction(7, 2)
    with pytest.raises(InexactDivision, match="C=6, S=4"):
        (C / S).evaluate({"C": 6, "S": 4})
    with pytest.raises(KeyError, match="no value for C"):
        (C + H).evaluate({"H": 1})


def test_counts_for_people() -> None:
    assert fmt_count(const(25_557_032)) == "25,557,032"
    assert fmt_count(124_439_808) == "124,439,808"
    assert fmt_count(3 * T) == "3T"
    assert fmt_count(18432 * T * T + 123532032 * T) == "18432T² + 123532032T"
    assert total([C, H, 1, Fraction(1, 2)]) == C + H + Fraction(3, 2)
    assert total([]) == 0


def test_terms_are_ordered_by_degree_then_name() -> None:
    e = T + 12 * D * T * T + 5 + C * T
    assert str(e) == "12D·T² + C·T + T + 5"


# -- properties ----------------------------------------------------------------------------

# A random expression is built twice: as an `Expr` and as a function from values to a Fraction.
Pair = tuple[Expr, object]


def _leaf() -> st.SearchStrategy[Pair]:
    number = st.integers(-6, 6).map(lambda n: (const(n), lambda v, n=n: Fraction(n)))
    name = st.sampled_from(NAMES).map(lambda s: (sym(s), lambda v, s=s: Fraction(v[s])))
    return number | name


def _extend(inner: st.SearchStrategy[Pair]) -> st.SearchStrategy[Pair]:
    def add(a: Pair, b: Pair) -> Pair:
        return a[0] + b[0], lambda v: a[1](v) + b[1](v)

    def sub(a: Pair, b: Pair) -> Pair:
        return a[0] - b[0], lambda v: a[1](v) - b[1](v)

    def mul(a: Pair, b: Pair) -> Pair:
        return a[0] * b[0], lambda v: a[1](v) * b[1](v)

    def div_number(a: Pair, n: int) -> Pair:
        return a[0] / n, lambda v: a[1](v) / n

    def div_name(a: Pair, s: str) -> Pair:
        return a[0] / sym(s), lambda v: a[1](v) / v[s]

    def floor(a: Pair, n: int) -> Pair:
        return a[0].floordiv(n), lambda v: Fraction(math.floor(a[1](v) / n))

    nonzero = st.integers(-5, 5).filter(bool)
    return st.one_of(
        st.builds(add, inner, inner),
        st.builds(sub, inner, inner),
        st.builds(mul, inner, inner),
        st.builds(div_number, inner, nonzero),
        st.builds(div_name, inner, st.sampled_from(NAMES)),
        st.builds(floor, inner, st.integers(1, 6)),
    )


expressions = st.recursive(_leaf(), _extend, max_leaves=8)
values = st.fixed_dictionaries({n: st.integers(1, 40) for n in NAMES})


@settings(max_examples=300, deadline=None)
@given(expressions, values)
def test_random_expressions_evaluate_like_fractions(pair: Pair, v: dict[str, int]) -> None:
    expr, reference = pair
    want = reference(v)
    got = expr.subs(v)
    assert got.is_const
    assert got.const_value == want
    if want.denominator == 1:
        assert expr.evaluate(v) == want
    else:
        with pytest.raises(InexactDivision):
            expr.evaluate(v)


@settings(max_examples=200, deadline=None)
@given(expressions, values, st.sampled_from(NAMES))
def test_substitution_in_two_steps_is_substitution_in_one(
    pair: Pair, v: dict[str, int], first: str
) -> None:
    expr = pair[0]
    once = expr.subs(v)
    twice = expr.subs({first: v[first]}).subs(v)
    assert once == twice


@settings(max_examples=200, deadline=None)
@given(expressions, expressions, expressions)
def test_ring_laws_hold_on_canonical_forms(a: Pair, b: Pair, c: Pair) -> None:
    x, y, z = a[0], b[0], c[0]
    assert x + y == y + x
    assert x * y == y * x
    assert (x + y) + z == x + (y + z)
    assert x * (y + z) == x * y + x * z
    assert x - x == 0
    assert hash(x + y) == hash(y + x)


@settings(max_examples=200, deadline=None)
@given(expressions, values)
def test_printing_is_deterministic_and_floors_drop_to_exact_values(
    pair: Pair, v: dict[str, int]
) -> None:
    expr = pair[0]
    assert str(expr) == str(Expr(dict(expr.terms)))
    exact = expr.drop_floors()
    assert not exact.has_floor
    if not expr.has_floor:
        assert exact == expr


@settings(max_examples=200, deadline=None)
@given(expressions, values)
def test_as_int_is_the_whole_value_of_a_constant_however_it_was_made(
    pair: Pair, v: dict[str, int]
) -> None:
    """`as_int` is worked out when an expression is made (`_const` or the general
    constructor): it must agree with the terms, for constants, fractions and polynomials."""
    expr, _ = pair
    for e in (expr, expr.subs(v), expr.subs(v) * 3, Expr.lift(expr.subs(v).const_value)):
        whole = e.is_const and e.const_value.denominator == 1
        assert e.as_int() == (int(e.const_value) if whole else None)
    assert Expr().as_int() == 0 and Expr.lift(Fraction(8, 2)).as_int() == 4
    assert Expr.lift(Fraction(1, 2)).as_int() is None and sym("T").as_int() is None

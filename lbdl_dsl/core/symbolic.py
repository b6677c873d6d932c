"""Symbolic sizes: the algebra behind ``C/4×H×W`` and a GPT's MACs as a polynomial in T.

An `Expr` is a Laurent polynomial with rational coefficients over *atoms*; an atom is a symbol
name or a `Floor` of an expression divided by a positive integer (what a strided convolution on a
symbolic height produces). Polynomials give a canonical form for free, so two shapes are equal
exactly when their term dictionaries are, and costs summed over a network stay readable
(``12·T²·D + ...``). Division by a number keeps a rational coefficient; whether ``C/4`` is a whole
number is only decided when C gets a value, which is where the book's figures leave it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from math import gcd
from typing import Union

Number = Union[int, Fraction]
ExprLike = Union["Expr", int, Fraction]


MAX_FLOOR_DEPTH = 32
"""Floors nested in floors: each strided layer on a symbolic size adds one that cannot be merged
into the one below it, and every walk over an expression goes as deep as they nest."""


_MAX_DIVISOR = 2**62  # sizes stay below it (compiler/limits.py, MAX_DIM)


class FloorTooDeep(ValueError):
    """A size whose floors nest past `MAX_FLOOR_DEPTH`."""


@dataclass(frozen=True)
class Floor:
    """``floor(num / den)`` for a non-constant ``num`` and an integer ``den`` ≥ 2."""

    num: Expr
    den: int
    depth: int = field(default=1, compare=False)  # floors nested in this one, itself included

    def __str__(self) -> str:
        num = str(self.num) if len(self.num.terms) == 1 else f"({self.num})"
        return f"⌊{num}/{self.den}⌋"


Atom = Union[str, Floor]
Monomial = tuple[tuple[Atom, int], ...]


def _atom_key(atom: Atom) -> tuple[int, str]:
    return (0, atom) if isinstance(atom, str) else (1, str(atom))


def _mono_key(mono: Monomial) -> tuple[int, list[tuple[tuple[int, str], int]]]:
    degree = sum(p for _, p in mono)
    return (-degree, [(_atom_key(a), -p) for a, p in mono])


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    powers: dict[Atom, int] = dict(a)
    for atom, p in b:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(((k, v) for k, v in powers.items() if v), key=lambda t: _atom_key(t[0])))


class InexactDivision(ArithmeticError):
    """A size that should be whole is not, for the values at hand (``H/2`` with H=7)."""

    def __init__(self, expr: Expr, values: Mapping[str, ExprLike], result: Fraction) -> None:
        used = {k: values[k] for k in sorted(expr.free_symbols) if k in values}
        shown = ", ".join(f"{k}={v}" for k, v in used.items())
        super().__init__(f"{expr} = {_fmt_number(result)} is not a whole number for {shown}")
        self.expr, self.values, self.result = expr, used, result


def _num(e: Expr) -> Number:
    """A constant's value, as an int when whole (int arithmetic is many times Fraction's)."""
    if not e.terms:
        return 0
    c = e.terms[0][1]
    return c.numerator if c.denominator == 1 else c


def _whole(terms: tuple[tuple[Monomial, Fraction], ...]) -> int | None:
    """The value of a canonical polynomial as an int when it is a whole constant, else None."""
    if not terms:
        return 0
    if len(terms) > 1 or terms[0][0]:
        return None
    c = terms[0][1]
    return c.numerator if c.denominator == 1 else None


_NO_SYMBOLS: frozenset[str] = frozenset()
_HASH_OF_ZERO = hash(())
_SMALL: dict[int, Expr] = {}
_SMALL_MAX = 4096
"""How many whole constants `Expr._const` keeps, so that a hostile spec cannot grow it."""


class Expr:
    """An immutable, hashable polynomial; build with `sym`, `const` and the operators."""

    __slots__ = ("_hash", "_int", "terms")

    def __init__(self, terms: Mapping[Monomial, Fraction] | None = None) -> None:
        self.terms: tuple[tuple[Monomial, Fraction], ...] = ()
        self._hash = _HASH_OF_ZERO
        # `as_int`, worked out once: a check and its totals ask it of every size and count
        self._int: int | None = 0
        if not terms:  # zero: the default of every count, made once a box
            return
        clean = {m: Fraction(c) for m, c in terms.items() if c != 0}
        self.terms = tuple(sorted(clean.items(), key=lambda t: _mono_key(t[0])))
        self._hash = hash(self.terms)
        self._int = _whole(self.terms)

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def _const(value: Number) -> Expr:
        """The constant ``value``, built directly: a shape check does mostly arithmetic on
        numbers, and the general constructor (sort, clean, coerce) made a 190,000-box check
        spend most of its time there (issue 17). Small whole numbers are shared."""
        if type(value) is int:
            cached = _SMALL.get(value)
            if cached is not None:
                return cached
        out = Expr.__new__(Expr)
        out.terms = (((), Fraction(value)),) if value else ()
        out._hash = hash(out.terms)
        out._int = _whole(out.terms)
        if type(value) is int and len(_SMALL) < _SMALL_MAX:
            _SMALL[value] = out
        return out

    @staticmethod
    def lift(value: ExprLike) -> Expr:
        if isinstance(value, Expr):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
            raise TypeError(f"cannot make a size of {value!r}")
        return Expr._const(value)

    # -- queries ------------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        # the canonical form has one term at most for the empty monomial, and no other
        terms = self.terms
        return not terms or (len(terms) == 1 and not terms[0][0])

    @property
    def const_value(self) -> Fraction:
        """The value of a constant expression (0 for the empty polynomial)."""
        if not self.is_const:
            raise ValueError(f"{self} is not a constant")
        return self.terms[0][1] if self.terms else Fraction(0)

    def as_int(self) -> int | None:
        """The value as an int when constant and whole, else None."""
        return self._int

    def symbol_name(self) -> str | None:
        """The name when the expression is one symbol (``D``, not ``2D`` or ``D/2``), else None."""
        terms = self.terms
        if len(terms) != 1 or terms[0][1] != 1:
            return None
        mono = terms[0][0]
        if len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], str):
            return mono[0][0]
        return None

    @property
    def free_symbols(self) -> frozenset[str]:
        terms = self.terms
        if not terms or (len(terms) == 1 and not terms[0][0]):
            return _NO_SYMBOLS  # a constant: most sizes, once the model's values are in
        out: set[str] = set()
        for mono, _ in self.terms:
            for atom, _ in mono:
                out |= {atom} if isinstance(atom, str) else atom.num.free_symbols
        return frozenset(out)

    @property
    def has_floor(self) -> bool:
        return any(isinstance(a, Floor) for mono, _ in self.terms for a, _ in mono)

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        o = Expr.lift(other)
        if self.is_const and o.is_const:
            return Expr._const(_num(self) + _num(o))
        acc = dict(self.terms)
        for m, c in o.terms:
            acc[m] = acc.get(m, Fraction(0)) + c
        return Expr(acc)

    __radd__ = __add__

    def __neg__(self) -> Expr:
        return Expr({m: -c for m, c in self.terms})

    def __sub__(self, other: ExprLike) -> Expr:
        return self + (-Expr.lift(other))

    def __rsub__(self, other: ExprLike) -> Expr:
        return Expr.lift(other) - self

    def __mul__(self, other: ExprLike) -> Expr:
        o = Expr.lift(other)
        if self.is_const and o.is_const:
            return Expr._const(_num(self) * _num(o))
        acc: dict[Monomial, Fraction] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                m = _mono_mul(m1, m2)
                acc[m] = acc.get(m, Fraction(0)) + c1 * c2
        return Expr(acc)

    __rmul__ = __mul__

    def __truediv__(self, other: ExprLike) -> Expr:
        """Exact division: by a number, or by a single-term expression (``4C/S``)."""
        o = Expr.lift(other)
        if len(o.terms) != 1:
            if not o.terms:
                raise ZeroDivisionError("division by zero")
            raise ValueError(f"cannot divide by the sum {o}")
        mono, coef = o.terms[0]
        if coef == 0:
            raise ZeroDivisionError("division by zero")
        inv = tuple((a, -p) for a, p in mono)
        return Expr({_mono_mul(m, inv): c / coef for m, c in self.terms})

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return Expr.lift(other) / self

    def __pow__(self, n: int) -> Expr:
        out = Expr.lift(1)
        for _ in range(n):
            out = out * self
        return out

    def floordiv(self, den: int) -> Expr:
        """``floor(self / den)``, simplified: integer parts are pulled out of the floor."""
        if den <= 0:
            raise ZeroDivisionError("division by a non-positive number")
        whole_valued = [c.denominator == 1 and all(p > 0 for _, p in m) for m, c in self.terms]
        if den == 1 and all(whole_valued):
            return self
        whole: dict[Monomial, Fraction] = {}
        rest: dict[Monomial, Fraction] = {}
        for (m, c), is_whole in zip(self.terms, whole_valued):
            if not is_whole:  # a rational coefficient (C/4) or a quotient (1/C) stays inside
                rest[m] = c
                continue
            q, r = divmod(c, den)
            whole[m] = Fraction(q)
            if r:
                rest[m] = Fraction(r)
        if rest and all(c.denominator == 1 for c in rest.values()):
            g = gcd(den, *(c.numerator for c in rest.values()))  # ⌊2H/4⌋ is ⌊H/2⌋
            rest, den = {m: c / g for m, c in rest.items()}, den // g
        rem = Expr(rest)
        if rem.is_const:
            return Expr(whole) + (rem.const_value // den)
        inner = rem.floors()
        alone: Monomial = ((inner[0], 1),) if len(inner) == 1 else ()
        if alone and len(rem.terms) <= 2 and (alone, Fraction(1)) in rem.terms:
            # ⌊(⌊a/m⌋ + c)/n⌋ = ⌊(a + c·m)/(m·n)⌋ for a whole c: strided layers one after
            # another (ResNet's stem on a symbolic H) stay one floor instead of a tower
            extra = rem - Expr({alone: Fraction(1)})
            if extra.is_const and extra.const_value.denominator == 1:
                top, below = inner[0].num, inner[0].den
                if below * den > _MAX_DIVISOR:  # no size reaches it: the model is absurd
                    raise FloorTooDeep(
                        "strided layers divide a symbolic size by more than 2^62; "
                        "give the symbols values with --set"
                    )
                return Expr(whole) + (top + extra * below).floordiv(below * den)
        depth = 1 + max((f.depth for f in inner), default=0)
        if depth > MAX_FLOOR_DEPTH:
            raise FloorTooDeep(
                f"a size nests more than {MAX_FLOOR_DEPTH} floors (of strided layers on a "
                "symbolic size); give the symbols values with --set"
            )
        return Expr(whole) + Expr({((Floor(rem, den, depth), 1),): Fraction(1)})

    # -- substitution and evaluation ------------------------------------------------------------
    def subs(self, values: Mapping[str, ExprLike]) -> Expr:
        """Replace symbols by expressions or numbers; floors are re-simplified."""
        if not values or not (self.free_symbols & values.keys()):
            return self
        out = Expr()
        for mono, coef in self.terms:
            term = Expr.lift(coef)
            for atom, p in mono:
                if isinstance(atom, str):
                    base = Expr.lift(values[atom]) if atom in values else sym(atom)
                else:
                    base = atom.num.subs(values).floordiv(atom.den)
                term = term * base**p if p >= 0 else term / base ** (-p)
            out = out + term
        return out

    def evaluate(self, values: Mapping[str, Number]) -> int:
        """The whole-number value for ``values``; raises `InexactDivision` when not whole."""
        result = self.subs(values)
        if not result.is_const:
            missing = ", ".join(sorted(result.free_symbols))
            raise KeyError(f"no value for {missing}")
        v = result.const_value
        if v.denominator != 1:
            raise InexactDivision(self, values, v)
        return int(v)

    def drop_floors(self) -> Expr:
        """The same expression with every floor taken as exact: the book's ``H/2`` reading."""
        if not self.has_floor:
            return self
        out = Expr()
        for mono, coef in self.terms:
            term = Expr.lift(coef)
            for atom, p in mono:
                base = sym(atom) if isinstance(atom, str) else atom.num.drop_floors() / atom.den
                term = term * base**p if p >= 0 else term / base ** (-p)
            out = out + term
        return out

    def floors(self) -> list[Floor]:
        return [a for mono, _ in self.terms for a, _ in mono if isinstance(a, Floor)]

    # -- comparison and text ------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            other = Expr.lift(other)
        return isinstance(other, Expr) and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Expr({self})"

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        if self.is_const and self.terms[0][1].denominator == 1:  # a size: most of a summary
            return str(self.terms[0][1].numerator)
        parts: list[str] = []
        for i, (mono, coef) in enumerate(self.terms):
            text = _fmt_term(mono, abs(coef))
            if i == 0:
                parts.append(text if coef > 0 else f"-{text}")
            else:
                parts.append(f" + {text}" if coef > 0 else f" - {text}")
        return "".join(parts)


def _fmt_number(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _fmt_atoms(atoms: list[tuple[Atom, int]]) -> str:
    out = []
    for atom, p in atoms:
        name = atom if isinstance(atom, str) else str(atom)
        out.append(name if p == 1 else f"{name}{str(p).translate(_SUPERSCRIPT)}")
    return "·".join(out)


def _fmt_term(mono: Monomial, coef: Fraction) -> str:
    up = [(a, p) for a, p in mono if p > 0]
    down = [(a, -p) for a, p in mono if p < 0]
    num = _fmt_atoms(up)
    if coef.numerator != 1 or not num:
        num = (
            f"{coef.numerator}{num}"
            if num and num[0].isalpha()
            else (f"{coef.numerator}·{num}" if num else str(coef.numerator))
        )
    den_parts = ([str(coef.denominator)] if coef.denominator != 1 else []) + (
        [_fmt_atoms(down)] if down else []
    )
    if not den_parts:
        return num
    den = "·".join(den_parts)
    return f"{num}/{den}" if len(den_parts) == 1 and len(down) <= 1 else f"{num}/({den})"


def sym(name: str) -> Expr:
    return Expr({((name, 1),): Fraction(1)})


def const(value: Number) -> Expr:
    return Expr.lift(value)


def total(items: Iterable[ExprLike]) -> Expr:
    out = Expr()
    for item in items:
        out = out + item
    return out


def fmt_count(value: Expr | int) -> str:
    """A parameter or MAC count for people: ``25,557,032`` or the polynomial when symbolic."""
    if isinstance(value, Expr):
        as_int = value.as_int()
        if as_int is None:
            return str(value)
        value = as_int
    return f"{value:,}"


@dataclass(frozen=True)
class PerCopy:
    """A number that follows the copy's index in a ×N group (``×N as i:`` … ``p=0.1*i/17``):
    the expression, in the index's symbol, kept as written so that the figure shows the
    schedule once and the code computes each copy's value from its index."""

    expr: Expr

    def at(self, index: str, value: int) -> float:
        return float(self.expr.subs({index: value}).const_value)

    def __str__(self) -> str:
        return str(self.expr)

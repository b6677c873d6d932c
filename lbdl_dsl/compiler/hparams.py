"""Hyper-parameter values: read once, where the syntax tree becomes the graph.

Each value is checked against the layer's declaration and put in canonical form (``k=3`` →
``(3, 3)`` for a 2-D convolution, ``causal=true`` → True, ``p=same`` → "same"), so later passes
trust what they read. Values that name a block or model parameter stay symbolic (`Expr` or
`ParamRef`) until the checker knows the parameter's value at each use.
"""

from __future__ import annotations

import re
from fractions import Fraction

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.formula_parse import parse_formula
from lbdl_dsl.compiler.graph import HValue, ParamRef
from lbdl_dsl.core.errors import LbdlError, did_you_mean
from lbdl_dsl.core.layers import HP, Layer
from lbdl_dsl.core.symbolic import Expr

_BOOLS = {"true": True, "True": True, "false": False, "False": False}


def check_symbols(value: ast.SizeExpr, known: set[str], what: str = "size") -> Expr:
    """The expression, if every name in it is known here; else an error naming the first."""
    symbols = value.expr.free_symbols
    if symbols <= known:  # every size of every box asks: answer without sorting
        return value.expr
    unknown = sorted(symbols - known)
    if unknown:
        name = unknown[0]
        hint = did_you_mean(name, known)
        if not hint:
            listed = ", ".join(sorted(known)) or "none"
            hint = f"the names known here are: {listed}"
        raise LbdlError(f"unknown name `{name}` in this {what}", value.span, hint=hint)
    return value.expr


def _as_bool(value: ast.Value, key: str, params: set[str]) -> HValue:
    if isinstance(value, ast.SizeExpr) and value.bare_name is not None:
        if value.bare_name in _BOOLS:
            return _BOOLS[value.bare_name]
        if value.bare_name in params:
            return ParamRef(value.bare_name, value.span)
    if isinstance(value, ast.SizeExpr) and value.expr.as_int() in (0, 1):
        return bool(value.expr.as_int())
    raise LbdlError(f"`{key}` is true or false, not `{value.text}`", value.span)


def _as_float(value: ast.Value, key: str, params: set[str]) -> HValue:
    if isinstance(value, ast.Literal) and isinstance(value.value, float):
        return value.value
    if isinstance(value, ast.SizeExpr):
        if value.bare_name is not None and value.bare_name in params:
            return ParamRef(value.bare_name, value.span)
        if value.expr.is_const:
            return float(value.expr.const_value)
        if value.expr.free_symbols <= params:  # `p=k/55`: a rate from a block's index
            return value.expr
    raise LbdlError(f"`{key}` is a number, not `{value.text}`", value.span)


def as_size(value: ast.Value, key: str, known: set[str], allow_negative: bool = False) -> Expr:
    if isinstance(value, ast.Literal):
        raise LbdlError(
            f"`{key}` is a whole number, not `{value.text}`", value.span, hint=f"e.g. `{key}=3`"
        )
    if isinstance(value, ast.TupleValue):
        raise LbdlError(f"`{key}` takes one number, not a list", value.span)
    expr = check_symbols(value, known, "hyper-parameter")
    v = expr.const_value if expr.is_const else None
    if v is not None and (v.denominator != 1 or (v < 0 and not allow_negative)):
        raise LbdlError(f"`{key}` must be a whole number ≥ 0, got {value.text}", value.span)
    return expr


def _as_sizes(value: ast.Value, key: str, known: set[str], n: int) -> tuple[Expr, ...]:
    if isinstance(value, ast.TupleValue):
        if len(value.items) != n:
            raise LbdlError(
                f"`{key}` needs {n} values here, got {len(value.items)}",
                value.span,
                hint=f"give one number for every axis, or a single number for all {n}",
            )
        return tuple(as_size(v, key, known) for v in value.items)
    return (as_size(value, key, known),) * max(n, 1)


_HYPHENATED = re.compile(r"[A-Za-z_]\w*(?:-[A-Za-z_]\w*)+")


def hyphenated(value: ast.Value) -> str | None:
    """``gelu-tanh`` as the word it is: the grammar reads it as the difference of two names."""
    if isinstance(value, ast.SizeExpr) and _HYPHENATED.fullmatch(value.text):
        return value.text
    return None


def _as_choice(value: ast.Value, hp: HP, params: set[str]) -> HValue:
    word = value.value if isinstance(value, ast.Literal) else getattr(value, "bare_name", None)
    word = word or hyphenated(value)
    if isinstance(word, str) and word in hp.choices:
        return word
    if isinstance(value, ast.SizeExpr) and word in params:
        return ParamRef(word, value.span)
    choices = ", ".join(f"`{c}`" for c in hp.choices)
    raise LbdlError(
        f"`{hp.name}` is one of {choices}, not `{value.text}`",
        value.span,
        hint=did_you_mean(value.text, hp.choices),  # only the entry's own words
    )


def _as_axis(value: ast.Value, key: str) -> int:
    if isinstance(value, ast.SizeExpr) and value.expr.is_const:
        v: Fraction = value.expr.const_value
        if v.denominator == 1:
            return int(v)
    raise LbdlError(f"`{key}` is an axis number (0, 1, ... or -1 for the last)", value.span)


def normalise(
    layer: Layer,
    hp: HP,
    value: ast.Value,
    known: set[str],
    params: set[str],
    axes: int | None = None,
) -> HValue:
    """One written value in canonical form, or an error at the value; ``axes``: the box's
    output axes where its line says them (a formula reads one index variable per axis)."""
    kind = hp.kind
    if kind == "bool":
        return _as_bool(value, hp.name, params)
    if kind == "float":
        word = getattr(value, "bare_name", None)
        if word is not None and word in hp.choices:  # a float's words: `scale=none`
            return str(word)
        return _as_float(value, hp.name, params)
    if kind == "choice":
        return _as_choice(value, hp, params)
    if kind == "axis":
        return _as_axis(value, hp.name)
    if kind in ("size", "index"):
        return as_size(value, hp.name, known, allow_negative=kind == "index")
    if kind == "sizes":
        return _as_sizes(value, hp.name, known, layer.spatial)
    if kind == "padding":
        if isinstance(value, ast.SizeExpr) and value.bare_name == "same":
            return "same"
        return _as_sizes(value, hp.name, known, layer.spatial)
    if kind == "formula":
        if isinstance(value, ast.Literal) and isinstance(value.value, str):
            return parse_formula(value.value, value.span, known, axes)
        raise LbdlError(
            f"`{hp.name}` is a formula in quotes, not `{value.text}`",
            value.span,
            hint=f'e.g. `{hp.name}="abs(j - i)"`',
        )
    if kind in ("axes", "shape"):
        items = value.items if isinstance(value, ast.TupleValue) else (value,)
        return tuple(as_size(v, hp.name, known, allow_negative=True) for v in items)
    raise AssertionError(f"unknown hyper-parameter kind {kind}")


def default_value(layer: Layer, hp: HP) -> HValue:
    """A declared default, in the same canonical form as a written value."""
    d = hp.default
    if d is None or isinstance(d, (bool, float, str)):
        return d
    if hp.kind in ("sizes", "padding"):
        return (Expr.lift(d),) * max(layer.spatial, 1)
    if hp.kind in ("size", "index"):
        return Expr.lift(d)
    given: HValue = d  # `HP.default` is untyped across kinds; these kinds declare it canonical
    return given


def _kind_name(hp: HP) -> str:
    return {
        "bool": "true or false",
        "float": "a number",
        "choice": "one of " + ", ".join(f"`{c}`" for c in hp.choices),
        "size": "a whole number or a size",
        "index": "a whole number",
        "axis": "an axis number",
    }.get(hp.kind, f"a value of kind {hp.kind}")


def coerce(layer: Layer, hp: HP, value: HValue, where: str) -> HValue:
    """A value that reached a hyper-parameter through a block or model parameter
    (``p=p``), in the hyper-parameter's canonical form; an error naming both if it does not
    fit. Written values were decoded already (`normalise`); these arrive only at a use."""
    if value is None or isinstance(value, ParamRef):
        return value
    kind = hp.kind
    bad = False
    if kind == "bool":
        bad = not isinstance(value, bool)
    elif kind == "float":
        if isinstance(value, str) and value in hp.choices:
            return value
        if isinstance(value, Expr) and value.is_const:
            return float(value.const_value)
        bad = isinstance(value, bool) or not isinstance(value, (int, float))
    elif kind == "choice":
        bad = value not in hp.choices
    elif kind in ("size", "index", "axis"):
        if isinstance(value, float) and value.is_integer():
            return Expr.lift(int(value)) if kind != "axis" else int(value)
        bad = isinstance(value, (bool, str, float))
    if bad:
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        raise LbdlError(
            f"`{layer.name}` takes {_kind_name(hp)} for `{hp.name}`, but {where} gives `{shown}`",
            None,
        )
    return value

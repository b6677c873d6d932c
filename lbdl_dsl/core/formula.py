"""Formulas over positions: the expression of a constant table (`table f="..."`).

A table such as T5's relative position buckets is a function of the positions alone: for query
i and key j, a number computed from j − i with `abs`, `log`, `floor` and `min`. The spec writes
that function as a formula in a string; the parser reads it with the grammar's own `formula`
rules (`grammar/lbdl.lark`) into the frozen tree below, so nothing the user wrote ever runs as
Python. This module, on the ground floor, holds the tree, the table of functions a formula may
call, a NumPy evaluator of the tree (what a reference test and the checker's callers read) and
its translation into a NumPy expression (what the JAX backend writes into a generated module,
to compute the table once, when the model is traced).

The index variables are i, j, k, l, one per axis of the table in order, each running over
0, 1, …, its extent − 1. Other names are sizes known where the box stands (a model's `NB`),
whose values the checker substitutes at each use. A comparison is 1 where it holds and 0
elsewhere, so `16 * (j > i)` is 16 above the diagonal. Arithmetic is NumPy's on int64 index
grids and float64 values: `/` is a true division, `^` a power in floating point, and `log` of
0 is −∞ without a warning (`where` then usually picks the other branch, as T5's formula does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Union

from lbdl_dsl.core.errors import Span
from lbdl_dsl.core.symbolic import Expr

INDEX_NAMES = ("i", "j", "k", "l")
"""The index variable of each axis of a table, in order (a table has 1 to 4 axes)."""


@dataclass(frozen=True)
class Num:
    """A number as written: an int for ``16``, a float for ``0.5``."""

    value: int | float
    span: Span


@dataclass(frozen=True)
class Var:
    """An index variable (``i``) or a size known at the box (``NB``)."""

    name: str
    span: Span


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple[Node, ...]
    span: Span


@dataclass(frozen=True)
class BinOp:
    """``+ - * / ^`` and the comparisons ``< <= == >= >``."""

    op: str
    left: Node
    right: Node
    span: Span


@dataclass(frozen=True)
class Neg:
    operand: Node
    span: Span


Node = Union[Num, Var, Call, BinOp, Neg]


@dataclass(frozen=True)
class Function:
    """A function a formula may call: its arity (``most`` None: any number from ``least``),
    its NumPy form in generated code, and what it does, for the docs and the hints."""

    least: int
    most: int | None
    numpy: str
    doc: str


FUNCTIONS: dict[str, Function] = {
    "exp": Function(1, 1, "np.exp", "eˣ"),
    "log": Function(1, 1, "np.log", "the natural logarithm (−∞ at 0)"),
    "sqrt": Function(1, 1, "np.sqrt", "the square root"),
    "abs": Function(1, 1, "np.abs", "the absolute value"),
    "sign": Function(1, 1, "np.sign", "−1, 0 or 1"),
    "floor": Function(1, 1, "np.floor", "the largest whole number ≤ x"),
    "ceil": Function(1, 1, "np.ceil", "the smallest whole number ≥ x"),
    "min": Function(2, None, "np.minimum", "the smallest of its arguments"),
    "max": Function(2, None, "np.maximum", "the largest of its arguments"),
    "clamp": Function(3, 3, "np.clip", "clamp(x, lo, hi): x limited to [lo, hi]"),
    "where": Function(3, 3, "np.where", "where(c, a, b): a where c is not 0, else b"),
}
"""What a formula may call; `where`'s and the comparisons' conditions are numbers (1 or 0)."""

_COMPARE = {"<", "<=", "==", ">=", ">"}


@dataclass(frozen=True)
class Formula:
    """A parsed formula: its text, its tree, the span of its string in the spec, and the sizes
    it names besides the index variables, each with its value at this use (a symbol until the
    checker substitutes it)."""

    text: str
    root: Node
    span: Span
    sizes: tuple[tuple[str, Expr], ...] = ()

    def __str__(self) -> str:
        return f'"{self.text}"'

    def with_sizes(self, sizes: tuple[tuple[str, Expr], ...]) -> Formula:
        return replace(self, sizes=sizes)

    def indices(self) -> set[str]:
        """The index variables the formula reads."""
        return {n.name for n in walk(self.root) if isinstance(n, Var) and n.name in INDEX_NAMES}


def walk(node: Node) -> list[Node]:
    """The node and every node below it, parents first."""
    out: list[Node] = [node]
    if isinstance(node, Call):
        for arg in node.args:
            out += walk(arg)
    elif isinstance(node, BinOp):
        out += walk(node.left) + walk(node.right)
    elif isinstance(node, Neg):
        out += walk(node.operand)
    return out


# -- evaluation ------------------------------------------------------------------------------


def _binary(op: str, a: Any, b: Any) -> Any:
    import numpy as np

    if op in _COMPARE:
        holds = {"<": np.less, "<=": np.less_equal, "==": np.equal}.get(op)
        holds = holds or {">=": np.greater_equal, ">": np.greater}[op]
        return np.asarray(holds(a, b), np.int64)
    if op == "^":
        return np.float_power(a, b)
    ops: dict[str, Callable[[Any, Any], Any]] = {
        "+": np.add,
        "-": np.subtract,
        "*": np.multiply,
        "/": np.true_divide,
    }
    return ops[op](a, b)


def _call(fn: str, args: list[Any]) -> Any:
    import numpy as np

    if fn == "where":
        return np.where(np.asarray(args[0]) != 0, args[1], args[2])
    if fn in ("min", "max"):
        pick = np.minimum if fn == "min" else np.maximum
        out = args[0]
        for a in args[1:]:
            out = pick(out, a)
        return out
    if fn == "clamp":
        return np.minimum(np.maximum(args[0], args[1]), args[2])
    return getattr(np, FUNCTIONS[fn].numpy.removeprefix("np."))(*args)


def _eval(node: Node, env: Mapping[str, Any]) -> Any:
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Var):
        return env[node.name]
    if isinstance(node, Neg):
        return -_eval(node.operand, env)
    if isinstance(node, BinOp):
        return _binary(node.op, _eval(node.left, env), _eval(node.right, env))
    return _call(node.fn, [_eval(a, env) for a in node.args])


def numbers(formula: Formula) -> dict[str, int | float]:
    """The sizes the formula names, as numbers; a ValueError for one not known here."""
    out: dict[str, int | float] = {}
    for name, value in formula.sizes:
        if not value.is_const:
            raise ValueError(f"`{name}` is not a known number here ({value})")
        v = value.const_value
        out[name] = int(v) if v.denominator == 1 else float(v)
    return out


def evaluate(formula: Formula, shape: tuple[int, ...]) -> Any:
    """The table, a float64 or int64 NumPy array of ``shape``: the tree walked over index
    grids (NumPy's broadcasting does the loops), never the text run as Python."""
    import numpy as np

    grids = np.ogrid[tuple(slice(0, n) for n in shape)] if shape else []
    env: dict[str, Any] = {**numbers(formula), **dict(zip(INDEX_NAMES, grids))}
    with np.errstate(all="ignore"):
        value = _eval(formula.root, env)
    return np.broadcast_to(np.asarray(value), shape).copy()


def whole_in_range(table: Any, n: int) -> Any:
    """``table`` as int32 if every value is a whole number in [0, n); else a ValueError
    naming the first value that is not and where it is."""
    import numpy as np

    bad = ~np.isfinite(table) | (table != np.floor(table)) | (table < 0) | (table >= n)
    if bad.any():
        at = tuple(int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"the table's value {table[at]} at {at} is not a whole number in [0, {n})")
    return table.astype(np.int32)


# -- translation into NumPy code --------------------------------------------------------------

_UFUNC = {
    "+": "np.add",
    "-": "np.subtract",
    "*": "np.multiply",
    "/": "np.true_divide",
    "^": "np.float_power",
    "<": "np.less",
    "<=": "np.less_equal",
    "==": "np.equal",
    ">=": "np.greater_equal",
    ">": "np.greater",
}


def to_numpy(node: Node, values: Mapping[str, int | float]) -> str:
    """The NumPy expression of a tree over the index variables (a lambda's parameters), made
    from the checked tree, never from the text as written: every operation a call (``np.add``,
    ``np.where``: a generated module lays calls out one argument per line), every part that
    reads no index folded into its number, as the evaluator computes it."""
    if isinstance(node, Var) and node.name in INDEX_NAMES:
        return node.name
    if not any(isinstance(n, Var) and n.name in INDEX_NAMES for n in walk(node)):
        return _number(_eval(node, dict(values)))
    if isinstance(node, Neg):
        return f"np.negative({to_numpy(node.operand, values)})"
    if isinstance(node, BinOp):
        a, b = to_numpy(node.left, values), to_numpy(node.right, values)
        test = f"{_UFUNC[node.op]}({a}, {b})"
        return f"np.where({test}, 1, 0)" if node.op in _COMPARE else test
    assert isinstance(node, Call), "a number or a size is folded above"
    args = [to_numpy(a, values) for a in node.args]
    c = node.args[0]
    if node.fn == "where" and isinstance(c, BinOp) and c.op in _COMPARE:
        args[0] = f"{_UFUNC[c.op]}({to_numpy(c.left, values)}, {to_numpy(c.right, values)})"
    elif node.fn == "where":
        args[0] = f"np.not_equal({args[0]}, 0)"
    if node.fn in ("min", "max"):
        out = args[0]
        for a in args[1:]:
            out = f"{FUNCTIONS[node.fn].numpy}({out}, {a})"
        return out
    if node.fn == "clamp":
        return f"np.minimum(np.maximum({args[0]}, {args[1]}), {args[2]})"
    return f"{FUNCTIONS[node.fn].numpy}({', '.join(args)})"


def _number(value: Any) -> str:
    """A folded part as a literal: an int stays an int; a float keeps every bit (repr)."""
    import numpy as np

    v = np.asarray(value).item()
    return repr(int(v) if isinstance(v, (bool, int)) else float(v))

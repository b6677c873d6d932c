"""A table's formula, from the string of `table f="..."` to the tree of `core/formula.py`.

The string is parsed with the spec grammar's own `formula` start symbol (`grammar/lbdl.lark`),
through the same generated parser as the spec, so the formula's syntax is the grammar's and no
text is evaluated. Like `parser.py`, this module is the only one that sees lark's objects for a
formula: it returns frozen dataclasses whose spans point into the spec (the string's line, the
column of each name within it), and raises `LbdlError` with a hint for anything it refuses.
The names are checked here too, where the sizes known at the box are: an index variable, a
known size, or a function of `FUNCTIONS` called with its number of arguments.
"""

from __future__ import annotations

from typing import Any, cast

from lbdl_dsl.compiler._lbdl_parser import (
    Token,
    Tree,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)
from lbdl_dsl.compiler.parser import _lark
from lbdl_dsl.core.errors import LbdlError, Span, did_you_mean
from lbdl_dsl.core.formula import (
    FUNCTIONS,
    INDEX_NAMES,
    BinOp,
    Call,
    Formula,
    Neg,
    Node,
    Num,
    Var,
)
from lbdl_dsl.core.symbolic import Expr, sym

_EXAMPLE = 'e.g. `table f="abs(j - i)"  T×T`'


def parse_formula(text: str, span: Span, known: set[str], axes: int | None = None) -> Formula:
    """The formula written in a string whose span (quotes included) is ``span``; ``known``:
    the sizes named at the box; ``axes``: the table's, where the line says them (else the
    check of the index variables waits for the shape). An `LbdlError` at the place of the
    first problem."""
    if not text.strip():
        raise LbdlError("the formula is empty", span, hint=_EXAMPLE)
    try:
        tree = _lark().parse(text, start="formula")
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, span) from None
    root = _Builder(span).node(tree.children[0])
    sizes: list[tuple[str, Expr]] = []
    indices = INDEX_NAMES[:axes] if axes is not None else INDEX_NAMES
    for node in _names(root):
        if node.name in indices:
            continue
        if node.name in INDEX_NAMES:
            listed = ", ".join(f"`{n}`" for n in indices)
            raise LbdlError(
                f"the formula reads `{node.name}`, but a table of {axes} "
                f"{'axis' if axes == 1 else 'axes'} has only {listed}",
                node.span,
                hint="the index variables are i, j, k, l, one per axis of the shape, in order",
            )
        if node.name not in known:
            raise LbdlError(
                f"unknown name `{node.name}` in this formula",
                node.span,
                hint=_name_hint(node.name, known, indices),
            )
        if node.name not in dict(sizes):
            sizes.append((node.name, sym(node.name)))
    return Formula(text, root, span, tuple(sorted(sizes)))


def _name_hint(name: str, known: set[str], indices: tuple[str, ...]) -> str:
    """A did-you-mean among what may stand there: the table's index variables and the sizes
    known at the box (a function's name is no value)."""
    if name in FUNCTIONS:
        return f"`{name}` is a function: call it, `{name}(...)`"
    close = did_you_mean(name, set(indices) | known)
    listed = ", ".join(f"`{n}`" for n in indices + tuple(sorted(known)))
    return close or f"a formula reads the index variables and the sizes known here: {listed}"


def _names(node: Node) -> list[Var]:
    from lbdl_dsl.core.formula import walk

    return [n for n in walk(node) if isinstance(n, Var)]


def _at(span: Span, column: int, width: int) -> Span:
    """The span of ``width`` characters from ``column`` (1-based) of the formula's text: the
    string starts one column after its opening quote."""
    start = span.column + column
    return Span(span.file, span.line, start, span.line, start + max(width, 1))


def _syntax_error(exc: UnexpectedInput, text: str, span: Span) -> LbdlError:
    column = max(getattr(exc, "column", 1) or 1, 1)
    if isinstance(exc, (UnexpectedEOF,)) or (
        isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
    ):
        return LbdlError(
            "the formula ends too soon",
            _at(span, len(text) + 1, 1),
            hint="close every `(` and give every operator its right-hand side",
        )
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        return LbdlError(
            f"unexpected `{tok.value}` in this formula",
            _at(span, column, len(str(tok.value))),
            hint=_expected(exc.expected),
        )
    assert isinstance(exc, UnexpectedCharacters)
    ch = text[exc.pos_in_stream] if exc.pos_in_stream is not None else "?"
    return LbdlError(
        f"`{ch}` cannot stand in a formula",
        _at(span, column, 1),
        hint="a formula has numbers, names, calls, ( ), + - * / ^ and < <= == >= >",
    )


def _expected(expected: set[str]) -> str:
    words = {
        "RPAR": "`)`",
        "COMMA": "`,`",
        "NAME": "a name",
        "INT": "a number",
        "FLOAT": "a number",
        "LPAR": "`(`",
        "MINUS": "`-`",
    }
    found = sorted({words.get(e, "an operator") for e in expected})
    return "expected " + ", ".join(found)


class _Builder:
    """Lark's tree of the `formula` rules → `core.formula`'s nodes, with spans in the spec."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def tok(self, t: Token) -> Span:
        return _at(self.span, t.column or 1, len(str(t)))

    def node(self, t: Any) -> Node:
        if not isinstance(t, Tree):  # `( f_expr )` keeps its one child
            raise AssertionError(f"a formula's tree holds a bare {t!r}")
        kind, c = t.data, cast(list[Any], t.children)
        if kind == "f_number":
            text = str(c[0]).replace("_", "")
            return Num(float(text) if c[0].type == "FLOAT" else int(text), self.tok(c[0]))
        if kind == "f_name":
            return Var(str(c[0]), self.tok(c[0]))
        if kind == "f_neg":
            operand = self.node(c[1])
            return Neg(operand, self.tok(c[0]))
        if kind == "f_call":
            return self.call(c[0], [self.node(a) for a in c[1:]])
        left, op, right = self.node(c[0]), c[1], self.node(c[2])
        symbol = {"−": "-", "·": "*", "÷": "/", "**": "^"}.get(str(op), str(op))
        return BinOp(symbol, left, right, self.tok(op))

    def call(self, name: Token, args: list[Node]) -> Call:
        span = self.tok(name)
        fn = FUNCTIONS.get(str(name))
        if fn is None:
            close = did_you_mean(str(name), FUNCTIONS)
            listed = ", ".join(f"`{f}`" for f in FUNCTIONS)
            raise LbdlError(
                f"unknown function `{name}` in this formula",
                span,
                hint=close or f"a formula may call {listed}",
            )
        if len(args) < fn.least or (fn.most is not None and len(args) > fn.most):
            want = str(fn.least) if fn.most == fn.least else f"{fn.least} or more"
            raise LbdlError(
                f"`{name}` takes {want} argument{'s' if want != '1' else ''}, got {len(args)}",
                span,
                hint=f"`{name}`: {fn.doc}",
            )
        return Call(str(name), tuple(args), span)

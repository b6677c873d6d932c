"""The syntax tree: frozen dataclasses with source spans, and nothing of lark's.

The parser is the only module that sees lark objects; everything after it works on these plain
values, so passes can be tested by building trees by hand and lark can change without rippling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from lbdl_dsl.core.errors import Span
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class SizeExpr:
    """An expression as written (``C/4``), with its parsed form."""

    expr: Expr
    text: str
    span: Span
    bare_name: str | None = None  # set when the text is a single name (k=same, causal=true)


@dataclass(frozen=True)
class Literal:
    """A float or a quoted string hyper-parameter value."""

    value: float | str
    text: str
    span: Span


@dataclass(frozen=True)
class TupleValue:
    items: tuple[SizeExpr, ...]
    text: str
    span: Span


Value = Union[SizeExpr, Literal, TupleValue]


@dataclass(frozen=True)
class ShapeAST:
    dims: tuple[SizeExpr, ...]
    span: Span

    @property
    def text(self) -> str:
        return "×".join(d.text for d in self.dims)


@dataclass(frozen=True)
class Ref:
    """A tensor name used or defined somewhere."""

    name: str
    span: Span


@dataclass(frozen=True)
class HParam:
    key: str
    value: Value
    span: Span


@dataclass(frozen=True)
class Box:
    """One line of a figure: a layer or a block call."""

    op: str
    op_span: Span
    args: tuple[Ref, ...]
    count: SizeExpr | None
    hparams: tuple[HParam, ...]
    shape: ShapeAST | None
    name: Ref | None
    span: Span


@dataclass(frozen=True)
class RepeatGroup:
    """A dashed frame ``×N`` around a group of boxes; ``×N as i:`` names the copy's index."""

    count: SizeExpr
    body: tuple[Stmt, ...]
    span: Span
    index: str | None = None  # the name of the copy's index (from 0), if the spec gives one


@dataclass(frozen=True)
class ResidualGroup:
    """Boxes whose input is added to their output, through an optional shortcut path."""

    body: tuple[Stmt, ...]
    shortcut: tuple[Stmt, ...] | None
    span: Span
    shortcut_span: Span | None = None


@dataclass(frozen=True)
class ExpertsGroup:
    """``experts e=E k=K:``: E copies of the indented body (one expert), k of them per token."""

    hparams: tuple[HParam, ...]
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True)
class ScanGroup:
    """``scan h: H:``: the body is one step of a recurrence along the leading axis; it reads
    x_t and the previous carry by its name, and its result is the next carry. ``init`` names
    the tensor the carry starts from (``scan h: H = h0:``); None: zeros."""

    carry: Ref
    shape: ShapeAST
    init: Ref | None
    body: tuple[Stmt, ...]
    span: Span


@dataclass(frozen=True)
class InputDecl:
    name: Ref
    shape: ShapeAST
    dtype: str
    vocab: SizeExpr | None
    span: Span


@dataclass(frozen=True)
class OutputDecl:
    name: Ref
    span: Span


@dataclass(frozen=True)
class FromStmt:
    name: Ref
    span: Span


@dataclass(frozen=True)
class NameStmt:
    name: Ref
    span: Span


@dataclass(frozen=True)
class AssertCount:
    quantity: Ref
    op: str
    value: Value
    span: Span


@dataclass(frozen=True)
class AssertShape:
    name: Ref
    shape: ShapeAST
    span: Span


Stmt = Union[
    Box,
    RepeatGroup,
    ResidualGroup,
    ExpertsGroup,
    ScanGroup,
    InputDecl,
    OutputDecl,
    FromStmt,
    NameStmt,
    AssertCount,
    AssertShape,
]


@dataclass(frozen=True)
class Param:
    name: str
    default: Value | None
    span: Span


@dataclass(frozen=True)
class TensorPattern:
    name: str | None
    shape: ShapeAST
    span: Span
    dtype: str | None = None  # `M: T×T bool`: the type the input must have (None: any)
    vocab: SizeExpr | None = None  # `int<V>`


@dataclass(frozen=True)
class BlockDef:
    name: str
    params: tuple[Param, ...]
    inputs: tuple[TensorPattern, ...]
    body: tuple[Stmt, ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class ModelDef:
    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class Import:
    path: str
    span: Span


@dataclass(frozen=True)
class Module:
    """One parsed file."""

    file: str
    imports: tuple[Import, ...]
    blocks: tuple[BlockDef, ...]
    models: tuple[ModelDef, ...]

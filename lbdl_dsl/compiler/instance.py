"""What the checker produces: the instance tree, one `Inst` per box as it is used.

A block body is one graph but is used with different shapes (resblock at 256 and at 512
channels), so shapes, costs and resolved hyper-parameters live on instances, not on graph nodes.
A ×N group whose copies all see the same shapes has one instance body with multiplicity N, which
is why checking GPT-3's 96 blocks costs what checking one does. Instance bodies of identical block
calls are shared (memoised), so an `Inst` knows its node id but not its full path: paths come from
walking the tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lbdl_dsl.compiler.graph import Block, LayerNode, Node, Program
from lbdl_dsl.compiler.imports import Loaded
from lbdl_dsl.compiler.stages import Built
from lbdl_dsl.core.errors import Diagnostic, Span
from lbdl_dsl.core.layers.base import Attrs, PSpec, Sizes, fmt_shape
from lbdl_dsl.core.symbolic import Expr, total

Shape = tuple[Expr, ...]


@dataclass(frozen=True)
class Tensor:
    """A tensor as the checker knows it: per-sample shape, type, and where it was made."""

    shape: Shape
    dtype: str = "float"
    vocab: Expr | None = None
    made_by: str = ""  # "`reshape` at line 12", for notes in messages
    span: Span | None = None
    rf: tuple[Expr, Expr] | None = None  # receptive field and cumulative stride (axis 0)

    def __str__(self) -> str:
        return fmt_shape(self.shape)


@dataclass
class Copies:
    """The body of a ×N group: ``count`` identical copies of ``body``."""

    body: list[Inst]
    count: Expr


@dataclass
class Inst:
    node: Node
    inputs: list[Tensor]
    output: Tensor | None = None  # None when this box (or one above it) failed
    hp: dict[str, Any] = field(default_factory=dict)  # hyper-parameters, as resolved here
    attrs: Attrs | None = None  # a layer's record, what backends read
    inside: Block | None = None  # a composite's inside, whose instances are `body`
    params: dict[str, PSpec] = field(default_factory=dict)  # own trainable parameters
    state: dict[str, PSpec] = field(default_factory=dict)
    macs: Expr = field(default_factory=Expr)
    tied: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # mine → (node, theirs, T)
    body: list[Inst] = field(default_factory=list)  # a call's block body, a residual's main path
    shortcut: list[Inst] = field(default_factory=list)
    copies: list[Copies] = field(default_factory=list)  # a repeat's distinct copies
    bindings: dict[str, Any] = field(default_factory=dict)  # a call's symbols (C, H, W, S...)
    totals: dict[str, Expr] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.node.id

    @property
    def kind(self) -> str:
        return self.node.kind

    def children(self) -> Iterator[tuple[str, Inst, Expr]]:
        """Sub-instances with their path step and multiplicity."""
        one = Expr.lift(1)
        for inst in self.body:
            yield inst.id, inst, one
        for inst in self.shortcut:
            yield f"shortcut/{inst.id}", inst, one
        for i, cp in enumerate(self.copies):
            for inst in cp.body:
                yield (f"{i}/{inst.id}" if len(self.copies) > 1 else inst.id), inst, cp.count


def numel(shape: Sizes) -> Expr:
    out = Expr.lift(1)
    for d in shape:
        out = out * d
    return out


def compute_totals(inst: Inst, memo: dict[int, dict[str, Expr]]) -> dict[str, Expr]:
    """Parameters, state, MACs and activation values of a box and everything inside it."""
    key = id(inst)
    if key in memo:
        return memo[key]
    out = {
        "params": total(numel(p.shape) for p in inst.params.values()),
        "state": total(numel(p.shape) for p in inst.state.values()),
        "macs": inst.macs,
        "activations": numel(inst.output.shape)
        if inst.output is not None and isinstance(inst.node, LayerNode) and inst.inside is None
        else Expr(),
    }
    for _, child, mult in inst.children():
        sub = compute_totals(child, memo)
        for k in out:
            out[k] = out[k] + sub[k] * mult
    inst.totals = out
    memo[key] = out
    return out


@dataclass(frozen=True)
class Checked:
    """Stage 3, what backends take: the instance tree, totals and diagnostics of a program,
    and (through `built`) the program and the texts it came from."""

    program: Program
    env: dict[str, Any]  # the model's parameters and bound input symbols
    root: list[Inst]
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor | None]
    totals: dict[str, Expr]
    diagnostics: list[Diagnostic]
    assumptions: list[str]
    free: list[str]  # input symbols left symbolic
    built: Built | None = None  # set by the driver

    @property
    def file(self) -> str:
        return self.built.file if self.built is not None else self.program.main_file

    @property
    def sources(self) -> dict[str, str]:
        return self.built.sources if self.built is not None else self.program.sources

    @property
    def loaded(self) -> Loaded | None:
        return self.built.loaded if self.built is not None else None

    @property
    def ast(self) -> Any:
        return self.built.ast if self.built is not None else None

    @property
    def checked(self) -> Checked:
        """Itself: code written for the former `Compiled` (``compiled.checked.root``) reads on."""
        return self

    @property
    def ok(self) -> bool:
        return not self.diagnostics

    @property
    def params(self) -> Expr:
        return self.totals["params"]

    def walk(self) -> Iterator[tuple[tuple[str, ...], Inst, Expr]]:
        """Every instance with its path and total multiplicity, depth first."""

        def visit(
            insts: list[Inst], prefix: tuple[str, ...], mult: Expr
        ) -> Iterator[tuple[tuple[str, ...], Inst, Expr]]:
            for inst in insts:
                path = (*prefix, inst.id)
                yield path, inst, mult
                for step, child, m in inst.children():
                    parts = tuple(step.split("/")[:-1])
                    yield from visit([child], (*path, *parts), mult * m)

        yield from visit(self.root, (), Expr.lift(1))

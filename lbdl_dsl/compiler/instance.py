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
from typing import Any, NoReturn

from lbdl_dsl.compiler.graph import (
    Block,
    CallNode,
    ExpertsNode,
    LayerNode,
    Node,
    Program,
    RepeatNode,
    ResidualNode,
    ScanNode,
)
from lbdl_dsl.compiler.imports import Loaded
from lbdl_dsl.compiler.stages import Built
from lbdl_dsl.core.errors import Diagnostic, Span
from lbdl_dsl.core.layers.base import Attrs, PSpec, Sizes, fmt_shape
from lbdl_dsl.core.symbolic import Expr

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
    """The body of a ×N group: ``count`` identical copies of ``body``, their arrays stacked
    along a leading axis of role ``role``.

    A mixture of experts holds its E experts the same way (role ``experts``, under the path
    step ``expert``), but runs only k of them per token: ``work``, when set, is how many times
    the body's MACs and activations count (k × tokens), while parameters count ``count`` times.
    """

    body: list[Inst]
    count: Expr
    role: str = "layers"
    work: Expr | None = None
    step: str = ""

    @property
    def runs(self) -> Expr:
        return self.count if self.work is None else self.work


class _NoneInside(list[Any]):
    """The empty list an instance without a body, a shortcut or copies holds: one list shared
    by every such box, where each made its own three (a 190,000-box model made half a million,
    which the cycle collector looked through at every pass). Being shared, it refuses to
    change: code that fills an instance's body assigns a list of its own."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("an instance's empty body is shared: assign a new list instead")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    __hash__ = object.__hash__  # type: ignore[assignment]  # a dataclass default: one object


_NONE_INSIDE: Any = _NoneInside()


@dataclass
class Inst:
    """What every checked box has, whatever its kind: its node, its tensors, its resolved
    hyper-parameters, its own arrays and counts. A box is one of the kinds of `Instance`, which
    mirror the graph's nodes (`graph.Node`) and hold what only that kind has; `children` and
    `parts` walk any of them."""

    node: Node
    inputs: list[Tensor]
    output: Tensor | None = None  # None when this box (or one above it) failed
    hp: dict[str, Any] = field(default_factory=dict)  # hyper-parameters, as resolved here
    params: dict[str, PSpec] = field(default_factory=dict)  # own trainable parameters
    state: dict[str, PSpec] = field(default_factory=dict)
    macs: Expr = Expr()  # immutable: one zero for every instance
    tied: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # mine → (node, theirs, T)
    totals: dict[str, Expr] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.node.id

    @property
    def kind(self) -> str:
        return self.node.kind

    def scopes(self) -> list[tuple[str, list[Inst], Expr]]:
        """The lists of sub-instances, each with the path steps before its boxes' ids and its
        multiplicity: a body (``""``), a shortcut (``"shortcut/"``), runs of copies (``""``,
        ``"0/"``..., an expert's ``"expert/"``). None for a plain layer."""
        return []

    def children(self) -> Iterator[tuple[str, Inst, Expr]]:
        """Sub-instances with their path step and multiplicity."""
        for steps, insts, count in self.scopes():
            for inst in insts:
                yield f"{steps}{inst.id}", inst, count

    def parts(self) -> list[list[Inst]]:
        """The lists of sub-instances, for walks that need neither paths nor counts."""
        return [insts for _, insts, _ in self.scopes()]


_ONE = Expr.lift(1)


@dataclass
class LayerInst(Inst):
    """A layer: its resolved record, and for a composite (`self-att`) the inside it is."""

    node: LayerNode
    attrs: Attrs | None = None  # what backends read
    inside: Block | None = None  # a composite's inside, whose instances are `body`
    body: list[Inst] = _NONE_INSIDE

    def scopes(self) -> list[tuple[str, list[Inst], Expr]]:
        return [("", self.body, _ONE)] if self.body else []


@dataclass
class CallInst(Inst):
    """A block call: the block's body as used here, and the symbols it bound (C, H, W...)."""

    node: CallNode
    body: list[Inst] = _NONE_INSIDE
    bindings: dict[str, Any] = field(default_factory=dict)

    def scopes(self) -> list[tuple[str, list[Inst], Expr]]:
        return [("", self.body, _ONE)]


@dataclass
class ResidualInst(Inst):
    """A residual group: its main path, and its shortcut (empty: the identity)."""

    node: ResidualNode
    body: list[Inst] = _NONE_INSIDE
    shortcut: list[Inst] = _NONE_INSIDE

    def scopes(self) -> list[tuple[str, list[Inst], Expr]]:
        return [("", self.body, _ONE), ("shortcut/", self.shortcut, _ONE)]


@dataclass
class GroupInst(Inst):
    """Boxes of stacked copies: a ×N group's runs of identical copies, or the experts of a
    mixture (one `Copies` of role ``experts``)."""

    copies: list[Copies] = _NONE_INSIDE

    def scopes(self) -> list[tuple[str, list[Inst], Expr]]:
        return [(steps, cp.body, cp.count) for steps, cp in self.copy_prefixes()]

    def copy_prefixes(self) -> Iterator[tuple[str, Copies]]:
        """Each run of copies with the path steps before its boxes' ids (``""``, ``"0/"``, or
        an expert's ``"expert/"``)."""
        several = len(self.copies) > 1
        for i, cp in enumerate(self.copies):
            prefix = f"{i}/" if several else ""
            yield prefix + (f"{cp.step}/" if cp.step else ""), cp


@dataclass
class RepeatInst(GroupInst):
    """A ×N group."""

    node: RepeatNode


@dataclass
class ExpertsInst(GroupInst):
    """A mixture of experts: a router (its own parameters) and its experts as stacked copies."""

    node: ExpertsNode


@dataclass
class ScanInst(Inst):
    """A recurrence (``scan h: H:``): one step's boxes, run ``steps`` times (T). Its body's
    arrays are stored once, shared by every step (not stacked): parameters count once, a
    step's MACs and activations ``steps`` times."""

    node: ScanNode
    body: list[Inst] = _NONE_INSIDE
    steps: Expr = _ONE

    def scopes(self) -> list[tuple[str, list[Inst], Expr]]:
        return [("", self.body, _ONE)]


Instance = LayerInst | CallInst | ResidualInst | RepeatInst | ExpertsInst | ScanInst
"""A checked box, one kind per kind of graph node (an input is a tensor, not a box)."""

KINDS: dict[type, type[Inst]] = {
    LayerNode: LayerInst,
    CallNode: CallInst,
    ResidualNode: ResidualInst,
    RepeatNode: RepeatInst,
    ExpertsNode: ExpertsInst,
    ScanNode: ScanInst,
}


def instance(node: Node, inputs: list[Tensor]) -> Instance:
    """The instance of ``node``'s kind."""
    made = KINDS[type(node)](node, inputs)
    assert isinstance(made, (LayerInst, CallInst, ResidualInst, RepeatInst, ExpertsInst, ScanInst))
    return made


def numel(shape: Sizes) -> Expr:
    return Expr.lift(_numel(shape))


Count = int | Expr
"""A count while totals are summed: a plain int as long as every size in it is known, since int
arithmetic is many times the polynomial's and a 190,000-box model sums a million of them."""


def _count(e: Expr | int) -> Count:
    if isinstance(e, int):
        return e
    v = e.as_int()
    return e if v is None else v


def _numel(shape: Sizes) -> Count:
    whole = 1
    for d in shape:  # sizes that are numbers: int products only (most shapes)
        v = d if isinstance(d, int) else d.as_int()
        if v is None:
            break
        whole *= v
    else:
        return whole
    out: Count = 1
    for d in shape:
        out *= _count(d)  # an int times an `Expr` is the polynomial's product
    return out


def _expr(c: Count) -> Expr:
    return c if isinstance(c, Expr) else Expr.lift(c)


TOTALS = ("params", "state", "macs", "activations")
"""The counts every instance keeps (``inst.totals``), in the order `_totals` lists them."""

_Sums = list[Count]  # params, state, MACs and activations, in the order of `TOTALS`
_Kept = dict[tuple[int, int, int, int], dict[str, Expr]]


def _sizes(specs: dict[str, PSpec]) -> Count:
    """The number of values of some arrays (a box's parameters, or its state)."""
    total: Count = 0
    for p in specs.values():
        total += _numel(p.shape)  # int + int, else the polynomial's sum
    return total


def _totals(inst: Inst, memo: dict[int, _Sums], kept: _Kept) -> _Sums:
    """Parameters, state, MACs and activation values of a box and everything inside it; each
    instance keeps its own as `Expr` (``inst.totals``), the sums run on `Count`.

    ``memo`` answers an instance met before (a block call's body is shared by identical
    calls); ``kept`` gives instances whose counts are the same numbers one dict of them
    (`_kept`)."""
    key = id(inst)
    known = memo.get(key)
    if known is not None:
        return known
    acts: Count = 0
    out = inst.output
    if out is not None and isinstance(inst, LayerInst) and inst.inside is None:
        acts = _numel(out.shape)
        held = getattr(inst.attrs, "scan_state", None)  # a state-space box's states (Mamba)
        if isinstance(held, Expr):
            acts = acts + (c if (c := held.as_int()) is not None else held)
    macs: Count | None = inst.macs.as_int()
    if macs is None:  # a polynomial
        macs = inst.macs
    params = _sizes(inst.params) if inst.params else 0
    state = _sizes(inst.state) if inst.state else 0
    sums: _Sums = [params, state, macs, acts]
    if isinstance(inst, GroupInst):
        for cp in inst.copies:
            for child in cp.body:
                _add(sums, _totals(child, memo, kept), _count(cp.count), _count(cp.runs))
    elif isinstance(inst, ScanInst):  # one step's arrays, every step's work
        for child in inst.body:
            _add(sums, _totals(child, memo, kept), 1, _count(inst.steps))
    else:
        for part in inst.parts():
            for child in part:
                _add(sums, _totals(child, memo, kept), 1, 1)
    inst.totals = _kept(sums, kept)
    memo[key] = sums
    return sums


def _kept(sums: _Sums, kept: _Kept) -> dict[str, Expr]:
    """``sums`` as an instance's totals. Instances whose counts are the same numbers share
    one dict of them, which nothing changes once made (a model of 190,000 boxes has a few
    dozen distinct ones): four `Expr` and a dict less a box."""
    params, state, macs, acts = sums
    if not (type(params) is int and type(state) is int and type(macs) is int and type(acts) is int):
        return {k: _expr(c) for k, c in zip(TOTALS, sums)}
    key = (params, state, macs, acts)
    found = kept.get(key)
    if found is None:
        found = kept[key] = {k: Expr.lift(c) for k, c in zip(TOTALS, sums)}
    return found


def _add(out: _Sums, sub: _Sums, copies: Count, runs: Count) -> None:
    """Add a body's totals: its arrays once per copy, its work once per run. An int and an
    `Expr` add and multiply as the polynomial would (`Expr`'s reflected operators), so the
    ints of a model without symbols are summed by Python alone."""
    out[0] += sub[0] * copies
    out[1] += sub[1] * copies
    out[2] += sub[2] * runs
    out[3] += sub[3] * runs


def sum_totals(root: list[Inst]) -> dict[str, Expr]:
    """The totals of a tree of instances (and each instance's own, on the way)."""
    memo: dict[int, _Sums] = {}
    kept: _Kept = {}
    out: _Sums = [0, 0, 0, 0]
    for inst in root:
        _add(out, _totals(inst, memo, kept), 1, 1)
    return {k: Expr.lift(v) for k, v in zip(TOTALS, out)}


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
    def ok(self) -> bool:
        return not self.diagnostics

    @property
    def params(self) -> Expr:
        return self.totals["params"]

    def walk(self) -> Iterator[tuple[tuple[str, ...], Inst, Expr]]:
        """Every instance with its path and total multiplicity, depth first."""
        return _walk(self.root, (), Expr.lift(1))


def _walk(
    insts: list[Inst], prefix: tuple[str, ...], mult: Expr
) -> Iterator[tuple[tuple[str, ...], Inst, Expr]]:
    """`Checked.walk`'s recursion, at module level: a nested function that calls itself is a
    reference cycle (the function and its closure cell), which would keep the checked tree it
    captures alive until the cycle collector runs (see ``tests/test_no_cycles.py``)."""
    for inst in insts:
        path = (*prefix, inst.id)
        yield path, inst, mult
        for step, child, m in inst.children():
            parts = tuple(step.split("/")[:-1])
            yield from _walk([child], (*path, *parts), mult * m)

"""Stage 2, build: syntax trees → a `Program` of graphs.

Reads the statements of each block and of the model top to bottom, keeping "the tensor flowing
down" as the figures do: a box consumes it (and any tensors named in parentheses) and becomes it.
Names given with ``->`` are skip connections at any distance; groups (``×N:``, ``residual:``) get
their own graph and capture outer names through extra input ports. Everything that can be wrong
without knowing shapes is reported here: unknown layers and hyper-parameters, names undefined,
duplicated or used before their definition, unused inputs, blocks that call themselves.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.graph import (
    Annotation,
    Block,
    CallNode,
    CountAssert,
    ExpertsNode,
    Graph,
    HValue,
    InputNode,
    LayerNode,
    Model,
    Node,
    ParamDecl,
    Program,
    RepeatNode,
    ResidualNode,
    ScanNode,
    ShapeAssert,
    TensorSig,
)
from lbdl_dsl.compiler.hparams import as_size, check_symbols, default_value, normalise
from lbdl_dsl.compiler.imports import Loaded
from lbdl_dsl.compiler.limits import MAX_REPEAT
from lbdl_dsl.compiler.values import written
from lbdl_dsl.core.errors import LbdlError, Note, Span, did_you_mean
from lbdl_dsl.core.layers import LAYERS, Layer, lookup
from lbdl_dsl.core.layers.base import HP
from lbdl_dsl.core.symbolic import Expr

_COUNTED = ("params", "state", "macs")
_EXPERTS_HPARAMS = ("e", "k", "cap")


@functools.cache
def slug(op: str) -> str:
    """An identifier-safe form of a layer or block name, for node ids. Kept per name: it depends
    on the name and the (fixed) registry only, and every box asks for its kind's."""
    layer = lookup(op)
    if layer is not None and layer.ident is not None:
        op = layer.ident
    return re.sub(r"\W+", "_", op).strip("_") or "node"


_INTERNAL_ID = re.compile(r"input(_\d+)?|capture_\d+|input:.*")


@dataclass
class _Scope:
    """A graph under construction and the names visible in it."""

    graph: Graph
    known: set[str]  # symbols usable in sizes: parameters and shape symbols
    params: set[str]  # parameter names (for `causal=causal`)
    parent: _Scope | None = None
    current: str | None = None
    counters: Counter[str] = field(default_factory=Counter)
    name_spans: dict[str, Span] = field(default_factory=dict)
    later: dict[str, Span] = field(default_factory=dict)  # names defined further down
    captures: list[str] = field(default_factory=list)  # outer node ids, by port (from 1)
    in_model: bool = False
    top: bool = False  # the model's or block's own body, not a group inside it

    def new_id(self, op: str) -> str:
        """``fc_0``, ``fc_1``...: the n-th box of its kind in this scope, skipping the names the
        scope's boxes are given (`fc 4D -> up` is the box ``up``)."""
        base, counters = slug(op), self.counters
        while True:
            n = counters[base]
            counters[base] = n + 1
            candidate = f"{base}_{n}"
            if candidate not in self.later and candidate not in self.graph.names:
                return candidate

    def box_id(self, op: str, name: ast.Ref | None) -> str:
        """A box's id: the name the spec gives it, or the next id of its kind (also when the
        name is already an id here, such as a block's ``input``)."""
        if name is None or name.name in self.graph or _INTERNAL_ID.fullmatch(name.name):
            return self.new_id(op)
        return name.name


class _LayerPlan:
    """What `layer_node` works out from a layer's entry alone, once per layer and build rather
    than once per box (a spec may have 190,000 boxes of a few kinds, issue 17). A plain class:
    a dataclass would cost more to define at import than it saves a ResNet-50."""

    __slots__ = (
        "decls",
        "filled",
        "first_required",
        "first_unfilled",
        "layer",
        "source",
        "unwritten",
    )

    def __init__(self, layer: Layer) -> None:
        self.layer = layer
        self.source = layer.source  # a constant: it reads no tensor
        # each hyper-parameter and what a box not writing it gets: its default in canonical
        # form, None where it is required
        self.decls: tuple[tuple[HP, HValue], ...] = tuple(
            (d, None if d.required else default_value(layer, d)) for d in layer.hparams
        )
        self.filled = frozenset(name for name, _ in layer.from_annotation)  # annotation gives
        unwritten: dict[str, HValue] = {}
        required: list[HP] = []
        for d, default in self.decls:
            if d.name in unwritten:  # a name declared twice: the first counts, as in a box
                continue
            unwritten[d.name] = default
            if d.required:
                required.append(d)
        self.unwritten = tuple(unwritten.items())  # the hyper-parameters of a box writing none
        # what a box writing none lacks, without an annotation and with one
        self.first_required: HP | None = next(iter(required), None)
        self.first_unfilled = next((d for d in required if d.name not in self.filled), None)


class _Builder:
    # statement type → its method (`_Box`...), named by the type and found once per type. Kept
    # unbound, on the class: bound methods kept on the builder would be a reference cycle,
    # which would keep the builder and its syntax trees until the cycle collector's next pass.
    handlers: ClassVar[dict[type, Callable[[_Builder, _Scope, Any], None]]] = {}

    def __init__(self, blocks_ast: dict[str, ast.BlockDef]) -> None:
        self.blocks_ast = blocks_ast
        self.plans: dict[str, _LayerPlan | None] = {}  # by name as written; None: no layer
        self.building: str | None = None  # the block whose body is being built, if any

    def callable_here(self) -> list[str]:
        """The blocks a box may call where it stands: all, in a model; in a block's body,
        those that do not lead back to it (itself, or a block that calls it, is a cycle)."""
        if self.building is None:
            return list(self.blocks_ast)
        return [n for n in self.blocks_ast if self.building not in _reached(self.blocks_ast, n)]

    def plan(self, op: str) -> _LayerPlan | None:
        """The plan of the layer that ``op`` names (an alias too), or None if it names none."""
        try:
            return self.plans[op]
        except KeyError:
            layer = lookup(op)
            plan = self.plans[op] = None if layer is None else _LayerPlan(layer)
            return plan

    # -- names ----------------------------------------------------------------------------------
    def resolve(self, scope: _Scope, ref: ast.Ref) -> str:
        if ref.name in scope.graph.names:
            return scope.graph.names[ref.name]
        if scope.parent is not None:
            try:
                outer = self.resolve(scope.parent, ref)
            except LbdlError:
                outer = None
            if outer is not None:
                port = len(scope.graph.inputs)
                nid = f"capture_{port}"
                scope.graph.add(InputNode(id=nid, span=ref.span, name=ref.name))
                scope.graph.inputs.append(nid)
                scope.graph.names[ref.name] = nid
                scope.captures.append(outer)
                return nid
        if ref.name in scope.later:
            raise LbdlError(
                f"`{ref.name}` is used before it is defined",
                ref.span,
                notes=[Note("it is defined here", scope.later[ref.name])],
                hint="a box can only read tensors made above it",
            )
        known = set(scope.graph.names)
        s: _Scope | None = scope.parent
        while s is not None:
            known |= set(s.graph.names)
            s = s.parent
        raise LbdlError(
            f"undefined name `{ref.name}`",
            ref.span,
            hint=did_you_mean(ref.name, known) or "name a tensor with `-> NAME` before using it",
        )

    def define(self, scope: _Scope, ref: ast.Ref, node_id: str) -> None:
        if ref.name in scope.graph.names and not scope.graph.names[ref.name].startswith("capture_"):
            raise LbdlError(
                f"`{ref.name}` is defined twice",
                ref.span,
                notes=[Note("first defined here", scope.name_spans[ref.name])],
                hint="give each tensor its own name",
            )
        scope.graph.names[ref.name] = node_id
        scope.name_spans[ref.name] = ref.span
        scope.later.pop(ref.name, None)
        if node_id in scope.graph:  # the node carries its first name (diagrams, code)
            node = scope.graph.node(node_id)
            if node.name is None:
                scope.graph.replace(dataclasses.replace(node, name=ref.name))

    def flowing(self, scope: _Scope, span: Span) -> str:
        if scope.current is None:
            raise LbdlError(
                "this box has no input",
                span,
                hint="declare `input X: SHAPE` above it, or start from a named tensor with "
                "`from NAME`",
            )
        return scope.current

    # -- statements -----------------------------------------------------------------------------
    def body(self, scope: _Scope, stmts: tuple[ast.Stmt, ...]) -> None:
        for name, span in _defined_names(stmts):
            scope.later.setdefault(name, span)
        handlers = self.handlers
        for stmt in stmts:
            handler = handlers.get(type(stmt))
            if handler is None:
                handler = handlers[type(stmt)] = getattr(_Builder, f"_{type(stmt).__name__}")
            handler(self, scope, stmt)

    def _InputDecl(self, scope: _Scope, st: ast.InputDecl) -> None:
        if not (scope.in_model and scope.top):
            raise LbdlError(
                "inputs are declared in the model's own body",
                st.span,
                hint="a block receives its inputs through `on ...` in its header",
            )
        dims = tuple(check_symbols(d, scope.known, "shape") for d in st.shape.dims)
        vocab = check_symbols(st.vocab, scope.known, "range") if st.vocab else None
        nid = f"input:{st.name.name}"
        node = InputNode(
            id=nid,
            span=st.span,
            annotation=_annot(st.shape, dims),
            name=st.name.name,
            dtype=st.dtype,
            vocab=vocab,
        )
        self.define(scope, st.name, nid)
        scope.graph.add(node)
        scope.graph.inputs.append(nid)
        scope.current = nid

    def _OutputDecl(self, scope: _Scope, st: ast.OutputDecl) -> None:
        if not (scope.in_model and scope.top):
            raise LbdlError(
                "outputs are declared in the model's own body",
                st.span,
                hint="a block's output is its last tensor",
            )
        if st.name.name in scope.graph.names:
            nid = scope.graph.names[st.name.name]
        else:
            nid = self.flowing(scope, st.span)
            self.define(scope, st.name, nid)
        if any(name == st.name.name for name, _ in scope.graph.outputs):
            raise LbdlError(f"`{st.name.name}` is already an output", st.name.span)
        scope.graph.outputs.append((st.name.name, nid))

    def _FromStmt(self, scope: _Scope, st: ast.FromStmt) -> None:
        scope.current = self.resolve(scope, st.name)

    def _NameStmt(self, scope: _Scope, st: ast.NameStmt) -> None:
        self.define(scope, st.name, self.flowing(scope, st.span))

    def _AssertCount(self, scope: _Scope, st: ast.AssertCount) -> None:
        if st.quantity.name not in _COUNTED:
            raise LbdlError(
                f"cannot assert on `{st.quantity.name}`",
                st.quantity.span,
                hint="assert on `params`, `state` or `macs`, or on a tensor's shape with "
                "`assert NAME: SHAPE`",
            )
        if not (scope.in_model and scope.top):
            raise LbdlError("count assertions belong in the model's own body", st.span)
        if not isinstance(st.value, ast.SizeExpr):
            raise LbdlError("compare with a whole number, e.g. `26M`", st.value.span)
        scope.graph.asserts.append(CountAssert(st.quantity.name, st.op, _metric(st.value), st.span))

    def _AssertShape(self, scope: _Scope, st: ast.AssertShape) -> None:
        nid = self.resolve(scope, st.name)
        dims = tuple(check_symbols(d, scope.known, "shape") for d in st.shape.dims)
        scope.graph.asserts.append(ShapeAssert(nid, _annot(st.shape, dims), st.span, st.name.name))

    def _RepeatGroup(
        self,
        scope: _Scope,
        st: ast.RepeatGroup,
        annotation: Annotation | None = None,
        framed: bool = False,
    ) -> None:
        count = self.count(scope, st.count)
        index = st.index
        if index is not None and (index in scope.known or index in scope.params):
            raise LbdlError(
                f"the copy's index `{index}` would hide the size or parameter `{index}`",
                st.span,
                hint="name the index differently, e.g. `×N as k:`",
            )
        body, sub = self.subgraph(scope, st.body, framed, index)
        node = RepeatNode(
            id=scope.new_id("repeat"),
            span=st.span,
            body=body,
            count=count,
            count_span=st.count.span,
            annotation=annotation,
            index=index,
        )
        self.emit(scope, node, [self.flowing(scope, st.span), *sub.captures])

    def _ResidualGroup(self, scope: _Scope, st: ast.ResidualGroup) -> None:
        x = self.flowing(scope, st.span)
        body, sub = self.subgraph(scope, st.body)
        short, captures = None, list(sub.captures)
        if st.shortcut is not None:
            short, ssub = self.subgraph(scope, st.shortcut)
            captures += ssub.captures  # ports: x, the body's captures, the shortcut's
        node = ResidualNode(id=scope.new_id("residual"), span=st.span, body=body, shortcut=short)
        self.emit(scope, node, [x, *captures])

    def _ExpertsGroup(self, scope: _Scope, st: ast.ExpertsGroup) -> None:
        x = self.flowing(scope, st.span)
        given = {hp.key: hp for hp in st.hparams}
        for hp in st.hparams:
            if hp.key not in _EXPERTS_HPARAMS:
                raise LbdlError(
                    f"`experts` has no hyper-parameter `{hp.key}`",
                    hp.span,
                    hint=did_you_mean(hp.key, _EXPERTS_HPARAMS)
                    or "its hyper-parameters are e (experts), k (per token) and cap (capacity)",
                )
        if len(given) != len(st.hparams):
            raise LbdlError("a hyper-parameter of `experts` is given twice", st.span)
        if "e" not in given:
            raise LbdlError(
                "`experts` needs `e`, the number of experts",
                st.span,
                hint="e.g. `experts e=8 k=2:`",
            )
        e = as_size(given["e"].value, "e", scope.known)
        k = as_size(given["k"].value, "k", scope.known) if "k" in given else Expr.lift(2)
        cap: float | None = None
        if "cap" in given:
            value = given["cap"].value
            number = value.value if isinstance(value, ast.Literal) else None
            if isinstance(value, ast.SizeExpr) and value.expr.is_const:
                number = float(value.expr.const_value)
            if not isinstance(number, float) or not number > 0:
                raise LbdlError(
                    f"`cap` is a positive number, not `{value.text}`",
                    value.span,
                    hint="the capacity factor: each expert holds cap·k·tokens/e tokens, "
                    "e.g. `cap=1.25`",
                )
            cap = number
        body, sub = self.subgraph(scope, st.body)
        if sub.captures:
            ref = sub.graph.node(sub.graph.inputs[1])
            raise LbdlError(
                f"an expert sees one token at a time: it cannot read `{ref.name}` from outside "
                "the `experts` group",
                ref.span,
                hint="compute what the experts need before the group, or inside the body",
            )
        node = ExpertsNode(
            id=scope.new_id("experts"),
            span=st.span,
            body=body,
            experts=e,
            k=k,
            capacity=cap,
            spans=tuple((hp.key, hp.span) for hp in st.hparams),
        )
        self.emit(scope, node, [x])

    def _ScanGroup(self, scope: _Scope, st: ast.ScanGroup) -> None:
        x = self.flowing(scope, st.span)
        name = st.carry.name
        outer: _Scope | None = scope
        while outer is not None:
            if name in outer.graph.names:
                raise LbdlError(
                    f"the carry `{name}` would hide the tensor `{name}` named above",
                    st.carry.span,
                    notes=[Note("that tensor is named here", outer.name_spans[name])]
                    if name in outer.name_spans
                    else [],
                    hint="name the carry differently, e.g. `scan state: ...:`",
                )
            outer = outer.parent
        dims = tuple(check_symbols(d, scope.known, "shape") for d in st.shape.dims)
        init = [self.resolve(scope, st.init)] if st.init is not None else []
        body, sub = self.subgraph(scope, st.body, carry=st.carry)
        node = ScanNode(
            id=scope.new_id("scan"),
            span=st.span,
            body=body,
            carry=name,
            carry_shape=_annot(st.shape, dims),
            init=bool(init),
        )
        self.emit(scope, node, [x, *init, *sub.captures])

    def _Box(self, scope: _Scope, st: ast.Box, in_frame: bool = False) -> None:
        if st.count is not None:  # `resblock ×2`: a frame around one box
            group = ast.RepeatGroup(st.count, (_replace_count(st),), st.span)
            self._RepeatGroup(scope, group, _box_annotation(st, scope), framed=True)
            if st.name is not None:
                self.define(scope, st.name, self.flowing(scope, st.span))
            return
        plan = self.plan(st.op)
        inputs = [] if plan is not None and plan.source else [self.flowing(scope, st.span)]
        if st.args:
            inputs += [self.resolve(scope, r) for r in st.args]
        annotation = _box_annotation(st, scope)
        node: Node
        if plan is not None:
            node = self.layer_node(scope, st, plan, inputs, annotation)
            if in_frame:  # the frame checks the annotation; each copy may only read sizes in it
                node = dataclasses.replace(node, annotation=None, fill=annotation)
        elif st.op in self.blocks_ast:
            node = self.call_node(scope, st, inputs, None if in_frame else annotation)
        else:
            raise LbdlError(
                f"unknown layer `{st.op}`",
                st.op_span,
                hint=did_you_mean(st.op, [*LAYERS, *self.callable_here()]) or _new_name_hint(st.op),
            )
        self.emit(scope, node, inputs)
        if st.name is not None:
            self.define(scope, st.name, node.id)

    # -- nodes ----------------------------------------------------------------------------------
    def emit(self, scope: _Scope, node: Node, inputs: list[str]) -> None:
        scope.graph.add(node, inputs)
        scope.current = node.id

    def count(self, scope: _Scope, value: ast.SizeExpr) -> Expr:
        expr = check_symbols(value, scope.known, "repeat count")
        n = expr.as_int()
        if (
            expr.is_const
            and (n is None or n < 1)
            and not (n == 0 and value.bare_name is None and not value.text.isdigit())
        ):
            raise LbdlError(
                f"×{value.text} repeats nothing",
                value.span,
                hint="a repeat count is a whole number ≥ 1",
            )
        if n is not None and n > MAX_REPEAT:
            raise LbdlError(
                f"×{n:,} is more than the {MAX_REPEAT:,} copies a spec may repeat",
                value.span,
                hint="is a digit too many? (docs/language.md, Limits)",
            )
        return expr

    def subgraph(
        self,
        scope: _Scope,
        stmts: tuple[ast.Stmt, ...],
        framed: bool = False,
        index: str | None = None,
        carry: ast.Ref | None = None,
    ) -> tuple[Graph, _Scope]:
        known, params = scope.known, scope.params
        if index is not None:  # `×N as i:`: the copy's index, for rates that follow depth
            known, params = known | {index}, params | {index}
        sub = _Scope(Graph(), known, params, parent=scope, in_model=scope.in_model)
        first = scope.graph.node(self.flowing(scope, stmts[0].span)) if stmts else None
        sub.graph.add(InputNode(id="input", span=first.span if first else Span.point("", 1, 1)))
        sub.graph.inputs.append("input")
        if carry is not None:  # a scan's step: the previous carry, by its name
            sub.graph.add(InputNode(id="carry", span=carry.span, name=carry.name))
            sub.graph.inputs.append("carry")
            self.define(sub, carry, "carry")
        sub.current = "input"
        if framed:
            for name, span in _defined_names(stmts):
                sub.later.setdefault(name, span)
            box = stmts[0]
            assert isinstance(box, ast.Box), "a frame holds one box (`resblock ×2`)"
            self._Box(sub, box, in_frame=True)
        else:
            self.body(sub, stmts)
        sub.graph.result = sub.current
        return sub.graph, sub

    def layer_node(
        self,
        scope: _Scope,
        st: ast.Box,
        plan: _LayerPlan,
        inputs: list[str],
        annotation: Annotation | None,
    ) -> LayerNode:
        layer = plan.layer
        lo, hi = layer.arity
        if not lo <= len(inputs) <= hi:
            extra = "" if hi == 1 else f" (the flowing tensor and {lo - 1} named in parentheses)"
            raise LbdlError(
                f"`{layer.name}` takes {lo if lo == hi else f'{lo} to {hi}'} input"
                f"{'s' if hi > 1 else ''}{extra}, got {len(inputs)}",
                st.span,
                hint="name extra inputs in parentheses: `cross-att(Z)`"
                if hi > 1
                else f"`{layer.name}` reads only the flowing tensor",
            )
        values: dict[str, HValue] = {}
        shares = None
        for hp in st.hparams:
            if hp.key == "tie":
                shares = self.tie(scope, layer, hp)
                continue
            decl = layer.hparam(hp.key)
            if decl is None:
                names = [h.name for h in layer.hparams]
                raise LbdlError(
                    f"`{layer.name}` has no hyper-parameter `{hp.key}`",
                    hp.span,
                    hint=_named_by_doc(hp.key, layer.hparams)
                    or did_you_mean(hp.key, names)
                    or (
                        f"its hyper-parameters are {', '.join(names)}"
                        if names
                        else f"`{layer.name}` takes none"
                    ),
                )
            values[hp.key] = normalise(
                layer, decl, hp.value, scope.known, scope.params, _axes_written(st)
            )
        explicit = frozenset(values)
        hparams: tuple[tuple[str, HValue], ...]
        if values:  # the written ones in their order, then the others in the layer's
            for decl, default in plan.decls:
                if decl.name in values:
                    continue
                if decl.required and not (decl.name in plan.filled and annotation is not None):
                    raise _needs(layer, decl, plan, st)
                values[decl.name] = default
            hparams = tuple(values.items())
        else:  # most boxes: the same hyper-parameters as every box of the layer writing none
            missing = plan.first_required if annotation is None else plan.first_unfilled
            if missing is not None:
                raise _needs(layer, missing, plan, st)
            hparams = plan.unwritten
        return LayerNode(
            id=scope.box_id(layer.name, st.name),
            span=st.span,
            op=layer.name,
            hparams=hparams,
            annotation=annotation,
            explicit=explicit,
            shares=shares,
        )

    def tie(self, scope: _Scope, layer: Layer, hp: ast.HParam) -> str:
        name = getattr(hp.value, "bare_name", None)
        if name is None:
            raise LbdlError(
                "`tie` names the tensor made by the layer to share",
                hp.value.span,
                hint="e.g. `embed D=768 -> tokens` ... `fc V tie=tokens`",
            )
        nid = self.resolve(scope, ast.Ref(name, hp.value.span))
        other = scope.graph.node(nid)
        allowed = {op for op, _ in layer.ties} | {layer.name}
        if not isinstance(other, LayerNode) or other.op not in allowed:
            raise LbdlError(
                f"`{layer.name}` cannot share the parameters of `{other.op or name}`",
                hp.value.span,
                hint=f"`{layer.name}` can share with: {', '.join(sorted(allowed))}",
            )
        return nid

    def call_node(
        self, scope: _Scope, st: ast.Box, inputs: list[str], annotation: Annotation | None
    ) -> CallNode:
        block = self.blocks_ast[st.op]
        if len(inputs) != len(block.inputs):
            raise LbdlError(
                f"block `{block.name}` takes {len(block.inputs)} "
                f"input{'s' if len(block.inputs) != 1 else ''}, got {len(inputs)}",
                st.span,
                notes=[Note("defined here", block.name_span)],
            )
        declared = {p.name: p for p in block.params}
        values: dict[str, HValue] = {}
        for hp in st.hparams:
            if hp.key not in declared:
                raise LbdlError(
                    f"block `{block.name}` has no parameter `{hp.key}`",
                    hp.span,
                    hint=did_you_mean(hp.key, declared)
                    or f"its parameters are {', '.join(declared) or 'none'}",
                    notes=[Note("defined here", block.name_span)],
                )
            values[hp.key] = written(hp.value, scope.known, scope.params, "argument")
        for p in block.params:
            if p.name not in values and p.default is None:
                raise LbdlError(
                    f"block `{block.name}` needs `{p.name}`",
                    st.op_span,
                    hint=f"write `{block.name} {p.name}=...`",
                    notes=[Note("defined here", p.span)],
                )
        return CallNode(
            id=scope.box_id(block.name, st.name),
            span=st.span,
            op=block.name,
            hparams=tuple(values.items()),
            annotation=annotation,
            explicit=frozenset(values),
        )


def _needs(layer: Layer, decl: HP, plan: _LayerPlan, st: ast.Box) -> LbdlError:
    """The error for a box that gives no value to the required ``decl``."""
    return LbdlError(
        f"`{layer.name}` needs `{decl.name}` ({decl.doc})",
        st.op_span,
        hint=f"write `{decl.name}=...`"
        + (" or the output shape at the right of the box" if decl.name in plan.filled else ""),
    )


_FILLER = frozenset({"number", "of", "the", "a", "an"})


def _named_by_doc(word: str, hparams: tuple[HP, ...]) -> str | None:
    """`stride=2` on a convolution: the hyper-parameter whose doc opens with that word (`s`).
    The one whose doc names it first wins, singular or plural and past "number of", so that
    `heads=4` on attention suggests `h` ("number of heads"), not `kv` ("key/value heads")."""
    wanted = word.lower().rstrip("s")
    best: tuple[tuple[int, int], HP] | None = None
    for h in hparams:
        clause = h.doc.split(",")[0]
        words = [w.strip(",;:()`").lower() for w in clause.split()]
        words = [w.rstrip("s") for w in words if w not in _FILLER]
        if wanted in words[:2]:
            rank = (words.index(wanted), len(words))
            if best is None or rank < best[0]:
                best = (rank, h)
    if best is None:
        return None
    h = best[1]
    return f"did you mean `{h.name}` ({h.doc.split(',')[0]})?"


def _annot(shape: ast.ShapeAST, dims: tuple[Expr, ...]) -> Annotation:
    given = shape.dims
    return Annotation(
        dims, tuple([d.text for d in given]), tuple([d.span for d in given]), shape.span
    )


_SUFFIX = {"K": 10**3, "k": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def _metric(value: ast.SizeExpr) -> int:
    """``26M`` → 26,000,000: the written number, with a metric suffix if any."""
    expr = value.expr
    if expr.is_const and expr.const_value.denominator == 1:
        return int(expr.const_value)
    if len(expr.terms) == 1:
        mono, coef = expr.terms[0]
        if len(mono) == 1 and mono[0][1] == 1 and mono[0][0] in _SUFFIX:
            result = coef * _SUFFIX[mono[0][0]]
            if result.denominator == 1:
                return int(result)
    raise LbdlError(
        f"`{value.text}` is not a count",
        value.span,
        hint="write a whole number, optionally with K, M, B or G: `26M`",
    )


def _defined_names(stmts: tuple[ast.Stmt, ...]) -> list[tuple[str, Span]]:
    out = []
    for st in stmts:
        ref = getattr(st, "name", None)
        if isinstance(ref, ast.Ref) and not isinstance(st, (ast.FromStmt, ast.AssertShape)):
            out.append((ref.name, ref.span))
    return out


def _replace_count(st: ast.Box) -> ast.Box:
    """The box inside the frame of ``box ×N``: its annotation becomes the frame's (below)."""
    return ast.Box(st.op, st.op_span, st.args, None, st.hparams, st.shape, None, st.span)


def _box_annotation(st: ast.Box, scope: _Scope) -> Annotation | None:
    if st.shape is None:
        return None
    known = scope.known
    return _annot(st.shape, tuple([check_symbols(d, known, "shape") for d in st.shape.dims]))


def _symbols_of(shapes: list[ast.ShapeAST]) -> set[str]:
    out: set[str] = set()
    for shape in shapes:
        for d in shape.dims:
            out |= d.expr.free_symbols
    return out


def _param_decls(params: tuple[ast.Param, ...], known: set[str]) -> tuple[ParamDecl, ...]:
    """A header's parameters, each default read as any written value is (`values.written`),
    over the names known so far (those before it)."""
    out = []
    for p in params:
        default = None if p.default is None else written(p.default, known, set(), "default")
        out.append(ParamDecl(p.name, default, p.span))
        known = known | {p.name}
    return tuple(out)


def build_blocks(modules: list[ast.Module]) -> dict[str, Block]:
    """The blocks of ``modules`` alone (a composite box's inside is one such module)."""
    blocks_ast = _block_asts(modules)
    builder = _Builder(blocks_ast)
    return {name: _build_block(builder, b) for name, b in blocks_ast.items()}


def _block_asts(modules: list[ast.Module]) -> dict[str, ast.BlockDef]:
    blocks_ast: dict[str, ast.BlockDef] = {}
    for module in modules:
        for b in module.blocks:
            if lookup(b.name) is not None:
                raise LbdlError(
                    f"block `{b.name}` has the name of a built-in layer",
                    b.name_span,
                    hint="give the block another name, e.g. `my-" + b.name + "`",
                )
            if b.name in blocks_ast:
                raise LbdlError(
                    f"block `{b.name}` is defined twice",
                    b.name_span,
                    notes=[Note("first defined here", blocks_ast[b.name].name_span)],
                )
            blocks_ast[b.name] = b
    return blocks_ast


def build(loaded: Loaded) -> Program:
    """The program of the main file's model, with every block it can reach."""
    blocks_ast = _block_asts(loaded.modules)
    builder = _Builder(blocks_ast)
    blocks = {name: _build_block(builder, b) for name, b in blocks_ast.items()}
    main = loaded.main
    if not main.models:
        raise LbdlError(
            "this spec defines no model",
            Span.point(main.file, 1, 1),
            hint="a spec has one `model NAME:`; a file of blocks is imported by one",
        )
    if len(main.models) > 1:
        raise LbdlError(
            "a spec defines one model",
            main.models[1].name_span,
            notes=[Note("the first model is here", main.models[0].name_span)],
            hint="put each model in its own file; share blocks through an import",
        )
    model = _build_model(builder, main.models[0])
    program = Program(model, blocks, dict(loaded.sources), main.file)
    _check_recursion(program)
    return program


def _build_block(builder: _Builder, b: ast.BlockDef) -> Block:
    known = {p.name for p in b.params}
    shape_symbols = _symbols_of([t.shape for t in b.inputs])
    shape_symbols |= {s for t in b.inputs if t.vocab for s in t.vocab.expr.free_symbols}
    params = _param_decls(b.params, shape_symbols)
    known |= shape_symbols
    scope = _Scope(Graph(), known, {p.name for p in b.params}, top=True)
    sigs = []
    for i, pat in enumerate(b.inputs):
        dims = tuple(d.expr for d in pat.shape.dims)
        vocab = pat.vocab.expr if pat.vocab is not None else None
        texts = tuple(d.text for d in pat.shape.dims)
        sigs.append(TensorSig(pat.name, dims, texts, pat.span, pat.dtype, vocab))
        nid = "input" if i == 0 else f"input_{i}"
        annotation = _annot(pat.shape, dims)
        scope.graph.add(
            InputNode(
                id=nid,
                span=pat.span,
                annotation=annotation,
                name=pat.name,
                dtype=pat.dtype or "float",
                vocab=vocab,
            )
        )
        scope.graph.inputs.append(nid)
        if pat.name:
            builder.define(scope, ast.Ref(pat.name, pat.span), nid)
    scope.current = "input"
    outer, builder.building = builder.building, b.name
    try:
        builder.body(scope, b.body)
    finally:
        builder.building = outer
    scope.graph.result = scope.current
    return Block(b.name, params, tuple(sigs), scope.graph, b.span)


def _axes_written(st: ast.Box) -> int | None:
    """The axes of a box's output where its line says them (its annotation, or `size=`): a
    table's formula may read one index variable per axis."""
    for hp in st.hparams:
        if hp.key == "size":
            return len(hp.value.items) if isinstance(hp.value, ast.TupleValue) else 1
    return len(st.shape.dims) if st.shape is not None else None


def _reached(blocks: dict[str, ast.BlockDef], start: str) -> set[str]:
    """``start`` and every block it calls, directly or through others (read from the syntax
    trees: for a hint, before any graph is built)."""
    seen, todo = {start}, [start]
    while todo:
        stmts = list(blocks[todo.pop()].body)
        while stmts:
            st = stmts.pop()
            stmts += getattr(st, "body", ()) + (getattr(st, "shortcut", None) or ())
            op = getattr(st, "op", None)
            if op in blocks and op not in seen:
                seen.add(op)
                todo.append(op)
    return seen


def _build_model(builder: _Builder, m: ast.ModelDef) -> Model:
    inputs = [s for s in m.body if isinstance(s, ast.InputDecl)]
    if not inputs:
        raise LbdlError(
            f"model `{m.name}` has no input",
            m.name_span,
            hint="declare one as its first line, e.g. `input X: 3×224×224`",
        )
    params = _param_decls(m.params, set())
    known = {p.name for p in m.params} | _symbols_of([i.shape for i in inputs])
    known |= {s for i in inputs if i.vocab for s in i.vocab.expr.free_symbols}
    scope = _Scope(Graph(), known, {p.name for p in m.params}, in_model=True, top=True)
    builder.body(scope, m.body)
    graph = scope.graph
    graph.result = scope.current
    if not graph.outputs:
        graph.outputs.append(("Y", builder.flowing(scope, m.span)))
    read = graph.read_nodes() | {o for _, o in graph.outputs}
    for nid in graph.inputs:
        if nid not in read:
            node = graph.node(nid)
            raise LbdlError(
                f"input `{node.name}` is never used",
                node.span,
                hint=f"read it with `from {node.name}` or `+({node.name})`, or remove it",
            )
    return Model(m.name, params, graph, m.span)


def _new_name_hint(op: str) -> str:
    """The hint for a box that is neither a layer nor a block: define it, under a name a block
    may have (letters, digits and `_`: `my-chunk`, a layer's style, would not parse)."""
    if re.fullmatch(r"[^\W\d]\w*", op):
        return "see docs/layers.md for the layers, or define a block with this name"
    name = re.sub(r"\W+", "_", op).strip("_") or "my_block"
    if name[0].isdigit():
        name = f"b_{name}"
    odd = next((c for c in op if not (c.isalnum() or c == "_")), "-")
    return (
        f"see docs/layers.md for the layers, or define a block `{name}` and call it so "
        f"(a block's name has letters, digits and `_`, not `{odd}`)"
    )


def _check_recursion(program: Program) -> None:
    """Refuse a block that calls itself, directly or through others, at the call that closes
    the cycle.

    A depth-first walk over the call graph that visits each block once: linear in the blocks
    and their call sites. (Walking every path instead doubles the work at each level where a
    block calls the one before it twice: 29 such levels took minutes.) The walk keeps its own
    stack, so a chain of thousands of blocks cannot exhaust Python's.
    """
    from lbdl_dsl.compiler.graph import walk

    calls: dict[str, list[Node]] = {}
    for name, block in program.blocks.items():
        calls[name] = [n for _, n in walk(block.body) if isinstance(n, CallNode)]
    done: set[str] = set()
    for root in sorted(program.blocks):
        if root in done:
            continue
        path, on_path = [root], {root}
        todo = [iter(calls.get(root, []))]  # per block on the path: its calls left to follow
        while todo:
            site = next(todo[-1], None)
            if site is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                todo.pop()
                continue
            name = site.op
            if name in on_path:
                cycle = " → ".join(path[path.index(name) :] + [name])
                raise LbdlError(
                    f"block `{name}` calls itself: {cycle}",
                    site.span,
                    hint="a block cannot contain itself; repeat it with ×N instead",
                )
            if name not in done:
                path.append(name)
                on_path.add(name)
                todo.append(iter(calls.get(name, [])))

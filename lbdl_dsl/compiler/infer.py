"""Stage 3, check: infer every tensor's shape symbolically, check it, and count.

Walks the model's graph in data-flow order with an environment of known values (the model's
parameters, then inside each block call the symbols its input pattern binds: C, H, W, S...). Each
box asks its registry entry for the output shape; the annotation at its right is checked against
it, or supplies a size the spec left out (the output channels of ``fc`` and ``conv-2d``). A failed
box poisons only what depends on it, so independent failures are all reported in one run.
Identical block calls are checked once (memoised) and a ×N group stops re-checking as soon as a
copy sees the shapes of the copy before it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from collections.abc import Hashable
from fractions import Fraction
from typing import Any, overload

from lbdl_dsl.compiler import composite
from lbdl_dsl.compiler.graph import (
    Block,
    CallNode,
    CountAssert,
    ExpertsNode,
    Graph,
    GraphInvariantError,
    InputNode,
    LayerNode,
    Node,
    ParamRef,
    Program,
    RepeatNode,
    ResidualNode,
    ScanNode,
    ShapeAssert,
    TensorSig,
)
from lbdl_dsl.compiler.hparams import coerce
from lbdl_dsl.compiler.instance import (
    CallInst,
    Checked,
    Copies,
    ExpertsInst,
    Inst,
    Instance,
    LayerInst,
    RepeatInst,
    ResidualInst,
    ScanInst,
    Tensor,
    instance,
    numel,
    sum_totals,
)
from lbdl_dsl.compiler.limits import MAX_CALL_DEPTH, MAX_DIM, MAX_EXPANDED_LAYERS, MAX_REPEAT
from lbdl_dsl.core.collector import fewer_collections
from lbdl_dsl.core.errors import Diagnostic, LbdlError, Note, Span
from lbdl_dsl.core.formula import Formula
from lbdl_dsl.core.layers import Ctx, Layer, ShapeFailure, lookup
from lbdl_dsl.core.layers.base import ZEROS, FanIn, PSpec, Shape, fmt_shape
from lbdl_dsl.core.symbolic import Expr, InexactDivision, PerCopy

_MAX_DIAGNOSTICS = 20

Env = dict[str, Any]

_INDICES: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "indices", default=frozenset()
)
"""The names of the copy indices of the ×N groups being checked (``×N as i:``)."""
_RANGES: contextvars.ContextVar[tuple[tuple[str, tuple[int, int | None]], ...]] = (
    contextvars.ContextVar("ranges", default=())
)
"""Each index's first and last value over the copies being checked (None: not known)."""


def _attrs_per_copy(attrs: Any, per_copy: dict[str, PerCopy], node: Any) -> Any:
    """The resolved record with each per-copy value in place of the first copy's: only a
    hyper-parameter the record keeps as written may follow the index."""
    if attrs is None:
        return attrs
    names = {name for name, _ in attrs.items()}
    for key in per_copy:
        if key not in names:
            raise LbdlError(f"`{key}` of `{node.op}` cannot follow the copy's index", node.span)
    values = tuple((k, per_copy.get(k, v)) for k, v in attrs.items())
    if type(attrs).__name__ == "Given":
        return type(attrs)(values)
    return dataclasses.replace(attrs, **{k: v for k, v in per_copy.items()})


"""Symbols and parameters in scope: sizes as `Expr`, and any other hyper-parameter value."""
RF = tuple[Expr, Expr] | None  # receptive field and cumulative stride, when it has one
Window = tuple[int, int, int] | None  # a layer's kernel, stride and dilation, for the RF
Outs = dict[str, Tensor | None]  # each node's output in a scope; None where it failed
CallKey = tuple[str, tuple[Shape, ...], tuple[tuple[str, Hashable], ...]]  # block, ins, symbols


class _Poisoned(Exception):
    """An input of this box already failed; its failure has been reported."""


def _where(node: Node) -> str:
    match node:
        case LayerNode():  # most boxes: asked first
            return f"`{node.op}` at line {node.span.line}"
        case InputNode(name=name):
            return f"input `{name}`" if name else "the block's input"
        case RepeatNode():
            return f"`×N group` at line {node.span.line}"
        case ResidualNode():
            return f"`residual group` at line {node.span.line}"
        case ExpertsNode():
            return f"`experts` at line {node.span.line}"
        case ScanNode():
            return f"`scan` at line {node.span.line}"
        case _:
            return f"`{node.op}` at line {node.span.line}"


def _param_hint(ref: ParamRef) -> str:
    return f"give `{ref.name}` a value of that kind where the block is used, or as its default"


def _fmt_fraction(value: float) -> str:
    """4.5 as ``9/2``, the way a spec writes a fraction."""
    f = Fraction(value).limit_denominator(10**6)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


# a size stays a size; any other value (tuples, words, parameter references) keeps its kind
@overload
def _subs(value: Expr, env: Env) -> Expr: ...
@overload
def _subs(value: Any, env: Env) -> Any: ...
def _subs(value: Any, env: Env) -> Any:
    if isinstance(value, Expr):
        symbols = value.free_symbols
        if not symbols:  # a number: most sizes of a model
            return value
        exprs = {k: v for k in symbols if isinstance(v := env.get(k), Expr)}
        for k in symbols:  # a number such as `n=9/2` used as a size: its exact value, so that
            v = env.get(k)  # the size is refused, never left as a symbol `n`
            if isinstance(v, float) and math.isfinite(v):
                exprs[k] = Expr.lift(Fraction(v).limit_denominator(10**6))
        return value.subs(exprs)
    if isinstance(value, tuple):
        return tuple(_subs(v, env) for v in value)
    if isinstance(value, Formula):  # a table's formula: the sizes it names, at this use
        return value.with_sizes(tuple((k, _subs(v, env)) for k, v in value.sizes))
    if isinstance(value, ParamRef):
        if value.name not in env:
            raise LbdlError(f"no value for parameter `{value.name}`", value.span)
        return env[value.name]
    return value


class Checker:
    def __init__(self, program: Program, env: dict[str, Any]) -> None:
        self.program = program
        self.env = env
        self.diagnostics: list[Diagnostic] = []
        self.assumptions: list[str] = []
        self.memo: dict[CallKey, tuple[list[Inst], Tensor | None, Env, int]] = {}
        self.stack: list[tuple[str, Span]] = []  # block calls (and experts) being checked: notes
        self.layers_seen = 0
        self.rules_memo: dict[Hashable, _Rules] = {}  # a layer's rules, by what they read

    # -- reporting ------------------------------------------------------------------------------
    def report(self, err: LbdlError) -> None:
        calls = [Note(text, span) for text, span in reversed(self.stack)]
        if len(calls) > 8:  # a deep chain of calls: its innermost and outermost steps say enough
            calls = [*calls[:4], Note(f"... and {len(calls) - 7} calls between"), *calls[-3:]]
        for d in err.diagnostics:
            notes = d.notes + tuple(calls)
            diag = Diagnostic(d.message, d.span, d.hint, notes)
            if diag not in self.diagnostics and len(self.diagnostics) < _MAX_DIAGNOSTICS:
                self.diagnostics.append(diag)

    # -- graphs ---------------------------------------------------------------------------------
    def graph(
        self, graph: Graph, ins: list[Tensor | None], env: Env
    ) -> tuple[list[Inst], Tensor | None, Outs]:
        """Check one scope; returns its instances, its result tensor, and every node's output."""
        outs: Outs = {}
        for nid, t in zip(graph.inputs, ins):
            outs[nid] = t
        insts: list[Inst] = []
        for nid in graph.order():
            node = graph.node(nid)
            if isinstance(node, InputNode):
                if nid not in outs:
                    try:
                        outs[nid] = self.model_input(node, env)
                    except LbdlError as err:
                        self.report(err)
                        outs[nid] = None
                continue
            inputs = [outs[u] for u in graph.preds(nid)]
            present = [t for t in inputs if t is not None]
            inst = instance(node, present)
            insts.append(inst)
            if len(present) < len(inputs):  # an input failed
                outs[nid] = None
                continue
            try:
                inst.output = self.box(inst, graph, env, outs)
            except LbdlError as err:
                self.report(err)
                inst.output = None
            outs[nid] = inst.output
        return insts, outs.get(graph.result) if graph.result else None, outs

    def model_input(self, node: InputNode, env: Env) -> Tensor:
        ann = node.annotation
        assert ann is not None, "a model's input declares its shape (a block's inputs are given)"
        dims = tuple(self.size(d, env, s, "this input's size") for d, s in zip(ann.dims, ann.spans))
        vocab = _subs(node.vocab, env) if node.vocab is not None else None
        self.bounded(numel(dims), f"the number of elements of input `{node.name}`", node.span)
        return Tensor(dims, node.dtype, vocab, f"input `{node.name}`", node.span)

    def size(self, expr: Expr, env: dict[str, Any], span: Span, what: str) -> Expr:
        """A size with the environment's values in; whole, positive and not absurdly large."""
        whole = expr.as_int()
        if whole is not None and 0 < whole <= MAX_DIM:  # passes every test below as it is
            return expr
        try:
            value = _subs(expr, env)
        except ZeroDivisionError:
            zeros = [
                k
                for k in sorted(expr.free_symbols)
                if isinstance(env.get(k), Expr) and env[k] == Expr.lift(0)
            ]
            hint = f"here {', '.join(f'{k}=0' for k in zeros)}" if zeros else None
            raise LbdlError(f"division by zero in {what}", span, hint=hint) from None
        if value.is_const:
            v = value.const_value
            if v.denominator != 1 and not expr.free_symbols:  # `fc 1.5`: nothing was divided
                raise LbdlError(f"{what} is {v}, not a whole number", span)
            fractional = (
                [k for k in sorted(expr.free_symbols) if isinstance(env.get(k), float)]
                if v.denominator != 1
                else []
            )
            if fractional:  # `b n=9/2`, `model m(T=7/2)`: never floored
                shown = ", ".join(f"{k}={_fmt_fraction(env[k])}" for k in fractional)
                raise LbdlError(
                    f"{what} is {_fmt_fraction(float(v))}, not a whole number: {shown}",
                    span,
                    hint=f"give {' and '.join(f'`{k}`' for k in fractional)} a whole number"
                    " where it is set (the block's use, the model's header or --set)",
                )
            if v.denominator != 1:
                values = {k: env[k] for k in sorted(expr.free_symbols) if k in env}
                raise LbdlError(
                    str(
                        InexactDivision(
                            expr, {k: v for k, v in values.items() if isinstance(v, Expr)}, v
                        )
                    ).replace("Expr(", "("),
                    span,
                    hint="sizes must divide exactly; change the input size or the divisor",
                )
            if v <= 0:
                raise LbdlError(f"{what} is {v}: sizes must be positive", span)
            if v > MAX_DIM:
                raise LbdlError(f"{what} is {int(v):,}, which overflows 64 bits", span)
        return value

    @staticmethod
    def bounded(count: Expr, what: str, span: Span | None) -> None:
        """Refuse a count (elements, parameters, MACs) that 64-bit sizes cannot hold."""
        if count.is_const and count.const_value > MAX_DIM:
            v = int(count.const_value)  # 3×3×...×3 with 10,000 dims has too many digits to print
            shown = f"{v:,}" if v.bit_length() <= 128 else f"about 2^{v.bit_length() - 1}"
            raise LbdlError(
                f"{what} is {shown}, which overflows 64 bits",
                span,
                hint=f"every size and count must stay below 2^62 = {MAX_DIM:,}",
            )

    # -- one box --------------------------------------------------------------------------------
    def count_boxes(self, n: int, span: Span) -> None:
        """Count ``n`` more boxes of the expanded model against the limit.

        Boxes count as the model has them once every block call and ×N group is expanded,
        not as they are checked: a call the memo answers, or the identical copies of a ×N
        group, cost the checker nothing but are drawn, unrolled and summed by what follows.
        """
        self.layers_seen += n
        if self.layers_seen > MAX_EXPANDED_LAYERS:
            raise LbdlError(
                f"the model has more than {MAX_EXPANDED_LAYERS:,} boxes once its block calls "
                "and ×N groups are expanded",
                span,
                hint="each block call and each copy of a ×N group counts; docs/language.md, Limits",
            )

    def box(self, inst: Instance, graph: Graph, env: Env, outs: Outs) -> Tensor:
        node = inst.node
        self.count_boxes(1, node.span)
        match inst:
            case LayerInst():
                return self.layer(inst, graph, env)
            case CallInst():
                out = self.call(inst, env)
            case RepeatInst():
                out = self.repeat(inst, env)
            case ResidualInst():
                out = self.residual(inst, env)
            case ExpertsInst():
                out = self.experts(inst, env)
            case ScanInst():
                out = self.scan(inst, env)
            case _:
                raise GraphInvariantError(f"no kind of instance for {inst!r}")
        if node.annotation is not None:
            self.check_annotation(inst, out.shape, env)
        return out

    def layer(self, inst: LayerInst, graph: Graph, env: Env) -> Tensor:
        node = inst.node
        assert isinstance(node, LayerNode), "`box` dispatches layers here"
        layer = lookup(node.op)
        assert layer is not None, "build made layer nodes of registry entries only"
        hp = self.hparams(node, layer, env)
        ann = None
        source = node.annotation or node.fill
        if source is not None:
            ann = (
                source.dims
                if _whole_sizes(source.dims)
                else tuple(
                    self.size(d, env, s, f"the annotation `{t}`")
                    for d, t, s in zip(source.dims, source.texts, source.spans)
                )
            )
            for name, axis in layer.from_annotation:
                if hp.get(name) is None:
                    if axis is None:
                        hp[name] = ann
                    elif -len(ann) <= axis < len(ann):
                        hp[name] = ann[axis]
        for name, _ in layer.from_annotation:
            if hp.get(name) is None and (decl := layer.hparam(name)) is not None and decl.required:
                raise LbdlError(
                    f"`{node.op}` needs `{name}`",
                    node.span,
                    hint=f"write `{name}=...` or the output shape at the right of the box",
                )
        hp, per_copy = self.at_the_ends(inst, layer, hp, ann)
        key = _rules_key(node.op, hp, inst.inputs)
        known = self.rules_memo.get(key) if key is not None else None
        if known is None:
            known = self.run_rules(inst, layer, hp, ann)
            if key is not None:
                self.rules_memo[key] = known
        else:  # the same box on the same inputs passed every rule: only the annotation is new
            inst.params, inst.state, inst.macs = dict(known.params), dict(known.state), known.macs
            if ann is not None and node.annotation is not None:
                self.compare(inst, ann, known.out)
        out = known.out
        inst.hp, inst.attrs = hp, known.attrs
        if per_copy:
            inst.hp, inst.attrs = hp | per_copy, _attrs_per_copy(known.attrs, per_copy, node)
        if layer.inside is not None:
            self.composite(inst, layer, out)
        if node.shares:
            self.tie(inst, graph, layer)
        rf = self.rf(inst, layer, known.window, out)
        return Tensor(out, known.dtype, known.vocab, _where(node), node.span, rf)

    def at_the_ends(
        self,
        inst: Inst,
        layer: Layer,
        hp: dict[str, Any],
        ann: Shape | None,
    ) -> tuple[dict[str, Any], dict[str, PerCopy]]:
        """A box whose rates follow a copy's index: its rules run at the first and the last
        copy's values (a rate the rules refuse fails at its copy); the first copy's values
        are then the box's, as the counts do not depend on them."""
        per_copy = {k: v for k, v in hp.items() if isinstance(v, PerCopy)}
        if not per_copy:
            return hp, per_copy
        ranges = _RANGES.get()
        for index, (lo, hi) in ranges:
            for end in {lo, hi} - {None}:
                assert end is not None  # for mypy: removed above
                ends = {k: PerCopy(v.expr.subs({index: end})) for k, v in per_copy.items()}
                if all(v.expr.is_const for v in ends.values()):
                    self.run_rules(
                        inst, layer, hp | {k: v.at(index, end) for k, v in ends.items()}, ann
                    )
        first = {k: v.expr.subs({i: lo for i, (lo, _) in ranges}) for k, v in per_copy.items()}
        return hp | {k: float(v.const_value) for k, v in first.items()}, per_copy

    def run_rules(self, inst: Inst, layer: Layer, hp: dict[str, Any], ann: Shape | None) -> _Rules:
        """The entry's rules on one box: attributes, output shape (compared with the
        annotation), parameters, state and MACs, each count held below 64 bits; then what
        they give, for every box with the same entry, hyper-parameters and inputs."""
        node = inst.node
        ins = inst.inputs
        ctx = Ctx(
            node.op, [t.shape for t in ins], hp, [t.dtype for t in ins], [t.vocab for t in ins]
        )
        try:
            ctx.a = layer.attrs(ctx)
            out = tuple(Expr.lift(d) for d in layer.shape(ctx))
            # the rule's output is already in the caller's symbols: check it, substitute nothing
            out = tuple(self.size(d, {}, node.span, f"the output of `{node.op}`") for d in out)
            ctx.out = out
            if ann is not None and node.annotation is not None:
                self.compare(inst, ann, out)
            inst.params = layer.params(ctx)
            inst.state = layer.state(ctx)
            inst.macs = Expr.lift(layer.macs(ctx))
            self.bounded(
                numel(out), f"the number of elements of the output of `{node.op}`", node.span
            )
            for name, p in inst.params.items():
                self.bounded(numel(p.shape), f"the size of the parameter `{name}`", node.span)
            self.bounded(inst.macs, f"the multiply-accumulate count of `{node.op}`", node.span)
        except ShapeFailure as exc:
            raise self.shape_error(inst, exc) from None
        except (InexactDivision, ZeroDivisionError) as exc:
            raise self.shape_error(inst, ShapeFailure(str(exc))) from None
        dtype, vocab = _out_type(layer, ctx, ins)
        window = layer.window(ctx) if len(ctx.y) >= 2 and layer.rf else None  # what `rf` reads
        # copies of the dicts: `tie` takes the shared parameters out of this box's own
        return _Rules(
            ctx.a, ctx.y, dict(inst.params), dict(inst.state), inst.macs, dtype, vocab, window
        )

    def composite(self, inst: LayerInst, layer: Layer, out: Shape) -> None:
        """Check a composite's inside as a block call, so that its parameters, state and MACs
        are its primitives'. The entry's own rules have validated the box already: a failure
        inside is reported at the box, and an inside whose output disagrees is our bug."""
        block = composite.inside(layer, inst.hp, tuple(len(t.shape) for t in inst.inputs))
        benv: dict[str, Any] = {k: v for k, v in inst.hp.items() if v is not None}
        for sig, t in zip(block.inputs, inst.inputs):
            for pat, text, actual in zip(sig.dims, sig.texts, t.shape):
                self.match(pat, text, actual, benv, block, inst.node, t)
            self.match_type(sig, t, benv, block, inst.node)
        mark = len(self.diagnostics)
        body, result, _ = self.graph(block.body, list(inst.inputs), benv)
        if len(self.diagnostics) > mark:
            inner = self.diagnostics[mark]
            del self.diagnostics[mark:]
            raise LbdlError(f"`{inst.node.op}`: {inner.message}", inst.node.span, inner.hint)
        if result is None or result.shape != out:
            raise GraphInvariantError(f"the inside of `{layer.name}` gives {result}, not {out}")
        inst.body, inst.inside = body, block

    @staticmethod
    def hparams(node: LayerNode, layer: Layer, env: Env) -> dict[str, Any]:
        """The box's hyper-parameters with this use's values; one that arrives through a
        block or model parameter (``p=p``) is read as the kind the layer declares."""
        hp: dict[str, Any] = {}
        for key, raw in node.hparams:
            if raw is None or type(raw) in _AS_WRITTEN:  # a default, a word, a flag, a number
                hp[key] = raw
                continue
            value = _subs(raw, env)
            decl = layer.hparam(key)
            if isinstance(value, Expr) and value.free_symbols & _INDICES.get():
                if decl is None or decl.kind != "float":
                    raise LbdlError(
                        f"`{key}` of `{node.op}` cannot follow the copy's index: only a number "
                        "(a rate) may differ between the copies of a ×N group",
                        node.span,
                        hint="the copies of a frame share their shapes, so a size cannot vary",
                    )
                hp[key] = PerCopy(value)
                continue
            if isinstance(raw, ParamRef) or (
                isinstance(raw, Expr) and decl is not None and decl.kind == "float"
            ):
                assert decl is not None, "build kept only declared hyper-parameters"
                try:
                    value = coerce(layer, decl, value, f"`{raw}`")
                except LbdlError as err:
                    hint = _param_hint(raw) if isinstance(raw, ParamRef) else None
                    raise LbdlError(err.first.message, node.span, hint=hint) from None
            hp[key] = value
        return hp

    @staticmethod
    def rf(inst: Inst, layer: Layer, window: Window, out: Shape) -> RF:
        """The receptive field (and cumulative stride) of a map, from the first window over
        a float input (a convolution, a pool) on: sequences and tokens, which no window has
        slid over, have none, so `+` and `mul` on them show none. ``window`` is the entry's
        for this box (`_Rules.window`)."""
        if len(out) < 2 or not layer.rf:
            return None
        rfs = [t.rf for t in inst.inputs if t.rf is not None]
        if not rfs:
            x = inst.inputs[0] if inst.inputs else None
            if window is None or x is None or x.dtype != "float" or len(x.shape) < 2:
                return None
            rfs = [(Expr.lift(1), Expr.lift(1))]
        r, j = max(rfs, key=lambda t: (t[0].as_int() or 0, str(t[0])))  # the widest
        if window is None:
            return (r, j)
        k, s, d = window
        return (r + (k - 1) * d * j, j * s)

    def tie(self, inst: Inst, graph: Graph, layer: Layer) -> None:
        node = inst.node
        assert isinstance(node, LayerNode) and node.shares is not None, "a sharing layer"
        other_id = node.shares
        other = graph.node(other_id)
        mapping = dict(layer.ties).get(other.op)
        if other.op == inst.node.op:
            mapping = {name: (name, False) for name in inst.params}
        for mine, (theirs, transposed) in (mapping or {}).items():
            if mine in inst.params:
                inst.tied[mine] = (other_id, theirs, transposed)
                del inst.params[mine]

    def compare(self, inst: Inst, ann: Shape, out: Shape) -> None:
        node = inst.node
        assert node.annotation is not None, "called for an annotated box"
        if ann == out:  # most boxes; a tuple compares its items by identity first
            return
        same = len(ann) == len(out) and all(a == o for a, o in zip(ann, out))
        if (
            not same
            and len(ann) == len(out)
            and all(a == o or a == o.drop_floors() for a, o in zip(ann, out))
        ):
            for a, o in zip(ann, out):
                if a != o:
                    self.assumptions.append(f"{a} is whole (line {node.span.line})")
            same = True
        if not same:
            raise LbdlError(
                f"`{node.op}` gives {fmt_shape(out)}, but the annotation says {fmt_shape(ann)}",
                node.annotation.span,
                hint="fix the annotation, or the hyper-parameters if the annotation is right",
                notes=[
                    Note(
                        f"its input is {inst.inputs[0]}, from {inst.inputs[0].made_by}",
                        inst.inputs[0].span,
                    )
                ]
                if inst.inputs
                else [],
            )

    def check_annotation(self, inst: Inst, out: Shape, env: Env) -> None:
        annotation = inst.node.annotation
        assert annotation is not None, "called for an annotated box"
        ann = tuple(
            self.size(d, env, s, "the annotation")
            for d, s in zip(annotation.dims, annotation.spans)
        )
        label = inst.node.op or "group"
        if len(ann) != len(out) or any(a != o and a != o.drop_floors() for a, o in zip(ann, out)):
            raise LbdlError(
                f"`{label}` gives {fmt_shape(out)}, but the annotation says {fmt_shape(ann)}",
                annotation.span,
                hint="fix the annotation, or the arguments if the annotation is right",
            )

    def shape_error(self, inst: Inst, exc: ShapeFailure) -> LbdlError:
        node = inst.node
        notes = [
            Note(
                f"input {i + 1} is {t}, from {t.made_by}"
                if len(inst.inputs) > 1
                else f"its input is {t}, from {t.made_by}",
                t.span,
            )
            for i, t in enumerate(inst.inputs)
        ]
        span = node.span
        if exc.hparam:
            span = node.span  # the box; the message names the hyper-parameter
        # the location already gives the line; the message names the layer, once
        named = exc.message.startswith(f"`{node.op}`")
        message = exc.message if named else f"`{node.op}`: {exc.message}"
        return LbdlError(message, span, exc.hint, notes)

    # -- composites -----------------------------------------------------------------------------
    def call(self, inst: CallInst, env: Env) -> Tensor:
        node = inst.node
        assert isinstance(node, CallNode), "`box` dispatches calls here"
        block = self.program.blocks[node.op]
        if len(self.stack) >= MAX_CALL_DEPTH:
            raise LbdlError(f"block calls nested deeper than {MAX_CALL_DEPTH}", node.span)
        benv = self.bind_block(inst, block, env)
        key: CallKey = (
            node.op,
            tuple([t.shape for t in inst.inputs]),
            tuple(sorted([(k, _call_value(v)) for k, v in benv.items()])),
        )
        known = self.memo.get(key)
        if known is not None:
            body, result, bindings, boxes = known
            self.count_boxes(boxes, node.span)
        else:
            self.stack.append((f"in block `{node.op}`, used here", node.span))
            before = self.layers_seen
            try:
                body, result, _ = self.graph(block.body, list(inst.inputs), benv)
            finally:
                self.stack.pop()
            bindings = benv
            self.memo[key] = (body, result, bindings, self.layers_seen - before)
        inst.body, inst.bindings = body, bindings
        if result is None:
            raise _poison()
        return Tensor(result.shape, result.dtype, result.vocab, _where(node), node.span, result.rf)

    def bind_block(self, inst: Inst, block: Block, env: Env) -> Env:
        """The block's symbols at this use: arguments, then the input patterns, then defaults.

        Defaults come last so that they may use the input's sizes (``F=4D`` on ``T×D``).
        """
        node = inst.node
        assert isinstance(node, CallNode), "a block is bound at its call"
        benv: Env = {}
        args = dict(node.hparams)
        for p in block.params:
            if p.name in args:
                benv[p.name] = _subs(args[p.name], env)
        for sig, t in zip(block.inputs, inst.inputs):
            if len(sig.dims) != len(t.shape):
                raise LbdlError(
                    f"block `{block.name}` takes a {'×'.join(sig.texts)} input, got {t}",
                    node.span,
                    notes=[
                        Note(f"its input is {t}, from {t.made_by}", t.span),
                        Note("the block is defined here", block.span),
                    ],
                )
            for pat, text, actual in zip(sig.dims, sig.texts, t.shape):
                self.match(pat, text, actual, benv, block, node, t)
            self.match_type(sig, t, benv, block, node)
        for p in block.params:
            if p.name not in benv:
                benv[p.name] = _subs(p.default, benv)
        return benv

    def match_type(self, sig: TensorSig, t: Tensor, benv: Env, block: Block, node: Node) -> None:
        """A typed pattern (`M: T×T bool`, `X: T int<V>`) takes only tensors of its type."""
        if sig.dtype is None:
            return
        if sig.dtype != t.dtype:
            what = f"`{sig.name}`" if sig.name else "its input"
            raise LbdlError(
                f"block `{block.name}` takes a {sig.dtype} tensor as {what}, got a {t.dtype} "
                f"tensor of shape {t}",
                node.span,
                hint="masks are declared `bool` (`input M: T×T bool`), tokens `int<V>`",
                notes=[
                    Note(f"it is made by {t.made_by}", t.span),
                    Note("the block is defined here", block.span),
                ],
            )
        if sig.vocab is not None and t.vocab is not None:
            self.match(sig.vocab, str(sig.vocab), t.vocab, benv, block, node, t)

    def match(
        self, pat: Expr, text: str, actual: Expr, benv: Env, block: Block, node: Node, t: Tensor
    ) -> None:
        name = pat.symbol_name()
        if name is not None and name not in benv:  # `D` of `on T×D`: most patterns, bound as is
            benv[name] = actual
            return
        exprs = {k: v for k, v in benv.items() if isinstance(v, Expr)}
        value = pat.subs(exprs)
        unbound = sorted(s for s in value.free_symbols if s not in benv)
        if len(unbound) == 1 and len(value.terms) <= 2:
            s = unbound[0]
            coef = value.subs({s: 1}) - value.subs({s: 0})
            rest = value.subs({s: 0})
            if coef.is_const and coef.const_value != 0 and not rest.free_symbols & {s}:
                solved = (actual - rest) / coef.const_value
                benv[s] = solved
                value = pat.subs({k: v for k, v in benv.items() if isinstance(v, Expr)})
        if value != actual:
            raise LbdlError(
                f"block `{block.name}` needs `{text}` = {value} here, but the input has {actual}",
                node.span,
                notes=[
                    Note(f"its input is {t}, from {t.made_by}", t.span),
                    Note("the block is defined here", block.span),
                ],
            )

    def repeat(self, inst: RepeatInst, env: Env) -> Tensor:
        node = inst.node
        assert isinstance(node, RepeatNode), "`box` dispatches ×N groups here"
        count = _subs(node.count, env)
        n = count.as_int()
        x, captures = inst.inputs[0], inst.inputs[1:]
        if n is None and count.is_const:
            raise LbdlError(f"×{count} is not a whole number", node.count_span)
        if n is not None and n < 0:
            raise LbdlError(f"×{n} is a negative number of copies", node.count_span)
        if n is not None and n > MAX_REPEAT:  # a literal count is refused by build already
            raise LbdlError(
                f"×{node.count} is {n:,} copies, more than the {MAX_REPEAT:,} a spec may repeat",
                node.count_span,
                hint="docs/language.md, Limits",
            )
        copies: list[Copies] = []
        if n == 0:  # ×(L-1) with L=1: the group is not there
            inst.copies, inst.hp = [], {"count": count}
            return x
        seen_in = x
        done = 0
        if node.index is not None:  # the index stays a symbol: each copy's values follow it
            env = env | {node.index: Expr({((node.index, 1),): Fraction(1)})}
        while n is None or done < n:
            before = self.layers_seen
            scope = {node.index: (done, None if n is None else n - 1)} if node.index else {}
            indices = _INDICES.set(_INDICES.get() | scope.keys())
            ranges = _RANGES.set((*_RANGES.get(), *scope.items()))
            try:
                body, result, _ = self.graph(node.body, [seen_in, *captures], env)
            finally:
                _INDICES.reset(indices)
                _RANGES.reset(ranges)
            if result is None:
                inst.copies = copies + [Copies(body, Expr.lift(1))]
                raise _poison()
            if result.shape == seen_in.shape:
                remaining = (count - done) if n is None else Expr.lift(n - done)
                if n is not None:  # the copies after this one, identical to it
                    self.count_boxes((n - done - 1) * (self.layers_seen - before), node.span)
                copies.append(Copies(body, remaining))
                seen_in = dataclasses.replace(result, rf=_grow(seen_in.rf, result.rf, remaining))
                break
            if n is None:
                raise LbdlError(
                    f"×{count} repeats a group that changes the shape ({seen_in} → {result}), "
                    f"so {count} must have a value",
                    node.count_span,
                    hint=f"give it one with --set {count}=...",
                )
            copies.append(Copies(body, Expr.lift(1)))
            seen_in = result
            done += 1
            if len(copies) > 10_000:
                raise LbdlError(
                    "a ×N group changes its shape in more than 10,000 copies", node.count_span
                )
        inst.copies = copies
        inst.hp = {"count": count}
        return Tensor(
            seen_in.shape, seen_in.dtype, seen_in.vocab, _where(node), node.span, seen_in.rf
        )

    def experts(self, inst: ExpertsInst, env: Env) -> Tensor:
        """A mixture of experts: the body is checked once, on the vector of one token."""
        node = inst.node
        assert isinstance(node, ExpertsNode), "`box` dispatches mixtures of experts here"
        x = inst.inputs[0]
        e, k = (
            self.whole(node, name, _subs(v, env))
            for name, v in (("e", node.experts), ("k", node.k))
        )
        if k > e:
            raise LbdlError(f"k={k} experts per token, but there are only e={e}", node.where("k"))
        d = x.shape[-1]
        tokens = numel(x.shape[:-1])
        inst.hp = {"e": e, "k": k, "cap": node.capacity}
        token = Tensor((d,), x.dtype, x.vocab, "the token an expert sees", node.span)
        self.stack.append((f"in an expert, which sees one token ({d}) of the {x} input", node.span))
        try:
            body, result, _ = self.graph(node.body, [token], env)
        finally:
            self.stack.pop()
        inst.copies = [Copies(body, Expr.lift(e), "experts", tokens * k, "expert")]
        if result is None:
            raise _poison()
        kept = _stateful(body)
        if kept is not None:
            raise LbdlError(
                f"an expert cannot keep state, and `{kept.node.op or kept.kind}` does",
                kept.node.span,
                hint="each token visits only k experts, so a running statistic would be "
                "updated by a different subset of the batch in every expert; use a "
                "normalisation without state (layernorm, rmsnorm)",
                notes=[Note("in this mixture of experts", node.span)],
            )
        if len(result.shape) != 1:
            raise LbdlError(
                f"an expert must give one vector per token, but this one gives {result}",
                node.span,
                hint="end the expert's body with a box that gives a vector (fc, reshape)",
                notes=[Note(f"its output is made by {result.made_by}", result.span)],
            )
        inst.params = {"router": PSpec((d, Expr.lift(e)), FanIn(d), ("embed", "experts"))}
        inst.state = {"aux": PSpec((), ZEROS, ())}
        inst.macs = tokens * d * e
        shape = (*x.shape[:-1], result.shape[0])
        return Tensor(shape, result.dtype, result.vocab, _where(node), node.span)

    @staticmethod
    def whole(node: ExpertsNode, name: str, value: Expr) -> int:
        """``e`` or ``k`` of a mixture: a whole number ≥ 1, known when the model is checked."""
        n = value.as_int()
        if n is None or n < 1:
            raise LbdlError(
                f"`{name}` of `experts` must be a whole number ≥ 1, here it is {value}",
                node.where(name),
                hint="the router's width and the top-k need a value: give one with --set"
                if n is None and not value.is_const
                else None,
            )
        if n > MAX_REPEAT:
            raise LbdlError(
                f"e={n:,} experts is more than the {MAX_REPEAT:,} a spec may hold", node.where(name)
            )
        return n

    def scan(self, inst: ScanInst, env: Env) -> Tensor:
        """A recurrence: the step is checked once, on x_t (the input less its leading axis)
        and the carry; it must give the carry's shape back."""
        node = inst.node
        assert isinstance(node, ScanNode), "`box` dispatches scans here"
        x = inst.inputs[0]
        if len(x.shape) < 2:
            raise LbdlError(
                f"`scan` runs along the leading axis of a sequence, but its input is {x}",
                node.span,
                hint="give it a T×D sequence (a step then sees one D vector)",
                notes=[Note(f"the input is made by {x.made_by}", x.span)] if x.span else [],
            )
        ann = node.carry_shape
        dims = tuple(self.size(d, env, s, "the carry's size") for d, s in zip(ann.dims, ann.spans))
        carry = Tensor(dims, "float", None, f"the carry `{node.carry}`", ann.span)
        ports = inst.inputs[1:]
        if node.init:
            start, ports = ports[0], ports[1:]
            if start.shape != dims:
                raise LbdlError(
                    f"the carry `{node.carry}` is {carry} but starts from {start}",
                    ann.span,
                    hint=f"start it from a tensor of shape {carry}, or leave `= ...` out to "
                    "start from zeros",
                    notes=[Note(f"the start is made by {start.made_by}", start.span)]
                    if start.span
                    else [],
                )
        xt = Tensor(x.shape[1:], x.dtype, x.vocab, "one step of the scan's input", node.span)
        self.stack.append((f"in a step of the scan over {x.shape[0]}, on {xt}", node.span))
        try:
            body, result, _ = self.graph(node.body, [xt, carry, *ports], env)
        finally:
            self.stack.pop()
        inst.body, inst.steps = body, x.shape[0]
        inst.hp = {"steps": x.shape[0], "carry": node.carry}
        if result is None:
            raise _poison()
        kept = _stateful(body)
        if kept is not None:
            raise LbdlError(
                f"a scan's step cannot keep state, and `{kept.node.op or kept.kind}` does",
                kept.node.span,
                hint="use a normalisation without state (layernorm, rmsnorm) inside the step",
                notes=[Note("in this scan", node.span)],
            )
        if result.shape != dims:
            raise LbdlError(
                f"a step of the scan must give the next carry `{node.carry}`, {carry}, "
                f"but it gives {result}",
                node.span,
                hint=f"end the step with a box that gives {carry} (e.g. `fc out=...`), or "
                "declare the carry with the shape the step gives",
                notes=[
                    Note(f"the step ends with {result}, from {result.made_by}", result.span),
                    Note(f"the carry is declared {carry} here", ann.span),
                ],
            )
        return Tensor((x.shape[0], *dims), result.dtype, None, _where(node), node.span)

    def residual(self, inst: ResidualInst, env: Env) -> Tensor:
        node = inst.node
        assert isinstance(node, ResidualNode), "`box` dispatches residual groups here"
        x = inst.inputs[0]
        nb = len(node.body.inputs) - 1
        body, result, _ = self.graph(node.body, [x, *inst.inputs[1 : 1 + nb]], env)
        inst.body = body
        added = x
        if node.shortcut is not None:
            short, sresult, _ = self.graph(node.shortcut, [x, *inst.inputs[1 + nb :]], env)
            inst.shortcut = short
            if sresult is None:
                raise _poison()
            added = sresult
        if result is None:
            raise _poison()
        if result.shape != added.shape:
            what = "the shortcut's output" if node.shortcut is not None else "the group's input"
            raise LbdlError(
                f"the residual group gives {result}, which cannot be added to {what}, {added}",
                node.span,
                hint="add a `shortcut:` path that changes the shape (conv-2d k=1 s=S, batchnorm)"
                if node.shortcut is None
                else "make both paths end with the same shape",
                notes=[
                    Note(f"the main path ends with {result}, from {result.made_by}", result.span)
                ],
            )
        rf = result.rf
        return Tensor(result.shape, result.dtype, result.vocab, _where(node), node.span, rf)


def _stateful(insts: list[Inst]) -> Inst | None:
    """The first box that keeps state, inside ``insts`` (block bodies and frames included)."""
    for inst in insts:
        if inst.state:
            return inst
        found = _stateful([i for part in inst.parts() for i in part])
        if found is not None:
            return found
    return None


@dataclasses.dataclass(frozen=True)
class _Rules:
    """What a layer's rules gave for one box: the same for every box with the same entry,
    hyper-parameters and inputs, which a model repeats many times (every `relu` on 64×56×56)."""

    attrs: Any
    out: Shape
    params: dict[str, PSpec]
    state: dict[str, PSpec]
    macs: Expr
    dtype: str  # the output's type and range (`_out_type`)
    vocab: Expr | None
    window: Window  # the entry's window, where `Checker.rf` reads it


def _rules_key(op: str, hp: dict[str, Any], inputs: list[Tensor]) -> Hashable | None:
    """All a layer's rules read of a box (`Ctx`: the entry, the hyper-parameters, the inputs'
    shapes, types and ranges), as a key; None if a value has no exact key."""
    values = tuple(hp.values())
    types = tuple(map(type, values))
    if not (
        _PLAIN.issuperset(types) or (_PLAIN_FLOAT.issuperset(types) and 0.0 not in values)
    ):  # a float zero (0.0 and -0.0 are equal), a tuple of values, a value of another type
        try:
            values, types = tuple([_exact(v) for v in values]), ()
        except TypeError:
            return None
    return op, tuple(hp), values, types, tuple([(t.shape, t.dtype, t.vocab) for t in inputs])


_PLAIN = frozenset({type(None), Expr, str, bool, int})
"""Types whose values, with the type beside each, are exact keys: of these only ``True`` and
``1`` (or ``False`` and ``0``) are equal, and their types tell them apart. Keys of values of
other types are `_exact`'s (their types then left out of the key: ``()``)."""

_PLAIN_FLOAT = _PLAIN | {float}
"""The same with floats, where no value is zero: two floats other than ``0.0`` and ``-0.0``
are equal only if they are the same number (a NaN matches only the very same object)."""


_AS_WRITTEN = (bool, str, float)
"""The types of hyper-parameter values that read nothing of their use (`Checker.hparams`)."""


def _exact(value: Any) -> Hashable:
    """A key equal only for values that no rule can tell apart: ``1``, ``1.0`` and ``True``
    compare equal in Python, and so do ``0.0`` and ``-0.0``, which a rule may print."""
    if value is None or isinstance(value, Expr):
        return value
    if isinstance(value, tuple):
        return tuple(_exact(v) for v in value)
    if isinstance(value, (bool, int, str)):
        return type(value).__name__, value
    if isinstance(value, float):
        return "float", repr(value)
    raise TypeError(f"no exact key for {type(value).__name__}")


def _whole_sizes(dims: tuple[Expr, ...]) -> bool:
    """Whether every size is a whole number within bounds, which `Checker.size` gives back
    as it is (most annotations): then the sizes are taken without a call each."""
    for d in dims:
        v = d.as_int()
        if v is None or not 0 < v <= MAX_DIM:
            return False
    return True


def _call_value(value: Any) -> Hashable:
    """A block symbol's value in the key of `Checker.memo`: a size is its own key (no text
    made for it, as `repr` did), other values `_exact`'s, or their `repr`."""
    if type(value) is Expr:
        return value
    try:
        return _exact(value)
    except TypeError:
        return "repr", repr(value)


def _out_type(layer: Layer, ctx: Ctx, inputs: list[Tensor]) -> tuple[str, Expr | None]:
    """The output's type and range: the entry's (a constant index is whole numbers, a band a
    mask), the input's for a box that keeps it (tokens stay tokens), else float."""
    if layer.out_type is not None:
        return layer.out_type(ctx)
    if layer.keeps_dtype:
        return inputs[0].dtype, inputs[0].vocab
    return "float", None


def _grow(before: RF, after: RF, copies: Expr) -> RF:
    """The receptive field after ``copies`` identical copies, from what one copy does to it."""
    if before is None or after is None or before[1] != after[1]:
        return after
    return (before[0] + (after[0] - before[0]) * copies, after[1])


def _poison() -> LbdlError:
    return LbdlError(diagnostics=[])


@fewer_collections()
def check(program: Program, env: dict[str, Any], overridden: bool = False) -> Checked:
    """Check ``program`` with the model parameters ``env``; failures end up in `diagnostics`.

    ``overridden`` says that some model parameter was given a value other than its default;
    count assertions (`assert params == 25_557_032`) describe the spec as written and are then
    skipped, while shape assertions are still checked.
    """
    checker = Checker(program, env)
    graph = program.model.body
    root, _, outs = checker.graph(graph, [], env)
    inputs: dict[str, Tensor] = {}
    for i in graph.inputs:
        node, t = graph.node(i), outs.get(i)
        assert isinstance(node, InputNode) and node.name is not None, "a model's inputs are named"
        if t is not None:
            inputs[node.name] = t
    outputs = {name: outs.get(nid) for name, nid in graph.outputs}
    totals = sum_totals(root)
    checked = Checked(
        program,
        env,
        root,
        inputs,
        outputs,
        totals,
        checker.diagnostics,
        sorted(set(checker.assumptions)),
        sorted({s for t in inputs.values() for d in t.shape for s in d.free_symbols}),
    )
    if checker.diagnostics:
        return checked
    _check_asserts(checked, outs, checker, overridden)  # reports into checked.diagnostics
    return checked


_OPS = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__, "==": int.__eq__}


def _check_asserts(checked: Checked, outs: Outs, checker: Checker, overridden: bool) -> None:
    for item in checked.program.model.body.asserts:
        match item:
            case CountAssert(span=span) if overridden:
                checked.assumptions.append(
                    f"count assertion of line {span.line} not checked: "
                    "model parameters were overridden"
                )
            case CountAssert():
                _check_count(checked, item, checker)
            case ShapeAssert(node=nid, annotation=ann, name=name):
                t = outs.get(nid)
                if t is None:
                    continue
                want = tuple(_subs(d, checked.env) for d in ann.dims)
                if want != t.shape:
                    checker.report(
                        LbdlError(
                            f"assertion failed: `{name}` has shape {t}, not {fmt_shape(want)}",
                            ann.span,
                            notes=[Note(f"it is made by {t.made_by}", t.span)],
                        )
                    )


def _check_count(checked: Checked, item: CountAssert, checker: Checker) -> None:
    total = checked.totals[item.quantity]
    value = total.as_int()
    if value is None:
        checker.report(
            LbdlError(
                f"`{item.quantity}` is {total}, which depends on "
                f"{', '.join(sorted(total.free_symbols))}",
                item.span,
                hint="give the symbols values with --set to check this assertion",
            )
        )
    elif not _OPS[item.op](value, item.bound):
        checker.report(
            LbdlError(
                f"assertion failed: {item.quantity} = {value:,}, "
                f"which is not {item.op} {item.bound:,}",
                item.span,
            )
        )


__all__ = ["Checked", "Inst", "Tensor", "check", "numel"]

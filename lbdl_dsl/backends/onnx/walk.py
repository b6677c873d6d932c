"""The walk from a checked instance tree to ONNX nodes: one lowering per box, found in `ONNX`.

Boxes are visited in each graph's order, as the JAX backend visits them. A layer is lowered by
its entry in the table (`lowering.ONNX`, one module per family); a composite box (`self-att`,
`ffw`) by its declared inside, inline; a residual group by its body, its shortcut and an
``Add`` named by the group's path; a ×N group by its copies in turn (``repeat_0/3/...``); a
block call by an ONNX local function named by the block, called once per use with that use's
parameters, so that Netron shows a GPT-2 as its blocks, each opened on a click (or inline,
with ``functions=False``). Nodes are named by the boxes' paths (`compiler/paths.py`), and
within a block's function by the path inside the block. Parameters are read from the JAX
model's, by the same paths: a copy's arrays are its slice of its group's stack.

A box with no ONNX form is recorded (`Walk.unsupported`) and the walk goes on, so that every
such box is named at once; its value is then a placeholder, and the graph is not written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import onnx
from onnx import helper

from lbdl_dsl.backends.jax import storage
from lbdl_dsl.backends.onnx.emit import Emit, Scope, Unsupported
from lbdl_dsl.backends.onnx.lowering import ONNX
from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.graph import (
    Graph,
    Program,
    RepeatNode,
    ResidualNode,
)
from lbdl_dsl.compiler.instance import (
    CallInst,
    ExpertsInst,
    Inst,
    LayerInst,
    RepeatInst,
    ResidualInst,
    ScanInst,
)
from lbdl_dsl.core.errors import Span
from lbdl_dsl.core.layers import lookup

DOMAIN = "lbdl"  # the domain of the blocks' local functions


@dataclass(frozen=True)
class Where:
    """Where a box sits: its name's prefix in the graph being written, and its parameters'
    prefix and copy index in the JAX model's arrays (a stacked group's copy is a slice)."""

    names: str = ""
    params: str = ""
    index: tuple[int, ...] = ()
    written: Span | None = None  # inside a composite box: the line the user wrote it at
    outer: str = ""  # inside a block's function: the call's path, which `names` goes on from

    def inside(self, step: str, written: Span | None = None) -> Where:
        at = self.written or written
        return replace(
            self, names=f"{self.names}{step}/", params=f"{self.params}{step}/", written=at
        )


@dataclass(frozen=True)
class Refused:
    """A box the backend has no ONNX form for."""

    path: str
    op: str
    reason: str
    span: Span | None


@dataclass
class Walk:
    """The walk of one model; what it made (functions) and what it could not (unsupported)."""

    program: Program
    arrays: Mapping[str, np.ndarray]  # the JAX model's parameters and state, by path
    fold: bool = False
    functions: bool = True
    made: dict[bytes, onnx.FunctionProto] = field(default_factory=dict)
    unsupported: list[Refused] = field(default_factory=list)

    # -- one graph ---------------------------------------------------------------------------
    def values(
        self,
        scope: Scope,
        insts: list[Inst],
        graph: Graph,
        env: dict[str, str],
        where: Where,
        keep: frozenset[str] = frozenset(),
    ) -> dict[str, str]:
        """Every node's value in one graph; ``env`` gives its inputs' values."""
        by_id = {inst.id: inst for inst in insts}
        values = dict(env)
        for nid in graph.order():
            inst = by_id.get(nid)
            if inst is None:
                continue
            ins = [values[u] for u in graph.preds(nid)]
            value = values[nid] = self.box(scope, inst, ins, where)
            made = scope.made.get(value)
            if made is not None:  # a box that passes its input on leaves it unfoldable
                mine = made.node.name.startswith(where.names + inst.id)
                readers = len(graph.out_edges(nid)) + (nid == graph.result) + (nid in keep)
                made.readers = readers if mine else 2
        return values

    def scope(
        self, scope: Scope, insts: list[Inst], graph: Graph, ins: list[str], where: Where
    ) -> str:
        env = dict(zip(graph.inputs, ins, strict=False))
        assert graph.result is not None, "a body has a result"
        return self.values(scope, insts, graph, env, where)[graph.result]

    def box(self, scope: Scope, inst: Inst, ins: list[str], where: Where) -> str:
        match inst:
            case LayerInst():
                return self.layer(scope, inst, ins, where)
            case CallInst():
                return self.call(scope, inst, ins, where)
            case ResidualInst():
                return self.residual(scope, inst, ins, where)
            case RepeatInst():
                return self.repeat(scope, inst, ins, where)
            case ExpertsInst():
                return self.refuse(scope, inst, where, "a mixture of experts' token dispatch")
            case ScanInst():
                return self.refuse(scope, inst, where, "a `scan` group's loop over the sequence")
        raise AssertionError(inst.node)

    def refuse(self, scope: Scope, inst: Inst, where: Where, reason: str) -> str:
        op = inst.node.op or inst.kind
        span = where.written or inst.node.span
        path = where.outer + where.names + inst.id
        self.unsupported.append(Refused(path, op, reason, span))
        return scope.fresh(f"{where.names}{inst.id}")  # a placeholder: nothing is written

    # -- boxes -------------------------------------------------------------------------------
    def layer(self, scope: Scope, inst: LayerInst, ins: list[str], where: Where) -> str:
        if inst.inside is not None:  # a composite: its primitives, inline
            inner = where.inside(inst.id, inst.node.span)
            return self.scope(scope, inst.body, inst.inside.body, ins, inner)
        layer = lookup(inst.node.op)
        assert layer is not None, "the checker knows every box"
        lowering = ONNX.get(layer.name)
        if lowering is None:
            return self.refuse(scope, inst, where, "no ONNX operator")
        emit = Emit(
            scope, inst, ins, where.names + inst.id, self.reader(scope, inst, where), self.fold
        )
        try:
            return lowering(emit)
        except Unsupported as why:
            return self.refuse(scope, inst, where, str(why))

    def reader(
        self, scope: Scope, inst: LayerInst, where: Where
    ) -> Callable[[str], tuple[str, np.ndarray, bool]]:
        """``param(name)`` for one box: its value's name in ``scope``, its array, and whether
        the box uses it transposed (a tied parameter)."""

        def param(name: str) -> tuple[str, np.ndarray, bool]:
            owner, theirs, transposed = inst.tied.get(name, (inst.id, name, False))
            value = f"{where.names}{owner}/{theirs}"
            array = np.asarray(self.arrays[f"{where.params}{owner}/{theirs}"])
            for i in where.index:
                array = array[i]
            scope.taken.add(value)
            return value, array, transposed

        return param

    def residual(self, scope: Scope, inst: ResidualInst, ins: list[str], where: Where) -> str:
        node = inst.node
        assert isinstance(node, ResidualNode)
        inner = where.inside(inst.id)
        nb = len(node.body.inputs)
        main = self.scope(scope, inst.body, node.body, [ins[0], *ins[1:nb]], inner)
        added = ins[0]
        if node.shortcut is not None:
            short = inner.inside("shortcut")
            added = self.scope(scope, inst.shortcut, node.shortcut, [ins[0], *ins[nb:]], short)
        name = scope.fresh(where.names + inst.id)
        scope.add(helper.make_node("Add", [main, added], [name], name=name))
        return name

    def repeat(self, scope: Scope, inst: RepeatInst, ins: list[str], where: Where) -> str:
        """The copies in turn, each named by its number; a copy's arrays are its own (a
        group kept apart) or its slice of the group's stack."""
        node = inst.node
        assert isinstance(node, RepeatNode)
        here = f"{inst.id}/"
        x = ins[0]
        if not where.index and storage.per_copy(inst):
            for first, count, copies in paths.numbered(inst):
                for k in range(first, first + count):
                    at = replace(
                        where, names=f"{where.names}{here}{k}/", params=f"{where.params}{here}{k}/"
                    )
                    x = self.scope(scope, copies.body, node.body, [x, *ins[1:]], at)
            return x
        number = 0
        for step, copies in inst.copy_prefixes():
            n = copies.count.as_int()
            if n is None:
                return self.refuse(scope, inst, where, f"a ×{copies.count} left open")
            for k in range(n):
                names = f"{where.names}{here}{number}/"
                at = replace(
                    where,
                    names=names,
                    params=f"{where.params}{here}{step}",
                    index=(*where.index, k),
                )
                x = self.scope(scope, copies.body, node.body, [x, *ins[1:]], at)
                number += 1
        return x

    def call(self, scope: Scope, inst: CallInst, ins: list[str], where: Where) -> str:
        """A block call: a call of the block's function (one per distinct body), its
        parameters passed by the caller, or the body inline without functions."""
        block = self.program.blocks[inst.node.op]
        inner = where.inside(inst.id)
        if not self.functions:
            return self.scope(scope, inst.body, block.body, ins, inner)
        body = Scope(function=True)
        inputs = [body.fresh(_ascii(block.body.node(nid).name or "x")) for nid in block.body.inputs]
        at = replace(inner, names="", outer=where.outer + inner.names)
        result = self.scope(body, inst.body, block.body, inputs, at)
        if result in inputs or result not in body.made:  # the body passes an input through
            out = body.fresh("y")
            body.add(helper.make_node("Identity", [result], [out], name=out))
            result = out
        weights = list(body.weights)
        fn = self.function(_ascii(block.name), body, [*inputs, *weights], result)
        for w in weights:
            scope.weights.setdefault(f"{inner.names}{w}", body.weights[w])
            scope.taken.add(f"{inner.names}{w}")
        name = scope.fresh(where.names + inst.id)
        args = [*ins, *(f"{inner.names}{w}" for w in weights)]
        scope.add(helper.make_node(fn, args, [name], name=name, domain=DOMAIN))
        return name

    def function(self, name: str, body: Scope, inputs: list[str], output: str) -> str:
        """The function of one block body: the one already made for the same body, or a new
        one, named by the block (``dresblock``, then ``dresblock_1`` for a second body)."""
        graph = helper.make_graph(body.nodes, "body", [], [])
        key = name.encode() + graph.SerializeToString() + "|".join([*inputs, output]).encode()
        if key not in self.made:
            names = {f.name for f in self.made.values()}
            fresh, n = name, 0
            while fresh in names:
                n += 1
                fresh = f"{name}_{n}"
            opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)]
            self.made[key] = helper.make_function(
                DOMAIN, fresh, inputs, [output], body.nodes, opsets
            )
        return self.made[key].name


OPSET = 23  # Attention, RMSNormalization; onnxruntime 1.22 on runs it


def _ascii(name: str) -> str:
    from lbdl_dsl.backends.onnx.names import ascii_name

    return ascii_name(name)

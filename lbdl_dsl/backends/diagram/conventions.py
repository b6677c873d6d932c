"""A network's conventions: a hyper-parameter written on every box of a kind, said once.

ResNet-50 writes ``bias=false`` on each of its 53 convolutions because each feeds a batchnorm;
DCGAN's and DenseNet's convolutions carry no bias at all. Written in blue beside every box it
would bury what differs from box to box (``k=1 s=2``), and the book draws none of it. Such a value
is the figure's convention, written once under the figure (``bias=False on every conv-2d``), when
the spec writes it on every box of that kind (at least two), or on every box of that kind that
feeds the same kind of box (``bias=False on conv-2d before batchnorm``). Only on/off
hyper-parameters can be conventions: sizes such as ``k=3`` are what the book writes on every
box. Values given through a block parameter (``bias=bias``) differ from use to use and are never
a convention.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lbdl_dsl.backends.diagram.labels import book_name
from lbdl_dsl.boxtext import fmt_value
from lbdl_dsl.compiler.graph import Block, Graph, Node, ParamRef, RepeatNode, ResidualNode
from lbdl_dsl.core.layers import lookup

_MIN_BOXES = 2


@dataclass
class Conventions:
    """Which written hyper-parameters each box leaves to the note under the figure."""

    hidden: dict[int, frozenset[str]] = field(default_factory=dict)  # id(node) → keys
    notes: list[str] = field(default_factory=list)

    def hide(self, node: Node) -> frozenset[str]:
        return self.hidden.get(id(node), frozenset())


@dataclass(frozen=True)
class _Use:
    node: Node
    next_op: str  # the op of the one layer that reads it, or ""


def _uses(roots: Iterable[Graph], blocks: dict[str, Block]) -> list[_Use]:
    """Every layer box of ``roots``, of the groups inside them and of the blocks they call
    (each block once), with the box it feeds."""
    out: list[_Use] = []
    seen: set[str] = set()
    for graph in roots:
        _collect_uses(graph, blocks, seen, out)
    return out


def _collect_uses(graph: Graph, blocks: dict[str, Block], seen: set[str], out: list[_Use]) -> None:
    # At module level, not nested in `_uses`: a nested function that calls itself is a
    # reference cycle that keeps what it captures alive until the cycle collector runs.
    for node in graph.nodes():
        if node.kind == "layer":
            readers = [graph.node(v) for v in graph.successors(node.id)]
            next_op = readers[0].op if len(readers) == 1 and readers[0].kind == "layer" else ""
            out.append(_Use(node, next_op))
        for sub in _subgraphs(node):
            _collect_uses(sub, blocks, seen, out)
        if node.kind == "call" and node.op in blocks and node.op not in seen:
            seen.add(node.op)
            _collect_uses(blocks[node.op].body, blocks, seen, out)


def _subgraphs(node: Node) -> list[Graph]:
    """The graphs a group holds: a frame's body, a residual's body and shortcut."""
    if isinstance(node, RepeatNode):
        return [node.body]
    if isinstance(node, ResidualNode):
        return [node.body] + ([node.shortcut] if node.shortcut is not None else [])
    return []


def _written(node: Node) -> dict[str, str]:
    return {
        k: fmt_value(v)
        for k, v in getattr(node, "hparams", ())
        if k in getattr(node, "explicit", ()) and not isinstance(v, ParamRef) and v is not None
    }


def find(root: Graph, blocks: dict[str, Block]) -> Conventions:
    """The conventions of the figure of ``root`` (a model's body or a block's), the blocks it
    calls included."""
    by_op: dict[str, list[_Use]] = {}
    for use in _uses([root], blocks):
        by_op.setdefault(use.node.op, []).append(use)
    out = Conventions()
    for op in sorted(by_op):
        uses = by_op[op]
        keys = sorted({k for u in uses for k in _written(u.node) if _is_flag(op, k)})
        for key in keys:
            _convention(out, op, key, uses)
    return out


def _convention(out: Conventions, op: str, key: str, uses: list[_Use]) -> None:
    """Record ``key`` as a convention of ``op`` if every box, or every box before one kind of
    box, writes it with one value."""
    values = {fmt_value(v) for u in uses for k, v in getattr(u.node, "hparams", ()) if k == key}
    written = [u for u in uses if key in _written(u.node)]
    value = _written(written[0].node)[key]
    if len(uses) >= _MIN_BOXES and len(written) == len(uses) and values == {value}:
        _hide(out, written, key)
        out.notes.append(f"{key}={value} on every {book_name(op)}")
        return
    for follower in sorted({u.next_op for u in written if u.next_op}):
        group = [u for u in uses if u.next_op == follower]
        same = all(_written(u.node).get(key) == value for u in group)
        if len(group) >= _MIN_BOXES and same:
            _hide(out, group, key)
            out.notes.append(f"{key}={value} on {book_name(op)} before {book_name(follower)}")
            return


def _is_flag(op: str, key: str) -> bool:
    """Only on/off hyper-parameters (``bias``) say how a network is built throughout; sizes
    (``k=3``) are what the book writes on every box, however often they repeat."""
    layer = lookup(op)
    hp = layer.hparam(key) if layer is not None else None
    return hp is not None and hp.kind == "bool"


def _hide(out: Conventions, uses: list[_Use], key: str) -> None:
    for u in uses:
        out.hidden[id(u.node)] = out.hidden.get(id(u.node), frozenset()) | {key}

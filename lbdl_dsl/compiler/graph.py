"""The graph: what every stage after the parser reads.

A `Graph` is a directed multigraph whose nodes are layer applications and whose edges are
tensors, each edge carrying the input ``port`` it feeds (concat and cross-attention care about
order; ``x + x`` needs two parallel edges). It keeps its nodes and edges in plain dicts, which is
all the stages need, and `Graph.g` gives the same graph as a networkx ``MultiDiGraph`` (made on
first use, frozen) for analysis: importing networkx alone costs more than a whole ``--check``
of ResNet-50 is allowed, so no stage imports it. Composite boxes keep their
inside as hierarchy instead of being flattened, so the diagram can frame them and the JAX backend
can scan them:

- ``call``: a use of a block definition, whose body lives once in `Program.blocks`;
- ``repeat``: a ×N frame, whose `body` graph is one copy;
- ``residual``: a group whose input is added to its output, with an optional `shortcut` graph;
- ``experts``: a mixture of experts, whose `body` graph is one expert, applied to one token.

A body graph receives its inputs through ``input`` nodes (port 0 is the tensor flowing in, later
ports the tensors it captures by name from around it) and returns the output of its `result` node.
Nothing enforces the invariants as a graph is built, so `verify` checks them; tests run it after
every stage.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Union

from lbdl_dsl.core.errors import Span
from lbdl_dsl.core.formula import Formula
from lbdl_dsl.core.symbolic import Expr

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class ParamRef:
    """A hyper-parameter given by the name of a block or model parameter (``causal=causal``)."""

    name: str
    span: Span

    def __str__(self) -> str:
        return self.name


HValue = Union[Expr, tuple["HValue", ...], float, bool, str, ParamRef, Formula, None]


@dataclass(frozen=True)
class Annotation:
    """The shape written at the right of a box: a check, and the source of a left-out size."""

    dims: tuple[Expr, ...]
    texts: tuple[str, ...]
    spans: tuple[Span, ...]
    span: Span

    @property
    def text(self) -> str:
        return "×".join(self.texts)


@dataclass(frozen=True, kw_only=True)
class InputNode:
    """A tensor entering a scope: a model input, a block input, or a captured outer tensor."""

    kind: ClassVar[str] = "input"
    op: ClassVar[str] = ""
    id: str
    span: Span
    name: str | None = None  # the input's name (a block's flowing input has none)
    annotation: Annotation | None = None
    dtype: str = "float"  # "float", "int" or "bool"
    vocab: Expr | None = None  # int inputs: values in [0, vocab)


@dataclass(frozen=True, kw_only=True)
class LayerNode:
    """A box of the registry. ``id`` is unique in its graph and stable: it names parameters."""

    kind: ClassVar[str] = "layer"
    id: str
    span: Span
    op: str  # the layer's canonical name
    hparams: tuple[tuple[str, HValue], ...] = ()
    explicit: frozenset[str] = frozenset()  # hyper-parameters the spec wrote (drawn in blue)
    annotation: Annotation | None = None
    name: str | None = None  # the tensor name given with `->`
    shares: str | None = None  # id of the layer whose parameters this one reuses
    fill: Annotation | None = None  # `conv-2d ×3  32×H×W`: a source of left-out sizes only

    @property
    def hp(self) -> dict[str, HValue]:
        return dict(self.hparams)


@dataclass(frozen=True, kw_only=True)
class CallNode:
    """A use of a block definition, whose body lives once in `Program.blocks`."""

    kind: ClassVar[str] = "call"
    id: str
    span: Span
    op: str  # the block's name
    hparams: tuple[tuple[str, HValue], ...] = ()  # the arguments written
    explicit: frozenset[str] = frozenset()
    annotation: Annotation | None = None
    name: str | None = None

    @property
    def hp(self) -> dict[str, HValue]:
        return dict(self.hparams)


@dataclass(frozen=True, kw_only=True)
class RepeatNode:
    """A ×N frame; `body` is one copy. ``index`` names the copy's number (``×N as i:``), which
    a number-valued hyper-parameter of the body may read (a rate that grows with depth)."""

    kind: ClassVar[str] = "repeat"
    op: ClassVar[str] = ""
    id: str
    span: Span
    body: Graph
    count: Expr
    count_span: Span
    annotation: Annotation | None = None
    name: str | None = None
    index: str | None = None


@dataclass(frozen=True, kw_only=True)
class ResidualNode:
    """A group whose input (or `shortcut`'s output) is added to its body's output."""

    kind: ClassVar[str] = "residual"
    op: ClassVar[str] = ""
    id: str
    span: Span
    body: Graph
    shortcut: Graph | None = None
    annotation: Annotation | None = None
    name: str | None = None


@dataclass(frozen=True, kw_only=True)
class ExpertsNode:
    """``experts e=E k=K:``: a router and E copies of `body` (one expert, which sees one
    token's vector); each token goes to its top k experts. ``cap=1.25`` bounds each expert's
    buffer in training; without it (and always in evaluation) no token is dropped."""

    kind: ClassVar[str] = "experts"
    op: ClassVar[str] = ""
    id: str
    span: Span
    body: Graph
    experts: Expr
    k: Expr
    capacity: float | None = None
    spans: tuple[tuple[str, Span], ...] = ()  # where each hyper-parameter is written
    annotation: Annotation | None = None
    name: str | None = None

    def where(self, key: str) -> Span:
        """The span of hyper-parameter ``key`` as written, else the header's."""
        return dict(self.spans).get(key, self.span)


@dataclass(frozen=True, kw_only=True)
class ScanNode:
    """``scan h: H:``: a recurrence along the input's leading axis (T). ``body`` is one step;
    its inputs are x_t (the input less its leading axis), the previous carry (named
    ``carry``), then the outer tensors it reads. Its result is the next carry, of shape
    ``carry_shape``; the group gives the T carries stacked. With ``init``, the carry starts
    from the group's second port, else from zeros. The body's parameters are shared by every
    step."""

    kind: ClassVar[str] = "scan"
    op: ClassVar[str] = ""
    id: str
    span: Span
    body: Graph
    carry: str
    carry_shape: Annotation
    init: bool = False
    annotation: Annotation | None = None
    name: str | None = None


Node = Union[InputNode, LayerNode, CallNode, RepeatNode, ResidualNode, ExpertsNode, ScanNode]
"""One box of a graph; passes dispatch on its type with ``match``."""


def subgraphs(node: Node) -> tuple[Graph, ...]:
    """The graphs a node holds: a frame's copy, a residual group's paths; none otherwise."""
    match node:
        case RepeatNode(body=body) | ExpertsNode(body=body) | ScanNode(body=body):
            return (body,)
        case ResidualNode(body=body, shortcut=shortcut):
            return (body,) if shortcut is None else (body, shortcut)
        case _:
            return ()


@dataclass(frozen=True)
class CountAssert:
    """``assert params == 25_557_032``: a bound on a total (params, state or macs)."""

    quantity: str
    op: str
    bound: int
    span: Span


@dataclass(frozen=True)
class ShapeAssert:
    """``assert Z: 768``: the shape of a named tensor."""

    node: str
    annotation: Annotation
    span: Span
    name: str


Assertion = Union[CountAssert, ShapeAssert]


@dataclass(eq=False)  # equal to itself only, as when its networkx graph (never equal) was a field
class Graph:
    """One scope: a model body, a block body, a ×N copy or a residual path."""

    inputs: list[str] = field(default_factory=list)  # input node ids, by port
    result: str | None = None  # the node whose output leaves the scope
    outputs: list[tuple[str, str]] = field(default_factory=list)  # model outputs: (name, id)
    names: dict[str, str] = field(default_factory=dict)  # tensor name → node id
    asserts: list[Assertion] = field(default_factory=list)
    _nodes: dict[str, Node] = field(default_factory=dict, repr=False)  # in the order added
    _preds: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)  # by port
    _succs: dict[str, dict[str, list[int]]] | None = field(default=None, repr=False)  # `readers`
    _order: list[str] | None = field(default=None, repr=False)

    def add(self, node: Node, inputs: Sequence[str] = ()) -> str:
        """Add ``node``, fed by ``inputs`` (node ids, one port each, in order)."""
        nid = node.id
        self._nodes[nid] = node
        self._preds[nid] = tuple(inputs)
        self._succs = self._order = None
        return nid

    def _readers(self) -> dict[str, dict[str, list[int]]]:
        """For each node that others read, each reader and the ports it reads it through:
        networkx's adjacency, its edges in the order they were added. Made from the inputs
        when first asked for (until the graph changes): checking a spec needs it only where an
        order needs the heap, drawing or lowering asks after the graph is built, so even a
        graph of 95,000 boxes makes it once at most."""
        if self._succs is None:
            succs: dict[str, dict[str, list[int]]] = {}
            for nid, preds in self._preds.items():
                for port, src in enumerate(preds):
                    readers = succs.get(src)
                    if readers is None:
                        succs[src] = {nid: [port]}
                    elif nid in readers:
                        readers[nid].append(port)  # `x + x`: two edges between the same nodes
                    else:
                        readers[nid] = [port]
            self._succs = succs
        return self._succs

    def replace(self, node: Node) -> None:
        """Put ``node`` in place of the node with its id (same edges)."""
        assert node.id in self._nodes
        self._nodes[node.id] = node
        self._order = None

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def node(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def preds(self, node_id: str) -> list[str]:
        """The node's inputs, in port order."""
        return list(self._preds[node_id])

    def out_edges(self, node_id: str) -> list[tuple[str, int]]:
        """(reader, port) of each edge leaving the node, in networkx's order."""
        return [(v, p) for v, ports in self._readers().get(node_id, {}).items() for p in ports]

    def successors(self, node_id: str) -> list[str]:
        """The nodes that read this one, each once."""
        return list(self._readers().get(node_id, ()))

    def read_nodes(self) -> set[str]:
        """The nodes that some node reads (without making `_readers`)."""
        return {src for preds in self._preds.values() for src in preds}

    def out_degree(self, node_id: str) -> int:
        return sum(len(ports) for ports in self._readers().get(node_id, {}).values())

    def order(self) -> list[str]:
        """Topological order, ties broken by source position then id: the same every time
        (networkx's ``lexicographical_topological_sort`` with that key). Computed once per
        graph (until it changes), since every pass walks it. Raises `GraphCycle` on a cycle."""
        if self._order is None:
            self._order = self._topological()
        return list(self._order)

    def _topological(self) -> list[str]:
        """Kahn's algorithm taking the least ready node by `_key` each time, as networkx's
        lexicographical sort does (the key written out in the loop: 190,000 boxes), unless the
        order the nodes were added in is that order already (`_added_in_order`)."""
        if self._added_in_order():
            return list(self._nodes)
        nodes, succs = self._nodes, self._readers()
        no_succs: dict[str, list[int]] = {}
        indegree = {nid: len(preds) for nid, preds in self._preds.items()}
        ready = [self._key(nid) for nid, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        push, pop = heapq.heappush, heapq.heappop
        out: list[str] = []
        while ready:
            nid = pop(ready)[-1]
            out.append(nid)
            for child, ports in succs.get(nid, no_succs).items():
                left = indegree[child] - len(ports)
                indegree[child] = left
                if left == 0:
                    span = nodes[child].span
                    push(ready, (span.line, span.column, child))
        if len(out) != len(nodes):
            raise GraphCycle(sorted(set(nodes) - set(out)))
        return out

    def _added_in_order(self) -> bool:
        """Whether every node was added after its inputs and after every node of a smaller
        `_key`, as the builder adds them, top to bottom, in most graphs. Then the sort would
        take the nodes in the order added: when the nodes before one have been taken, that one
        is ready (its inputs came before it), and every other ready node comes after it, so
        has a greater key. A linear walk without a heap, which a graph of 95,000 boxes saves
        a tenth of a second on."""
        preds = self._preds
        taken: set[str] = set()
        previous: tuple[int, int, str] | None = None
        for nid, node in self._nodes.items():
            span = node.span
            key = (span.line, span.column, nid)
            if previous is not None and key <= previous:
                return False
            for src in preds[nid]:
                if src not in taken:
                    return False
            taken.add(nid)
            previous = key
        return True

    def _key(self, nid: str) -> tuple[int, int, str]:
        span = self._nodes[nid].span
        return (span.line, span.column, nid)

    def nodes(self) -> Iterator[Node]:
        for nid in self.order():
            yield self._nodes[nid]

    @property
    def g(self) -> nx.MultiDiGraph:
        """The graph as a frozen networkx ``MultiDiGraph``: node attribute ``node`` (the
        payload), edge attribute ``port``. Made on each use; imports networkx."""
        import networkx as nx

        g = nx.MultiDiGraph()
        for nid, node in self._nodes.items():
            g.add_node(nid, node=node)
        for nid, preds in self._preds.items():
            for port, src in enumerate(preds):
                g.add_edge(src, nid, port=port)
        return nx.freeze(g)


class GraphCycle(Exception):
    """`Graph.order` of a graph with a cycle: our bug (`verify` reports it as one)."""

    def __init__(self, nodes: list[str]) -> None:
        super().__init__(f"cycle through {', '.join(nodes)}")
        self.nodes = nodes


@dataclass(frozen=True)
class ParamDecl:
    name: str
    default: HValue
    span: Span


@dataclass(frozen=True)
class TensorSig:
    """An input of a block: a name (or None for the flowing tensor) and its shape pattern."""

    name: str | None
    dims: tuple[Expr, ...]
    texts: tuple[str, ...]
    span: Span
    dtype: str | None = None  # the type the pattern asks for (`M: T×T bool`); None: any
    vocab: Expr | None = None  # `int<V>`: the range, matched like a dimension


@dataclass
class Block:
    name: str
    params: tuple[ParamDecl, ...]
    inputs: tuple[TensorSig, ...]
    body: Graph
    span: Span


@dataclass
class Model:
    name: str
    params: tuple[ParamDecl, ...]
    body: Graph
    span: Span


@dataclass
class Program:
    """Everything the compiler knows after building: the model, its blocks, the source texts."""

    model: Model
    blocks: dict[str, Block]
    sources: dict[str, str]
    main_file: str
    bindings: dict[str, Any] = field(default_factory=dict)  # model parameters, after --set


def walk(graph: Graph, blocks: dict[str, Block] | None = None) -> Iterator[tuple[Graph, Node]]:
    """Every node of a graph and of the bodies inside it (block bodies once each, if given)."""
    return _walk(graph, blocks, set())


def _walk(
    graph: Graph, blocks: dict[str, Block] | None, seen: set[str]
) -> Iterator[tuple[Graph, Node]]:
    # At module level, not nested in `walk`: a nested function that calls itself is a
    # reference cycle that keeps what it captures alive until the cycle collector runs.
    for node in graph.nodes():
        yield graph, node
        for sub in subgraphs(node):
            yield from _walk(sub, blocks, seen)
        if isinstance(node, CallNode) and blocks is not None and node.op not in seen:
            seen.add(node.op)
            yield from _walk(blocks[node.op].body, blocks, seen)


class GraphInvariantError(AssertionError):
    """The compiler built a graph that breaks its own rules: our bug, never the user's."""


def verify(program: Program, known_ops: set[str] | None = None) -> None:
    """Check the invariants every stage relies on; raises `GraphInvariantError`."""
    graphs = [("model", program.model.body)] + [(b, blk.body) for b, blk in program.blocks.items()]
    for where, graph in graphs:
        _verify_graph(graph, where, program, known_ops)


def _verify_graph(graph: Graph, where: str, program: Program, known: set[str] | None) -> None:
    def fail(msg: str) -> None:
        raise GraphInvariantError(f"{where}: {msg}")

    nodes = graph._nodes
    missing = [src for preds in graph._preds.values() for src in preds if src not in nodes]
    if missing:
        fail(f"node {missing[0]} has no payload")
    try:
        graph.order()
    except GraphCycle:
        fail("cycle")
    for nid, preds in graph._preds.items():
        node = nodes[nid]
        problem = _node_problem(node, nid, len(preds), program, known)
        if problem:
            fail(problem)
        if node.kind in _GROUPS:
            for sub, label in zip(subgraphs(node), ("", ":shortcut")):
                _verify_graph(sub, f"{where}/{nid}{label}", program, known)
    for i in graph.inputs:
        if i not in graph or not isinstance(graph.node(i), InputNode):
            fail(f"input {i} missing")
    if graph.result is not None and graph.result not in graph:
        fail(f"result {graph.result} missing")


_GROUPS = frozenset({"repeat", "residual", "experts"})
"""The kinds of node that hold graphs (`subgraphs`)."""


def _node_problem(
    node: Node, nid: str, ports: int, program: Program, known: set[str] | None
) -> str | None:
    """What is wrong with one node fed through ``ports`` inputs, or None."""
    if node.id != nid:
        return f"node {nid} carries id {node.id}"
    if not isinstance(node.span, Span):
        return f"node {nid} has no span"
    match node:
        case InputNode() if ports:
            return f"input {nid} has inputs"
        case LayerNode(op=op) if known is not None and op not in known:
            return f"unknown op {op} at {nid}"
        case CallNode(op=op) if op not in program.blocks:
            return f"call of unknown block {op}"
        case RepeatNode(body=body) | ResidualNode(body=body) | ExpertsNode(body=body):
            if body.result is None:
                return f"group {nid} has no body"
            shortcut = node.shortcut if isinstance(node, ResidualNode) else None
            expected = len(body.inputs) + (len(shortcut.inputs) - 1 if shortcut is not None else 0)
            if ports != expected:
                return f"group {nid} has {ports} inputs for {expected} ports"
        case ScanNode(body=body, init=init):
            if body.result is None:
                return f"group {nid} has no body"
            expected = len(body.inputs) - (0 if init else 1)  # x, [h0], captures: no carry
            if ports != expected:
                return f"group {nid} has {ports} inputs for {expected} ports"
    return None

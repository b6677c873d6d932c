"""The graph keeps its own nodes and edges (no stage imports networkx, issue 19) and answers
as networkx does: its order is networkx's lexicographical topological sort with the same key,
its edges come in networkx's order, and `Graph.g` is the same graph as a networkx graph. Every
graph of every spec of specs/ is compared; `verify` still finds a cycle and a missing node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import networkx as nx
import pytest

from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.graph import (
    Graph,
    GraphCycle,
    GraphInvariantError,
    InputNode,
    LayerNode,
    Model,
    Program,
    subgraphs,
    verify,
)
from lbdl_dsl.core.errors import Span
from lbdl_dsl.core.layers import LAYERS

SPECS = sorted((Path(__file__).resolve().parents[2] / "specs").glob("*.lbdl"))


def _graphs(program: Program) -> Iterator[Graph]:
    def inside(graph: Graph) -> Iterator[Graph]:
        yield graph
        for node in graph.nodes():
            for sub in subgraphs(node):
                yield from inside(sub)

    yield from inside(program.model.body)
    for block in program.blocks.values():
        yield from inside(block.body)


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_the_graph_answers_as_networkx(spec: Path) -> None:
    program = compile_spec(spec, stop_after="build").program
    assert program is not None
    for graph in _graphs(program):
        g = graph.g
        assert {nid: g.nodes[nid]["node"] for nid in g.nodes} == {
            nid: graph.node(nid) for nid in g.nodes
        }
        assert len(g) == len(graph)

        def key(nid: str, g: nx.MultiDiGraph = g) -> tuple[int, int, str]:
            span = g.nodes[nid]["node"].span
            return (span.line, span.column, nid)

        assert graph.order() == list(nx.lexicographical_topological_sort(g, key=key))
        for nid in g.nodes:
            ins = sorted(g.in_edges(nid, data="port"), key=lambda e: e[2])
            assert graph.preds(nid) == [u for u, _, _ in ins]
            assert graph.out_edges(nid) == [(v, p) for _, v, p in g.out_edges(nid, data="port")]
            assert graph.successors(nid) == list(g.successors(nid))
            assert graph.out_degree(nid) == g.out_degree(nid)


def _layer(nid: str, line: int) -> LayerNode:
    return LayerNode(id=nid, span=Span.point("t.lbdl", line, 3), op="relu")


def _program(graph: Graph) -> Program:
    return Program(Model("m", (), graph, Span.point("t.lbdl", 1, 1)), {}, {}, "t.lbdl")


def test_the_order_is_by_position_among_ready_boxes() -> None:
    graph = Graph()
    graph.add(InputNode(id="x", span=Span.point("t.lbdl", 2, 3), name="X"))
    graph.add(_layer("late", 9), ["x"])
    graph.add(_layer("early", 4), ["x"])
    graph.add(_layer("join", 3), ["late", "early"])  # written above both: still after them
    assert graph.order() == ["x", "early", "late", "join"]
    graph.add(_layer("first", 1))  # a change is seen: the order is made again
    assert graph.order() == ["first", "x", "early", "late", "join"]


def test_verify_finds_a_cycle_and_a_missing_node() -> None:
    graph = Graph()
    graph.add(_layer("a", 2), ["b"])
    graph.add(_layer("b", 3), ["a"])
    with pytest.raises(GraphCycle):
        graph.order()
    with pytest.raises(GraphInvariantError, match="cycle"):
        verify(_program(graph), set(LAYERS))
    lone = Graph()
    lone.add(_layer("a", 2), ["ghost"])
    with pytest.raises(GraphInvariantError, match="ghost has no payload"):
        verify(_program(lone), set(LAYERS))


def test_the_networkx_view_is_frozen() -> None:
    graph = Graph()
    graph.add(_layer("a", 2))
    with pytest.raises(nx.NetworkXError):
        graph.g.add_node("b")


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_the_order_as_added_is_the_sorted_order(
    spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graph whose nodes were added in order skips the heap (`Graph._added_in_order`); the
    sort through the heap gives the same order on every graph of every spec, and most graphs
    (the builder adds boxes top to bottom) take the short way."""
    program = compile_spec(spec, stop_after="build").program
    assert program is not None
    graphs = list(_graphs(program))
    short = {id(g): g._added_in_order() for g in graphs}
    fast = {id(g): g._topological() for g in graphs}
    monkeypatch.setattr(Graph, "_added_in_order", lambda self: False)
    assert all(g._topological() == fast[id(g)] for g in graphs)
    assert short[id(program.model.body)]


def test_most_graphs_take_the_short_way() -> None:
    """Over all the specs: a frame whose first box reads a captured tensor (T5's stacks read
    their bias so) is sorted through the heap, but most graphs are added in order."""
    graphs = [g for spec in SPECS for g in _graphs(compile_spec(spec, stop_after="build").program)]
    assert sum(g._added_in_order() for g in graphs) * 2 > len(graphs)


def test_a_graph_not_added_in_order_is_sorted_by_the_heap() -> None:
    """Nodes added with keys out of order, or before the node they read, take the heap."""
    late_first = Graph()
    late_first.add(_layer("late", 9))
    late_first.add(_layer("early", 4))
    assert not late_first._added_in_order()
    assert late_first.order() == ["early", "late"]
    reader_first = Graph()
    reader_first.add(_layer("a", 2), ["b"])  # reads b, added below
    reader_first.add(_layer("b", 3))
    assert not reader_first._added_in_order()
    assert reader_first.order() == ["b", "a"]
    in_order = Graph()
    in_order.add(_layer("a", 2))
    in_order.add(_layer("b", 2), ["a"])  # same place, a greater id
    assert in_order._added_in_order()
    assert in_order.order() == ["a", "b"]


def test_the_readers_follow_the_graph_as_it_grows() -> None:
    """`out_edges`, `successors` and `out_degree` are made from the inputs when asked for; a
    node added after a question is in the next answer."""
    graph = Graph()
    graph.add(_layer("a", 1))
    graph.add(_layer("b", 2), ["a"])
    assert graph.successors("a") == ["b"]
    assert graph.out_degree("b") == 0
    graph.add(_layer("c", 3), ["a", "a"])  # `a + a`: two edges
    graph.add(_layer("d", 4), ["c", "b"])
    assert graph.out_edges("a") == [("b", 0), ("c", 0), ("c", 1)]
    assert graph.successors("a") == ["b", "c"]
    assert graph.out_degree("a") == 3
    assert graph.out_edges("b") == [("d", 1)]
    assert graph.read_nodes() == {"a", "b", "c"}

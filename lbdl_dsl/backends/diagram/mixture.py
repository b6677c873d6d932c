"""A mixture of experts drawn as the papers draw it (Shazeer et al. 2017, Fig. 1; Fedus et al.
2021, Fig. 2; Jiang et al. 2024, Fig. 1): the router on the data path, the experts side by side
beside it, their outputs summed with the router's top-k gates.

Inside the mixture's frame the tokens split at a dot into the router, which stays in the
column (the residual's bypass goes round its left, as everywhere), and the expert lanes to its
right, on the router's row: every expert for E ≤ 4, otherwise the first, a "⋯" for those
between and the last, as the Switch Transformer's figure draws FFN 1 … FFN 4. The router's
gates go straight down into the sum ``Σ`` (which writes its top-k), and each lane comes into Σ
at its own point. The first lane draws the expert's body, framed as ``expert 1``, without the
words beside its boxes (the frame's title gives the hidden width; repeated per box they would
double the figure's width); the others are one tall box each, the same body with weights of its
own. An ``experts e=E k=K:`` group and an opened `moe` box are drawn by the same code; the `moe`
box's body is the expert its entry declares (`compiler.experts`).
"""

from __future__ import annotations

from typing import Any

from lbdl_dsl.backends.diagram.scene import (
    ACROSS,
    FAIL,
    FAN,
    HIDDEN,
    MAIN,
    PARAM,
    PLAIN,
    POISON,
    SIDE,
    Box,
    Edge,
    Fork,
    Frame,
    Stub,
)
from lbdl_dsl.compiler.graph import Graph, Node
from lbdl_dsl.compiler.instance import Inst
from lbdl_dsl.core.layers.base import fmt_shape
from lbdl_dsl.core.symbolic import Expr

ALL_LANES = 4  # up to this many experts, every one has a lane


def whole(value: object) -> int:
    """A count of experts as a number (a box's record may hold it as a size)."""
    n = value.as_int() if isinstance(value, Expr) else value
    return n if isinstance(n, int) else 0


def lanes(e: int) -> list[tuple[int, str]]:
    """The lanes: (expert, its label), 1-based; beyond four experts the first (drawn open),
    a "⋯" for those between (lane 0) and the last, which says how many there are: Mixtral's
    eight in 560 points, where a second outline would take the figure past 900 pixels."""
    if e <= ALL_LANES:
        return [(i, f"expert {i}") for i in range(1, e + 1)]
    return [(1, "expert 1"), (0, "⋯"), (e, f"expert {e}")]


def _plain(items: list[Any]) -> None:
    """The expert's boxes without the words beside them (see the module doc)."""
    for item in items:
        if isinstance(item, Box):
            item.hparams = item.shape = ""
        elif isinstance(item, Frame):
            _plain(item.items)


def draw(
    walker: Any,
    node: Node,
    inst: Inst | None,
    src: str | None,
    path: str,
    depth: int,
    frame: Frame,
    body: tuple[Graph, list[Inst]],
    ek: tuple[int, int],
) -> str:
    """Draw the mixture into ``frame``; returns the id of its sum node."""
    e, k = ek
    look = walker.look_of(node, inst, 1)
    dim = POISON if look == POISON else PLAIN
    items, edges = frame.items, walker.edges
    fork = Fork(f"{path}/fork")
    items.append(fork)
    if src is not None:
        edges.append(Edge(src, fork.id, MAIN, look=dim))
    token = inst.inputs[0] if inst is not None and inst.inputs else None
    # the router's top-k and its E scores are written once, on Σ (``top-2 of 8``): beside the
    # router they would push the lanes to the right
    router = Box(f"{path}/router", "router", look=PARAM if look != POISON else POISON)
    router.trainable = True
    router.tooltip = f"{path}/router: " + (
        f"{fmt_shape((*token.shape[:-1], e))} scores, top-{k}" if token is not None else f"top-{k}"
    )
    out = fmt_shape(inst.output.shape) if inst is not None and inst.output is not None else ""
    # the sum fails only with the mixture, whose frame `settle` marks: a failure inside is
    # painted on its box, and everything after it is greyed
    total = Box(f"{path}/sum", "Σ", f"top-{k} of {e}", out, dim)
    if look == FAIL:
        total.look = POISON
    items.append(router)
    edges.append(Edge(fork.id, router.id, MAIN, look=dim))  # the column, before the lanes
    row = [router.id]
    ends: list[str] = []
    graph, insts = body
    for lane, label in lanes(e):
        if lane == 1:
            first = Frame(f"cluster:{path}/expert", "block", "expert 1")
            items.append(first)
            end = walker.result(graph, insts, [fork.id], f"{path}/expert/", depth + 1, first.items)
            _plain(first.items)
            for edge in edges:
                if edge.src == fork.id and edge.dst != router.id:
                    edge.kind = FAN  # beside the router's column
            if end is not None:
                ends.append(end)
            row += [i.id for i in first.items[:1] if isinstance(i, Box)]
        elif lane == 0:
            gap = Stub(f"{path}/experts:between", label)
            items.append(gap)
            edges.append(Edge(fork.id, gap.id, FAN, look=HIDDEN))  # holds it between lanes
            row.append(gap.id)
        else:
            more = Box(f"{path}/expert:{lane}", label, "", "", router.look, True, trainable=True)
            items.append(more)
            edges.append(Edge(fork.id, more.id, FAN, look=dim))
            ends.append(more.id)
            row.append(more.id)
    items.append(total)
    edges.append(Edge(router.id, total.id, MAIN, "gates", look=dim, name="gates"))
    edges += [Edge(end, total.id, SIDE, look=dim) for end in ends]
    walker.rows.append(row)
    # the row in its order, left to right: Graphviz would put the framed lane last
    edges += [Edge(a, b, FAN, look=HIDDEN, route=ACROSS) for a, b in zip(row, row[1:])]
    walker.funnels.append(total.id)
    return total.id

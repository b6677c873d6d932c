"""A mixture of experts drawn as the papers draw it: the router beside the experts, the experts
side by side, their outputs summed with the router's top-k gates.

Inside the mixture's frame the tokens split into the router (a box beside the experts, whose
gates go into the sum) and the expert lanes, on one row: every expert for E ≤ 4, otherwise the
first two, one outline for those between (``expert 3 ⋯ 7``) and the last. The first lane draws
the expert's body, framed as ``expert 1``; the others are one tall box each, the same body with
weights of its own. The sum node ``Σ`` writes its top-k. An ``experts e=E k=K:`` group and an
opened `moe` box are drawn by the same code; the `moe` box's body is the expert its entry
declares (`compiler.experts`).
"""

from __future__ import annotations

from typing import Any

from lbdl_dsl.backends.diagram.scene import (
    BRANCH,
    FAIL,
    FAN,
    MAIN,
    PARAM,
    PLAIN,
    POISON,
    SIDE,
    Box,
    Edge,
    Fork,
    Frame,
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
    """The lanes: (first expert, its label), 1-based; beyond four experts the first two, the
    ones between as one outline (``expert 3 ⋯ 7``), and the last."""
    if e <= ALL_LANES:
        return [(i, f"expert {i}") for i in range(1, e + 1)]
    middle = "expert 3" if e == ALL_LANES + 1 else f"expert 3 ⋯ {e - 1}"
    return [(1, "expert 1"), (2, "expert 2"), (3, middle), (e, f"expert {e}")]


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
    router = Box(
        f"{path}/router",
        "router",
        f"top-{k}",
        fmt_shape((*token.shape[:-1], e)) if token is not None else "",
        PARAM if look != POISON else POISON,
        trainable=True,
    )
    out = fmt_shape(inst.output.shape) if inst is not None and inst.output is not None else ""
    # the sum fails only with the mixture, whose frame `settle` marks: a failure inside is
    # painted on its box, and everything after it is greyed
    total = Box(f"{path}/sum", "Σ", f"top-{k} of {e}", out, dim)
    ends: list[tuple[str, str]] = []
    row = [router.id]
    if look == FAIL:
        total.look = POISON
    graph, insts = body
    for lane, label in lanes(e):
        if lane == 1:
            first = Frame(f"cluster:{path}/expert", "block", "expert 1")
            items.append(first)
            end = walker.result(graph, insts, [fork.id], f"{path}/expert/", depth + 1, first.items)
            if end is not None:
                ends.append((end, MAIN))
            row += [i.id for i in first.items[:1] if isinstance(i, Box)]
            continue
        width = fmt_shape(insts[-1].output.shape) if insts and insts[-1].output else ""
        more = Box(f"{path}/expert:{lane}", label, "", width, router.look, True, trainable=True)
        items.append(more)
        edges.append(Edge(fork.id, more.id, FAN, look=dim))
        ends.append((more.id, FAN))
        row.append(more.id)
    items.append(router)
    edges.append(Edge(fork.id, router.id, BRANCH, look=dim))
    items.append(total)
    edges.append(Edge(router.id, total.id, SIDE, "gates", look=dim, name="gates"))
    for end, kind in ends:
        edges.append(Edge(end, total.id, kind, look=dim))
    walker.rows.append(row)
    return total.id

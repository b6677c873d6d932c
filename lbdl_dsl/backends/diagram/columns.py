"""How wide the cells beside the boxes are: one set of widths per lane.

A lane is a run of boxes joined by data-path arrows, which Graphviz draws as one straight
column: all of ResNet-50, or a Transformer's encoder and, beside it, its decoder, or the way back
up of a U. Within a lane
every row gets the same widths, so its shapes line up at the far right as in the book; lanes
side by side (a shortcut path, the branches of a pyramid pooling) keep their own, narrower
widths instead of the widest of the whole figure. Every box of a figure has the same width.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbdl_dsl.backends.diagram import style as S
from lbdl_dsl.backends.diagram.scene import ACROSS, MAIN, UP, Box, Scene, Terminal


@dataclass(frozen=True)
class Columns:
    """Widths in points: the box, its hyper-parameters, its shape, and the names of tensors it
    reads by name, on its left (``temb →``)."""

    box: int
    hparams: int
    shape: int
    wires: int = 0


def lanes(scene: Scene) -> dict[str, int]:
    """Each element's lane, numbered by the lane's first element in drawing order; a box of
    `Scene.loose` (the router and the expert lanes of a mixture, side by side on one row) is a
    lane of its own, so that the widest words of its column do not push its row apart."""
    order = {eid: i for i, eid in enumerate(scene.elements())}
    parent = list(range(len(order)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for edge in scene.edges:
        column = (edge.kind == MAIN and edge.route != ACROSS) or edge.route == UP
        alone = edge.src in scene.loose or edge.dst in scene.loose
        if column and not alone and edge.src in order and edge.dst in order:
            a, b = find(order[edge.src]), find(order[edge.dst])
            parent[max(a, b)] = min(a, b)
    return {eid: find(i) for eid, i in order.items()}


def _width(text: str, size: int) -> int:
    """Room for ``text``, a little more than the estimate: a cell Graphviz has to grow for a
    long text (h=32 kv=8 causal=true rope=true...: 303 pt drawn, 295 estimated) moves the
    box in it off its column."""
    return round(S.text_width(text, size) * S.WIDTH_MARGIN) + 2 if text else 0


def columns(scene: Scene) -> dict[str, Columns]:
    """The widths each box and terminal is drawn with, by element id."""
    lane = lanes(scene)
    rows: list[Box | Terminal] = [*scene.boxes(), *scene.inputs, *scene.outputs]
    box = max(
        [
            S.BOX_MIN_WIDTH,
            *(
                _width(r.name if isinstance(r, Box) else r.text, S.BOX_FONT_SIZE) + 2 * S.BOX_PAD
                for r in rows
            ),
        ]
    )
    hps: dict[int, int] = {}
    shapes: dict[int, int] = {}
    wires: dict[int, int] = {}
    for r in rows:
        n = lane[r.id]
        hp = _width(r.hparams, S.SIDE_FONT_SIZE) if isinstance(r, Box) else 0
        hps[n] = max(hps.get(n, 0), hp)
        shapes[n] = max(shapes.get(n, 0), _width(r.shape, S.SIDE_FONT_SIZE))
        wire = _width(wire_text(r.wires), S.SIDE_FONT_SIZE) if isinstance(r, Box) else 0
        wires[n] = max(wires.get(n, 0), wire)
    return {
        r.id: Columns(box, hps[lane[r.id]], shapes[lane[r.id]], wires[lane[r.id]]) for r in rows
    }


def wire_text(names: list[str]) -> str:
    """The names a box reads by name, as written on its left."""
    return ", ".join(names) + " →" if names else ""

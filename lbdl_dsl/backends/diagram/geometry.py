"""What a drawn figure looks like, measured: Graphviz's layout read back (``dot -Tjson``).

A figure can be right box by box and still hard to read: an arrow through a box's words or a
frame's ``×12``, two arrows ending on one arrowhead so that a reader cannot tell that a box reads
two tensors, a data path that drifts sideways into a staircase. None of that is in the DOT we
write; it is in where Graphviz put things. This module asks Graphviz for its layout (positions of
every text, every arrow's spline and arrowhead, in points, y upwards) and counts those faults, so
that a test holds every figure of the gallery to zero and a regression shows as a number.

- **Crossings**: an arrow's spline (sampled along its Bézier segments) entering the box of any
  text drawn in the figure: a box's name, its hyper-parameters and shape, a frame's title, another
  arrow's name. An arrow's own name is not counted against it.
- **Shared arrowheads**: two arrows whose heads land within `SAME_HEAD` points of each other.
- **Covered names**: an arrow's name lying on a box's outline or on another text (at an
  arrow's end, Z's name once sat under the box above mha, hidden).
- **Drift**: how far the data path (the arrows the writer weighs heavily, `style.MAIN_WEIGHT`)
  moves sideways from where it leaves a box to where it enters the next; a straight column is 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lbdl_dsl.backends.diagram import style as S
from lbdl_dsl.backends.diagram.run_dot import render

Point = tuple[float, float]
SAME_HEAD = 4.0  # points: closer arrowheads read as one
TEXT_MARGIN = 0.5  # points a spline may graze a text's box by (antialiasing, not a crossing)
SAMPLES = 12  # points per Bézier segment


@dataclass(frozen=True)
class Text:
    """One text as drawn: its box in points, what it says and whose it is."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    owner: str  # a node's or a frame's name, or ``edge:N`` for an arrow's name

    def hit(self, p: Point) -> bool:
        m = TEXT_MARGIN
        return self.x0 + m < p[0] < self.x1 - m and self.y0 + m < p[1] < self.y1 - m


@dataclass(frozen=True)
class Arrow:
    """One arrow as drawn: its spline sampled, its arrowheads' tips, whether it is data path."""

    key: str  # ``tail -> head``
    points: tuple[Point, ...]
    heads: tuple[Point, ...]
    main: bool
    labels: frozenset[str]  # the owners of its own texts (``edge:N``)


@dataclass
class Drawn:
    """A figure's layout: every text, every box's outline and every arrow, and its size in
    points."""

    texts: list[Text] = field(default_factory=list)
    arrows: list[Arrow] = field(default_factory=list)
    boxes: list[Text] = field(default_factory=list)  # outlines, as boxes with no text
    width: float = 0.0
    height: float = 0.0


@dataclass(frozen=True)
class Faults:
    """What `measure` found; a readable figure has none of the first three."""

    crossings: tuple[tuple[str, str], ...]  # (arrow, text it crosses)
    shared_heads: tuple[tuple[str, str], ...]  # (arrow, arrow)
    covered: tuple[tuple[str, str], ...]  # (an arrow's name, the box or text it lies on)
    drift: float  # the largest sideways step of the data path, in points
    width: float  # points

    def summary(self) -> str:
        return (
            f"{len(self.crossings)} crossings, {len(self.shared_heads)} shared arrowheads, "
            f"{len(self.covered)} names covered, "
            f"drift {self.drift:.0f} pt, {self.width:.0f} pt wide"
        )


def _bezier(points: list[list[float]]) -> list[Point]:
    """Points along a cubic B-spline as Graphviz writes it: 1 + 3n control points."""
    out: list[Point] = []
    for i in range(0, len(points) - 3, 3):
        p0, p1, p2, p3 = points[i : i + 4]
        for s in range(SAMPLES + 1):
            t = s / SAMPLES
            a, b, c, d = (1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t * t * (1 - t), t**3
            out.append(
                (
                    a * p0[0] + b * p1[0] + c * p2[0] + d * p3[0],
                    a * p0[1] + b * p1[1] + c * p2[1] + d * p3[1],
                )
            )
    return out


def _texts(ops: list[dict[str, Any]], owner: str) -> list[Text]:
    """The boxes of the texts an xdot drawing list writes (``T`` after its ``F`` font)."""
    out, size = [], 11.0
    for op in ops:
        if op["op"] == "F":
            size = float(op["size"])
        elif op["op"] == "T" and op["text"].strip():
            x, y = op["pt"]
            w = float(op["width"])
            x0 = {"l": x, "c": x - w / 2, "r": x - w}[op["align"]]
            out.append(Text(x0, y - 0.22 * size, x0 + w, y + 0.75 * size, op["text"], owner))
    return out


def _outlines(ops: list[dict[str, Any]], owner: str) -> list[Text]:
    """The bounding boxes of the shapes a node draws (its rounded box, its circle)."""
    out = []
    for op in ops:
        if op["op"] in ("b", "B", "p", "P") and len(op["points"]) > 2:
            xs = [float(p[0]) for p in op["points"]]
            ys = [float(p[1]) for p in op["points"]]
            out.append(Text(min(xs), min(ys), max(xs), max(ys), "", owner))
        elif op["op"] in ("e", "E"):
            x, y, w, h = (float(v) for v in op["rect"])
            out.append(Text(x - w, y - h, x + w, y + h, "", owner))
    return out


def _tips(ops: list[dict[str, Any]], end: Point) -> list[Point]:
    """The tip of each arrowhead polygon: its corner farthest from the spline's end."""
    out = []
    for op in ops:
        if op["op"] in ("P", "p"):
            pts = [(float(x), float(y)) for x, y in op["points"]]
            out.append(max(pts, key=lambda p: (p[0] - end[0]) ** 2 + (p[1] - end[1]) ** 2))
    return out


def read(layout: dict[str, Any]) -> Drawn:
    """A `Drawn` from Graphviz's JSON layout."""
    drawn = Drawn()
    x0, y0, x1, y1 = (float(v) for v in layout["bb"].split(","))
    drawn.width, drawn.height = x1 - x0, y1 - y0
    names = {o["_gvid"]: o.get("name", "") for o in layout.get("objects", [])}
    for obj in layout.get("objects", []):
        drawn.texts += _texts(obj.get("_ldraw_", []), obj.get("name", ""))
        if "nodes" not in obj:  # a node, not a frame: the outlines it draws
            drawn.boxes += _outlines(obj.get("_ldraw_", []) + obj.get("_draw_", []), obj["name"])
    for edge in layout.get("edges", []):
        key = f"{names.get(edge['tail'])} -> {names.get(edge['head'])}"
        own = f"edge:{edge['_gvid']}"
        for part in ("_ldraw_", "_hldraw_", "_tldraw_", "_xldraw_"):
            drawn.texts += _texts(edge.get(part, []), own)
        if edge.get("style") == "invis":
            continue
        spline = [p for op in edge.get("_draw_", []) if op["op"] == "b" for p in op["points"]]
        if not spline:
            continue
        points = _bezier(spline)
        tips = _tips(edge.get("_hdraw_", []), points[-1]) + _tips(
            edge.get("_tdraw_", []), points[0]
        )
        main = edge.get("weight") == str(S.MAIN_WEIGHT) and edge.get("dir") != "back"
        drawn.arrows.append(Arrow(key, tuple(points), tuple(tips), main, frozenset({own})))
    return drawn


def layout(dot: str) -> Drawn:
    """The layout Graphviz gives ``dot``."""
    return read(json.loads(render(dot, "json")))


def crossings(drawn: Drawn) -> list[tuple[str, str]]:
    out = []
    for arrow in drawn.arrows:
        for text in drawn.texts:
            if text.owner in arrow.labels:
                continue
            if any(text.hit(p) for p in arrow.points):
                out.append((arrow.key, f"{text.text} ({text.owner})"))
    return out


def shared_heads(drawn: Drawn) -> list[tuple[str, str]]:
    tips = [(a.key, t) for a in drawn.arrows for t in a.heads]
    out = []
    for i, (ka, a) in enumerate(tips):
        for kb, b in tips[i + 1 :]:
            if abs(a[0] - b[0]) < SAME_HEAD and abs(a[1] - b[1]) < SAME_HEAD:
                out.append((ka, kb))
    return out


def covered(drawn: Drawn) -> list[tuple[str, str]]:
    """Arrows' names lying on a box or on another text: hidden, or read as the wrong word."""
    out = []
    for label in (t for t in drawn.texts if t.owner.startswith("edge:")):
        for other in drawn.boxes + drawn.texts:
            if other is not label and _overlap(label, other):
                out.append((label.text, f"{other.text or 'box'} ({other.owner})"))
    return out


def _overlap(a: Text, b: Text) -> bool:
    m = TEXT_MARGIN
    return a.x0 + m < b.x1 and b.x0 + m < a.x1 and a.y0 + m < b.y1 and b.y0 + m < a.y1


def drift(drawn: Drawn) -> float:
    """The largest sideways step of a data-path arrow, from where it leaves to its tip."""
    steps = [
        abs((a.heads[0] if a.heads else a.points[-1])[0] - a.points[0][0])
        for a in drawn.arrows
        if a.main
    ]
    return max(steps, default=0.0)


def measure(dot: str) -> Faults:
    """The faults of the figure ``dot`` draws (see the module doc)."""
    drawn = layout(dot)
    return Faults(
        tuple(crossings(drawn)),
        tuple(shared_heads(drawn)),
        tuple(covered(drawn)),
        drift(drawn),
        drawn.width,
    )

"""Where the streams of a multi-branch figure go: what Graphviz cannot guess from arrows alone.

The walk gives boxes and arrows; left to itself, Graphviz puts every box that starts a new stream
in a new column one row further down, so a U-Net becomes a diagonal staircase and a detector's
heads trail off to the right. This pass reads the figure's shape and says, per arrow, whether it
is drawn sideways on one row (`ACROSS`) or upward (`UP`), and which elements share a row:

- **A U** (U-Net, a diffusion U-Net): when tensors made on the way down are read on the way back
  up in the reverse order (skips nested around the bottom), the way back is drawn upward beside
  the way down, each skip as a horizontal arrow between the rows it joins, labelled with the
  tensor's name: Ronneberger et al.'s Fig. 1, and the book's Fig. 4.10.
- **Side outputs** (CLIP's two embeddings, BERT's Z, the VAE's μ and log σ²): an output whose
  tensor goes on into more boxes is written on its box's row, to the right.
- **Heads** (SSD's): a box that reads a tensor the column goes on from, and is itself an output,
  sits beside that tensor's box, its output name after it.
- **Named wires** (a diffusion U-Net's time embedding): the name sits left of the box it feeds.

Names on arrows: a tensor's name is written where it tells the reader something the drawing
does not: a skip of a U, and a tensor that enters a frame from outside it (Z into the decoder's
×N). A name that only wires one box to another (BERT's ``tokens``, CLIP's ``t``, a block's
``new``) is left out, as the book leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbdl_dsl.backends.diagram.columns import lanes
from lbdl_dsl.backends.diagram.scene import (
    ACROSS,
    BYPASS,
    FAN,
    MAIN,
    SIDE,
    UP,
    Box,
    Edge,
    Fork,
    Frame,
    Item,
    Plus,
    Scene,
    Stub,
    Terminal,
    walk_items,
)

MIN_SKIPS = 2  # nested skips that make a figure a U
FUNNEL_FROM = 3  # side arrows into one box that come in through room above it


def arrange(scene: Scene) -> None:
    """Set the routes, rows and arrow names of ``scene`` (see the module doc)."""
    _explicit_residuals(scene)
    unit = _units(scene)
    u_skips = _u_shape(scene, unit)
    _side_outputs(scene)
    _heads(scene)
    _named_wires(scene)
    _names(scene, u_skips)
    _bypass_sides(scene)
    _ports(scene)


# -- what is where --------------------------------------------------------------------------------


def _units(scene: Scene) -> dict[str, int]:
    """Each element's top-level item, by index in ``scene.items``: a frame and everything in it
    is one unit; inputs are -1 and outputs len(items)."""
    out: dict[str, int] = {t.id: -1 for t in scene.inputs}
    for i, top in enumerate(scene.items):
        out.update((item.id, i) for item, _ in walk_items([top]))
    out.update((t.id, len(scene.items)) for t in scene.outputs)
    return out


def _frames(scene: Scene) -> dict[str, tuple[str, ...]]:
    """The frames around each element, outermost first."""
    out = {item.id: frames for item, frames in walk_items(scene.items)}
    for t in [*scene.inputs, *scene.outputs]:
        out[t.id] = ()
    return out


def _readers(scene: Scene) -> dict[str, list[Edge]]:
    out: dict[str, list[Edge]] = {}
    for edge in scene.edges:
        out.setdefault(edge.src, []).append(edge)
    return out


def _row(scene: Scene, ids: list[str]) -> None:
    """Put ``ids`` on one row; rows that share an element become one."""
    for row in scene.rows:
        if set(row) & set(ids):
            row.extend(i for i in ids if i not in row)
            return
    scene.rows.append(list(ids))


# -- a U ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Skip:
    edge: Edge  # the arrow leaving the spine
    src: int  # spine position it leaves
    lands: int  # spine position it joins again
    via: tuple[str, ...]  # elements off the spine on its way (the U-Net's crop)


def _spine(scene: Scene, unit: dict[str, int]) -> list[int]:
    """The longest chain of units from an input to an output: the way the data goes."""
    n = len(scene.items)
    succ: dict[int, set[int]] = {}
    for e in scene.edges:
        a, b = unit.get(e.src), unit.get(e.dst)
        if a is not None and b is not None and 0 <= a < b < n:
            succ.setdefault(a, set()).add(b)
    starts = {unit[e.dst] for e in scene.edges if unit.get(e.src) == -1 and unit.get(e.dst, n) < n}
    best: dict[int, list[int]] = {}
    for i in reversed(range(n)):
        tails = [best[j] for j in sorted(succ.get(i, ())) if j in best]
        best[i] = [i, *max(tails, key=len, default=[])]
    chains = [best[s] for s in sorted(starts)]
    return max(chains, key=len, default=[])


def _u_shape(scene: Scene, unit: dict[str, int]) -> set[int]:
    """Draw the figure as a U if it is one; returns the ids (``id()``) of its skip edges."""
    spine = _spine(scene, unit)
    if len(spine) < 2 * MIN_SKIPS + 1:
        return set()
    pos = {u: k for k, u in enumerate(spine)}
    skips = _skips(scene, unit, pos)
    if len(skips) < MIN_SKIPS:
        return set()
    inner = skips[-1]
    turn = (inner.src + inner.lands) // 2  # the bottom of the U, where the way back starts
    first = {_first_id(scene.items[u]) for u in spine}
    last = {u: _last_id(scene.items[u]) for u in spine}
    for e in scene.edges:
        a, b = unit.get(e.src), unit.get(e.dst)
        if a not in pos or b not in pos:
            if a in pos and pos[a] > turn and b == len(scene.items):
                e.route = UP  # the output, at the top of the way back
            continue
        pa, pb = pos[a], pos[b]
        if pa == turn and pb == turn + 1 and e.dst in first and e.src == last[a]:
            e.route = ACROSS
            _row(scene, [e.src, e.dst])
        elif pa > turn and pb == pa + 1 and e.dst in first and e.src == last[a]:
            e.route = UP
            e.label = ""
        elif pa > turn and pa == pb:
            e.route = UP  # inside a frame on the way back: it goes up too
    for s in skips:
        s.edge.route = ACROSS
        target = _first_id(scene.items[spine[s.lands]])
        _row(scene, [s.edge.src, *s.via, target])
        for e in scene.edges:
            if e.src in s.via and (e.dst in s.via or e.dst == target):
                e.route = ACROSS
    return {id(s.edge) for s in skips}


def _skips(scene: Scene, unit: dict[str, int], pos: dict[int, int]) -> list[_Skip]:
    """Arrows that leave the spine and join it again further on, nested around one bottom
    (the first made is the last read); none if they do not nest so."""
    out: list[_Skip] = []
    readers = _readers(scene)
    for e in scene.edges:
        a = unit.get(e.src)
        if a not in pos or e.kind not in (SIDE, FAN):
            continue
        via: list[str] = []
        here, step = e.dst, e
        while unit.get(here) not in pos:
            nxt = [r for r in readers.get(here, []) if r.kind == MAIN]
            if len(via) > 2 or len(nxt) != 1 or unit.get(here, -1) < 0:
                break
            via.append(here)
            here, step = nxt[0].dst, nxt[0]
        b = unit.get(here)
        if b in pos and pos[b] > pos[a] + 1 and step.kind in (MAIN, SIDE, FAN):
            out.append(_Skip(e, pos[a], pos[b], tuple(via)))
    out.sort(key=lambda s: s.src)
    if len(out) < MIN_SKIPS:
        return []
    lands = [s.lands for s in out]
    srcs = [s.src for s in out]
    nested = lands == sorted(lands, reverse=True) and len(set(lands)) == len(lands)
    if not nested or len(set(srcs)) != len(srcs) or srcs[-1] >= lands[-1]:
        return []
    return out


def _first_id(item: Item) -> str:
    while isinstance(item, Frame) and item.items:
        item = item.items[0]
    return item.id


def _last_id(item: Item) -> str:
    while isinstance(item, Frame) and item.items:
        item = item.items[-1]
    return item.id


# -- residuals written out ----------------------------------------------------------------------


def _explicit_residuals(scene: Scene) -> None:
    """``+(X)`` at the end of a frame that starts from X (a composite's inside, a block written
    without ``residual:``) is a residual: X splits at a dot inside the frame, as a ``residual:``
    group's input does, and its arrow bypasses the frame's boxes on the left into the `+`,
    unnamed. A concatenation of X with what the frame made of it (DenseNet's layer, whose
    chain `walk.fan_out` made the column) splits X at a dot the same way: an arrow from
    outside the frame would run down outside it, on its border."""
    frames = _frames(scene)
    kinds = scene.elements()
    for edge in list(scene.edges):
        plus = isinstance(kinds.get(edge.dst), Plus)
        if edge.kind != SIDE or not (plus or isinstance(kinds.get(edge.dst), Box)):
            continue
        here = frames.get(edge.dst, ())
        if not plus and (frames.get(edge.src, ()) == here or edge.label):
            continue  # a skip inside one frame, or a named tensor (Z) coming in
        starts = [
            e
            for e in scene.edges
            if e.src == edge.src and e.kind == MAIN and frames.get(e.dst, ()) == here
        ]
        frame = kinds.get(here[-1]) if here else None
        if len(starts) != 1 or not isinstance(frame, Frame):
            continue
        fork = Fork(f"{here[-1]}/fork")
        frame.items.insert(0, fork)
        scene.edges.insert(scene.edges.index(starts[0]), Edge(edge.src, fork.id, MAIN))
        starts[0].src = fork.id
        edge.src, edge.label = fork.id, ""
        edge.kind = BYPASS if plus else SIDE
        frames[fork.id] = here


# -- outputs, heads and names ---------------------------------------------------------------------


def _side_outputs(scene: Scene) -> None:
    """An output whose tensor goes on into other boxes is written beside its box."""
    readers = _readers(scene)
    outputs = {t.id for t in scene.outputs}
    for edge in scene.edges:
        if edge.dst not in outputs or edge.route:
            continue
        others = [e for e in readers.get(edge.src, []) if e.dst not in outputs]
        if others:
            edge.route = ACROSS
            _row(scene, [edge.src, edge.dst])


def _heads(scene: Scene) -> None:
    """A box that reads, from the side, a tensor that its column goes on from, and that is an
    output itself, sits beside that tensor's box with its output name after it."""
    readers = _readers(scene)
    outputs = {t.id for t in scene.outputs}
    kinds = {e.id: e for e in scene.elements().values()}
    for edge in scene.edges:
        if edge.kind != FAN or edge.route or not isinstance(kinds.get(edge.dst), Box):
            continue
        out = readers.get(edge.dst, [])
        ins = [e for e in scene.edges if e.dst == edge.dst]
        if len(out) != 1 or out[0].dst not in outputs or len(ins) != 1 or out[0].route:
            continue
        edge.route = out[0].route = ACROSS
        _row(scene, [edge.src, edge.dst, out[0].dst])


def _named_wires(scene: Scene) -> None:
    """A tensor's name written where it is read sits just left of the box that reads it."""
    stubs = {e.id for e in scene.elements().values() if isinstance(e, Stub)}
    readers = _readers(scene)
    for stub in sorted(stubs):
        edges = readers.get(stub, [])
        if len(edges) == 1 and not edges[0].route:
            edges[0].route = ACROSS
            _row(scene, [stub, edges[0].dst])


def _names(scene: Scene, u_skips: set[int]) -> None:
    """Keep a tensor's name on an arrow only where it says something (see the module doc)."""
    frames = _frames(scene)
    outputs = {t.id for t in scene.outputs}
    beside = {e.src: e.dst for e in scene.edges if e.route == ACROSS and e.dst in outputs}
    kinds = scene.elements()
    for edge in scene.edges:
        if not edge.label:
            continue
        enters = not set(frames.get(edge.dst, ())) <= set(frames.get(edge.src, ()))
        said = edge.src in beside and _text(kinds.get(beside[edge.src])) == edge.label
        if id(edge) not in u_skips and (not enters or said):
            edge.label = ""
    for edge in scene.edges:
        if id(edge) in u_skips:
            edge.label = edge.name


def _text(element: object) -> str:
    return element.text if isinstance(element, Terminal) else ""


def _bypass_sides(scene: Scene) -> None:
    """A residual whose boxes read a tensor made before it (Z into cross-attention, drawn on
    the left: Graphviz places what is drawn first on the left) has its bypass on the right,
    so that the tensor's arrow comes in without crossing it."""
    order = {eid: i for i, eid in enumerate(scene.elements())}
    for bypass in scene.edges:
        if bypass.kind != BYPASS or bypass.src not in order or bypass.dst not in order:
            continue
        start, end = order[bypass.src], order[bypass.dst]
        bypass.right = any(
            start < order.get(e.dst, -1) < end and order.get(e.src, end) < start
            for e in scene.edges
            if e.kind != BYPASS and not e.route
        )


def _ports(scene: Scene) -> None:
    """A box that more than one arrow comes into from above gets a point for each along its
    top, so that no two share an arrowhead (gcn's matmul reads A and the features): the
    flowing tensor's in the middle, where the column goes on, the others on its right, where
    Graphviz puts the columns a box reads from the side. A box whose entry names its ports
    (mha's Q, K, V) keeps their order, with the others on the left where they all come from
    a tensor drawn before the flowing one (Z into cross-attention, as `_bypass_sides` says).
    An arrow into a port right of the middle is marked `Edge.right`."""
    order = {eid: i for i, eid in enumerate(scene.elements())}
    lane = lanes(scene)
    into: dict[str, list[Edge]] = {}
    for edge in scene.edges:
        if not edge.route:
            into.setdefault(edge.dst, []).append(edge)
    for box in scene.boxes():
        edges = into.get(box.id, [])
        main = next((e for e in edges if e.kind == MAIN), edges[0] if edges else None)
        if len(edges) < 2 or main is None:
            continue
        rest = [e for e in edges if e is not main]
        left = [e for e in rest if order.get(e.src, 0) < order.get(main.src, 0)]
        if box.ports and len(left) != len(rest):
            for edge in rest:
                edge.right = True  # named ports, their others on the right already
            continue
        if box.ports:  # named ports whose others come from the left: those before the main
            named = sorted(rest, key=lambda e: e.port)
            labels = [box.ports[e.port] for e in named] + [box.ports[main.port]]
            box.ports = labels + [""] * len(named)
            for i, edge in enumerate(named):
                edge.port = i
            main.port = len(named)
            continue
        # a skip from higher up the same column (DenseNet's concat of the block's input)
        # comes round the left, as a bypass does: on the right it runs down the words beside
        # the boxes and pushes the column aside, block after block, into a staircase
        skips = [e for e in rest if lane.get(e.src) == lane.get(box.id) is not None]
        right = [e for e in rest if e not in skips]
        middle = max(len(skips), len(right))
        if len(right) >= FUNNEL_FROM:
            scene.funnels.add(box.id)  # a pyramid's branches: room above to converge in
        box.ports = [""] * (2 * middle + 1)
        main.port = middle
        for i, edge in enumerate(skips):
            edge.port = middle - len(skips) + i
        for i, edge in enumerate(right):
            edge.port, edge.right = middle + 1 + i, True

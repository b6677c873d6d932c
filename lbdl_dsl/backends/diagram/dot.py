"""A `Scene` as a DOT document, with the book's look.

Each box is one Graphviz node whose HTML-like label is a row of cells: the box itself (port
``b``), then the blue hyper-parameters, then the output shape (widths from `columns`). Arrows
attach to the box's port and the data path's arrows weigh heavily, which makes Graphviz line
the boxes up in a straight column however long the text beside them. A box's side arrows (skip
connections, residual bypasses, shortcut paths) are written before its data-path arrow and its
fan-out arrows after it, and such a box gets ``ordering=out``, which keeps those arrows to the
left of the column, outside the boxes they go round; a box without side arrows leaves its
fan-outs to Graphviz, which crosses fewest lines that way. A side arrow ends on the border of
the box it feeds, wherever it arrives, and its tensor's name is an external label, placed after
the layout where it covers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from lbdl_dsl.backends.diagram import style as S
from lbdl_dsl.backends.diagram.columns import Columns, columns, wire_text
from lbdl_dsl.backends.diagram.labels import wrap
from lbdl_dsl.backends.diagram.scene import (
    ACROSS,
    BRANCH,
    FAIL,
    FAN,
    HIDDEN,
    MAIN,
    POISON,
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
)
from lbdl_dsl.core.errors import printable

# A row of cells; the last, empty one (port ``r``) is where an arrow along a row leaves, past
# the text beside the box: Graphviz ignores a compass point on a flat arrow between neighbours.
_ROW = (
    '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR>{}'
    '<TD PORT="r" WIDTH="1"></TD></TR></TABLE>>'
)


# Graphviz expands `\N`, `\G`, `\E`... in labels and tooltips (to the node's name, the graph's),
# in HTML-like labels too, and neither doubling the backslash nor `&#92;` stops it: a word
# joiner (U+2060, invisible and of no width) after each backslash does.
_JOINER = "\u2060"


def q(text: str) -> str:
    """A quoted DOT string, shown as written: no quote ends it, no backslash escapes."""
    text = printable(text)  # a form feed in a string would make the SVG invalid XML
    return '"' + text.replace("\\", "\\\\" + _JOINER).replace('"', '\\"') + '"'


def h(text: str) -> str:
    """Text inside an HTML-like label, shown as written (see `q`)."""
    return escape(printable(text), quote=True).replace("\\", "\\" + _JOINER)


def _font(text: str, color: str, size: int, italic: bool = False) -> str:
    body = f"<I>{h(text)}</I>" if italic else h(text)
    return f'<FONT COLOR="{color}" POINT-SIZE="{size}">{body}</FONT>' if text else ""


def _message(text: str) -> str:
    lines = "".join(h(line) + '<BR ALIGN="LEFT"/>' for line in wrap(text, S.MESSAGE_WIDTH))
    return f'<FONT COLOR="{S.FAIL}" POINT-SIZE="{S.SIDE_FONT_SIZE}">{lines}</FONT>'


def _attrs(pairs: list[tuple[str, str]]) -> str:
    return "[" + ", ".join(f"{k}={v}" for k, v in pairs) + "]"


def _side(
    cols: Columns,
    hparams: str = "",
    shape: str = "",
    blue: str = S.HPARAM,
    message: str = "",
) -> str:
    """The cells right of a box: hyper-parameters in blue, the shape, an error."""
    cells = [
        f'<TD WIDTH="{S.GAP}"></TD>',
        f'<TD ALIGN="LEFT" WIDTH="{cols.hparams}">{_font(hparams, blue, S.SIDE_FONT_SIZE)}</TD>',
        f'<TD WIDTH="{S.SHAPE_GAP if cols.hparams and cols.shape else 0}"></TD>',
        f'<TD ALIGN="RIGHT" WIDTH="{cols.shape}">{_font(shape, S.SHAPE, S.SIDE_FONT_SIZE)}</TD>',
    ]
    if message:
        cells += [f'<TD WIDTH="{S.GAP}"></TD>', f'<TD ALIGN="LEFT">{_message(message)}</TD>']
    return "".join(cells)


def box_label(
    box: Box, cols: Columns, entered: bool = False, spread: bool = False, room: bool = False
) -> str:
    """A box and the cells of its row; ``entered``: an arrow along the row comes into it from
    the left, so the names it reads by name move up out of the arrow's way."""
    fill = box.fill or (
        S.POISON_FILL if box.look == POISON else S.PARAM_FILL if box.trainable else S.PLAIN_FILL
    )
    border = {FAIL: S.FAIL, POISON: S.POISON}.get(box.look, S.BOX_BORDER)
    ink = S.POISON if box.look == POISON else S.INK
    dashed = ",dashed" if box.look == POISON else ""
    height = S.TALL_HEIGHT if box.tall else S.BOX_HEIGHT
    name = _font(box.name, ink, S.BOX_FONT_SIZE)
    ports, top = _ports(box, cols.box, ink)
    span = f' COLSPAN="{len(box.ports)}"' if box.ports else ""
    inner = (
        f'<TABLE STYLE="rounded{dashed}" BORDER="{2 if box.look == FAIL else 1}" '
        f'CELLBORDER="0" CELLSPACING="0" CELLPADDING="0" BGCOLOR="{fill}" COLOR="{border}">'
        f'{ports}<TR><TD{span} WIDTH="{cols.box}" HEIGHT="{height - top}">{name}</TD>'
        "</TR></TABLE>"
    )
    blue = S.POISON if box.look == POISON else S.HPARAM
    side = _side(cols, box.hparams, box.shape, blue, box.message)
    if room:
        # blank room above the box, inside its node, where the arrows into its ports converge
        # (a mixture's lanes into Σ) instead of running side by side along the last rank
        inner = (
            '<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0">'
            f'<TR><TD HEIGHT="{S.FUNNEL_ROOM}"></TD></TR><TR><TD>{inner}</TD></TR></TABLE>'
        )
        side = side.replace('<TD ALIGN="', '<TD VALIGN="BOTTOM" ALIGN="')
    wires = _wires(cols, box.wires, "TOP" if entered else "MIDDLE")
    row = _ROW.format(f'{wires}<TD PORT="b">{inner}</TD>{side}')
    if not spread:
        return row
    # room under the box for its arrows to fan out into Q, K and V: a rank apart would pull
    # the block's bypass over to the right
    return row.replace("</TR></TABLE>>", f'</TR><TR><TD HEIGHT="{S.FAN_ROOM}"></TD></TR></TABLE>>')


def _ports(box: Box, width: int, ink: str) -> tuple[str, int]:
    """The row of input points along a box's top (`Box.ports`), with their names in small
    italics (Q, K, V), and its height; none for a box with one arrow in."""
    if not box.ports:
        return "", 0
    named = any(box.ports)
    top = S.PORT_HEIGHT if named else 1
    n = len(box.ports)
    widths = [width // n + (1 if i < width % n else 0) for i in range(n)]
    cells = "".join(
        f'<TD PORT="p{i}" WIDTH="{w}" HEIGHT="{top}" VALIGN="TOP">'
        f"{_font(label, ink, S.PORT_FONT_SIZE, italic=True)}</TD>"
        for i, (label, w) in enumerate(zip(box.ports, widths, strict=True))
    )
    return f"<TR>{cells}</TR>", top


def _wires(cols: Columns, names: list[str], valign: str = "MIDDLE") -> str:
    """The cells left of a box, in every row of a lane that has any: tensors it reads by name."""
    if not cols.wires:
        return ""
    text = _font(wire_text(names), S.INK, S.SIDE_FONT_SIZE, italic=True)
    return (
        f'<TD ALIGN="RIGHT" VALIGN="{valign}" WIDTH="{cols.wires}">{text}</TD>'
        f'<TD WIDTH="{S.WIRE_GAP}"></TD>'
    )


def terminal_label(term: Terminal, cols: Columns, arrives: str) -> str:
    """An input's or output's name. An output reached from above sits low in its cell, clear
    of the arrowhead (the hat of Ŷ reaches above the capitals), one reached from below sits
    high, and one written beside its box starts where its arrow ends."""
    ink = {POISON: S.POISON, FAIL: S.FAIL}.get(term.look, S.INK)
    name = _font(term.text, ink, S.BOX_FONT_SIZE + 1, italic=True)
    valign = {"above": "BOTTOM", "below": "TOP"}.get(arrives, "MIDDLE")
    width = ' CELLPADDING="3"' if arrives == "side" else f' WIDTH="{cols.box}"'
    high = S.BOX_HEIGHT + (4 if arrives in ("above", "below") else 0)
    cell = f'<TD PORT="b"{width} HEIGHT="{high}" VALIGN="{valign}">{name}</TD>'
    if arrives == "side":
        return _ROW.format(cell)
    side = _side(cols, shape=term.shape, message=term.message)
    return _ROW.format(_wires(cols, []) + cell + (side if term.shape or term.message else ""))


def swatches(entries: tuple[tuple[str, str], ...]) -> str:
    """A row of coloured swatches with their meaning (boxes coloured by `paint`)."""
    cells = "".join(
        f'<TD BGCOLOR="{colour}" BORDER="1" COLOR="{S.BOX_BORDER}" WIDTH="14" HEIGHT="10"></TD>'
        f'<TD ALIGN="LEFT">&#160;{_font(text, S.INK, S.SIDE_FONT_SIZE)}&#160;&#160;</TD>'
        for text, colour in entries
    )
    return f'<TABLE BORDER="0" CELLSPACING="2" CELLPADDING="1"><TR>{cells}</TR></TABLE>'


@dataclass
class Context:
    """What the writer knows about the whole scene while writing one element."""

    cols: dict[str, Columns]
    ordered: set[str]  # ids whose out-arrows must keep their order (see the module doc)
    arrives: dict[str, str]  # output ids: where their arrow comes from (above, below, side)
    entered: set[str]  # ids that an arrow along their row comes into
    spread: set[str] = field(default_factory=set)  # boxes whose arrows fan out into ports
    funnels: set[str] = field(default_factory=set)  # boxes with room above (`Scene.funnels`)


def node_stmt(element: Box | Plus | Fork | Stub | Terminal, ctx: Context) -> str:
    cols = ctx.cols
    if isinstance(element, Box):
        entered = element.id in ctx.entered
        spread, room = element.id in ctx.spread, element.id in ctx.funnels
        pairs = [("label", box_label(element, cols[element.id], entered, spread, room))]
    elif isinstance(element, Terminal):
        arrives = ctx.arrives.get(element.id, "")
        pairs = [("label", terminal_label(element, cols[element.id], arrives))]
    elif isinstance(element, Fork):
        pairs = [("shape", "point"), ("width", "0.05"), ("color", q(S.EDGE))]
    elif isinstance(element, Stub):
        pairs = [
            ("shape", "plaintext"),
            ("margin", "0.02"),
            ("label", "<" + _font(element.text, S.INK, S.SIDE_FONT_SIZE, True) + ">"),
        ]
    else:
        border = {FAIL: S.FAIL, POISON: S.POISON}.get(element.look, S.BOX_BORDER)
        pairs = [
            ("shape", "circle"),
            ("label", q(element.symbol)),
            ("fixedsize", "true"),
            ("width", str(S.PLUS_SIZE)),
            ("height", str(S.PLUS_SIZE)),
            ("style", "filled"),
            ("fillcolor", q(S.PLAIN_FILL)),
            ("color", q(border)),
            ("penwidth", "2" if element.look == FAIL else "1"),
        ]
    tooltip = getattr(element, "tooltip", "")
    if tooltip:
        pairs.append(("tooltip", q(tooltip)))
    if element.id in ctx.ordered:
        pairs.append(("ordering", "out"))
    return f"{q(element.id)} {_attrs(pairs)};"


def plus_message(plus: Plus, indent: str) -> list[str]:
    """A failing `+` has its message in a text node on its right, on the same rank: a circle
    has no cells to hold it, and a floating label could land on the bypass arrow."""
    msg = q(f"{plus.id}/message")
    return [
        f"{indent}{{ rank=same; {q(plus.id)}; "
        f"{msg} [shape=plaintext, label=<{_message(plus.message)}>]; }}",
        f"{indent}{q(plus.id)} -> {msg} [style=invis, weight=0];",
    ]


def count_label(frame: Frame) -> str:
    """A ×N frame's factor, and the group's output if its last row cannot carry it: at the
    frame's top right corner, apart from the shape column, so that ``96×56×56 ×6`` is never read
    as one four-axis shape."""
    ink = S.POISON if frame.look == POISON else S.INK
    text = f'<FONT COLOR="{ink}" POINT-SIZE="{S.FRAME_FONT_SIZE}"><B>{h(frame.title)}</B></FONT>'
    if frame.shape:
        text += '<BR ALIGN="RIGHT"/>' + _font(frame.shape, S.SHAPE, S.SIDE_FONT_SIZE)
    return text


def frame_attrs(frame: Frame) -> list[tuple[str, str]]:
    color = {FAIL: S.FAIL, POISON: S.POISON}.get(frame.look, S.FRAME)
    ink = S.POISON if frame.look == POISON else S.INK
    blue = S.POISON if frame.look == POISON else S.HPARAM
    if frame.kind == "repeat":
        # A ×N around one open block call names the block only on hover: the book's frame
        # around [self-att, ffw] says ×N and nothing else.
        title = count_label(frame)
        pairs = [("style", q("dashed,rounded")), ("labeljust", "r")]
        if frame.block:
            pairs.append(("tooltip", q(f"{frame.block} {frame.hparams}".strip())))
    else:
        # the name, and its arguments in short lines under it, at the top right, where the
        # words beside the boxes are: the data path comes in on the left, under no text
        title = f'<FONT COLOR="{ink}"><B>{h(frame.title)}</B></FONT>'
        for line in wrap(frame.hparams, S.TITLE_WIDTH) if frame.hparams else []:
            title += '<BR ALIGN="RIGHT"/>' + _font(line, blue, S.SIDE_FONT_SIZE)
        # at the top right, as a ×N is: on the left the data path comes in through it
        pairs = [
            ("style", q("rounded,filled")),
            ("fillcolor", q(S.BLOCK_FRAME_FILL)),
            ("labeljust", "r"),
        ]
    if frame.message:
        title += '<BR ALIGN="LEFT"/>' + _message(frame.message)
    return pairs + [
        # Nested frames inherit what is not set again, so every frame sets its label.
        ("label", f"<{title}>" if title else '""'),
        ("labelloc", "t"),
        ("color", q(frame.mark or color)),
        ("penwidth", "2.5" if frame.mark else "2" if frame.look == FAIL else "1"),
        ("margin", "8"),
        ("fontsize", str(S.FRAME_FONT_SIZE)),
    ]


def items(out: list[str], elements: list[Item], ctx: Context, indent: str) -> None:
    """Nodes and frames, nested as the frames nest, each ×N beside its frame."""
    for item in elements:
        if isinstance(item, Frame):
            out.append(f"{indent}subgraph {q(item.id)} {{")
            out.append(f"{indent}  graph {_attrs(frame_attrs(item))};")
            items(out, item.items, ctx, indent + "  ")
            out.append(f"{indent}}}")
        else:
            out.append(indent + node_stmt(item, ctx))
            if isinstance(item, Plus) and item.message:
                out += plus_message(item, indent)


_RANK = {MAIN: 1, FAN: 2}  # every other kind goes round on the left: 0


def ordered(edges: list[Edge]) -> list[Edge]:
    """Per source box: side arrows, then the data path, then fan-outs (see the module doc);
    arrows drawn across a row come last, so that they leave to the right of everything."""
    first: dict[str, int] = {}
    for i, e in enumerate(edges):
        first.setdefault(e.src, i)

    def key(t: tuple[int, Edge]) -> tuple[int, int, int, int, int]:
        i, e = t
        # arrows into one box's ports leave in the ports' order, left to right
        rank = _RANK[FAN] if e.right else _RANK.get(e.kind, 0)
        return (e.route == ACROSS, first[e.src], rank, max(e.port, 0), i)

    return [e for _, e in sorted(enumerate(edges), key=key)]


def _end(eid: str, kinds: dict[str, type], side: str) -> str:
    """Where an arrow attaches: a box's own cell (port ``b``), at ``side`` if given."""
    kind = kinds[eid]
    if kind in (Fork, Stub):
        return q(eid)
    if kind is Plus:
        return f"{q(eid)}:{side}" if side else q(eid)
    return f"{q(eid)}:b:{side}" if side else f"{q(eid)}:b"


def _across(edge: Edge, kinds: dict[str, type], worded: bool) -> tuple[str, str]:
    """An arrow along a row: out of the right of the whole row (past the text beside the box)
    into the left of the next box."""
    kind = kinds[edge.src]
    src = q(edge.src) + (":r:e" if kind in (Box, Terminal) else "" if kind is Fork else ":e")
    if kind is Box and not worded:
        src = f"{q(edge.src)}:b:e"  # nothing written beside the box: leave from its border
    return src, _end(edge.dst, kinds, "w")


def edge_stmt(
    edge: Edge, kinds: dict[str, type], texts: set[str] | None = None, named: bool = False
) -> str:
    """One arrow; ``texts`` are the boxes with words beside them, which an arrow along their
    row must leave past; ``named``: it goes into a named port (mha's Q)."""
    pairs: list[tuple[str, str]] = []
    if edge.route == ACROSS:
        tail, head = _across(edge, kinds, edge.src in (texts or set()))
    elif edge.route == UP:
        # Written from the head to the tail and drawn backwards, so that Graphviz ranks the
        # box the arrow enters above the one it leaves: the U's way back up.
        tail, head = _end(edge.dst, kinds, "s"), _end(edge.src, kinds, "n")
        pairs += [("dir", "back"), ("weight", str(S.MAIN_WEIGHT))]
    elif edge.port >= 0:
        tail, head = _end(edge.src, kinds, "s"), f"{q(edge.dst)}:p{edge.port}:n"
        if edge.kind == MAIN:
            pairs.append(("weight", str(S.MAIN_WEIGHT)))

        if named and edge.kind == FAN:
            # K and V beside Q: left out of the ranking, or Graphviz moves the block's bypass
            # to the right to make room for them
            pairs.append(("constraint", "false"))
    else:
        tail = _end(edge.src, kinds, "s")
        side = "e" if edge.right else "w"
        # A residual's bypass leaves its dot from the dot itself: a compass point there (`:w`)
        # made Graphviz take a mixture's bypass round the right of the whole frame.
        if edge.kind in (MAIN, BRANCH, FAN):
            head = _end(edge.dst, kinds, "n")
        elif kinds[edge.dst] is Plus:
            head = _end(edge.dst, kinds, side)  # into a `+` from the side, as the book draws
        else:
            head = _end(edge.dst, kinds, "")  # onto the box's border, wherever it comes from
        if edge.kind == MAIN:
            pairs.append(("weight", str(S.MAIN_WEIGHT)))
    if edge.label and (edge.route == ACROSS or edge.port >= 0):
        # On a row, the name sits on its own arrow, in the gap it crosses (an external label:
        # an inline one would bend the arrow up to it); into a port, on its way there (at its
        # head it would sit under the box above, the ports are so close).
        pairs.append(("xlabel", "<" + _font(edge.label, S.INK, S.SIDE_FONT_SIZE, True) + ">"))
    elif edge.label:
        # Beside the arrow's end, where it enters the box the name is read by: on its own
        # arrow, not wherever the layout found room.
        pairs += [
            ("headlabel", "<" + _font(edge.label, S.INK, S.SIDE_FONT_SIZE, True) + ">"),
            ("labeldistance", "2"),
            ("labelangle", "-30"),
        ]
    if edge.look == HIDDEN:
        pairs.append(("style", "invis"))
    if edge.look == FAIL:
        pairs += [("color", q(S.FAIL)), ("penwidth", "1.8")]
    elif edge.look == POISON:
        pairs += [("color", q(S.POISON)), ("style", "dashed")]
    attrs = f" {_attrs(pairs)}" if pairs else ""
    return f"{tail} -> {head}{attrs};"


def legend(scene: Scene) -> str:
    """Under the figure: the colours `paint` laid, the conventions said once, then a message
    that belongs to no box."""
    lines = [
        _font(line, S.HPARAM, S.SIDE_FONT_SIZE) + '<BR ALIGN="LEFT"/>' for line in scene.legend
    ]
    lines += [
        _font(line, S.INK, S.SIDE_FONT_SIZE) + '<BR ALIGN="LEFT"/>'
        for line in wrap(scene.remark, S.MESSAGE_WIDTH)
        if scene.remark
    ]
    if scene.note:
        lines.append(_message(scene.note))
    if not scene.swatches:
        return "".join(lines)
    # One HTML label holds either text or one table: the swatches' table, then the text in a
    # cell under it.
    text = f'<TR><TD ALIGN="LEFT" BALIGN="LEFT">{"".join(lines)}</TD></TR>' if lines else ""
    return (
        '<TABLE BORDER="0" CELLSPACING="0" CELLPADDING="0">'
        f'<TR><TD ALIGN="LEFT">{swatches(scene.swatches)}</TD></TR>{text}</TABLE>'
    )


def write(scene: Scene) -> str:
    """The DOT text; the same scene always gives the same bytes."""
    kinds = {eid: type(e) for eid, e in scene.elements().items()}
    edges = ordered(scene.edges)
    sideways = {e.src for e in edges if e.kind not in (MAIN, FAN) and not e.route}
    outputs = {t.id for t in scene.outputs}
    arrives = {
        e.dst: {ACROSS: "side", UP: "below"}.get(e.route, "above")
        for e in edges
        if e.dst in outputs
    }
    entered = {e.dst for e in edges if e.route == ACROSS}
    named = {b.id for b in scene.boxes() if any(b.ports)}
    spread = {e.src for e in edges if e.dst in named and e.kind == FAN}
    ctx = Context(columns(scene), sideways, arrives, entered, spread, scene.funnels)
    font = q(S.FONT)
    out = [
        f"digraph {q(scene.name)} {{",
        f"  graph [rankdir=TB, newrank=true, nodesep={S.NODESEP}, "
        f"ranksep={S.RANKSEP}, fontname={font}, fontsize={S.SIDE_FONT_SIZE}, "
        'bgcolor="white", pad=0.2, forcelabels=true, charset="UTF-8"];',
        f"  node [shape=plain, fontname={font}, fontsize={S.BOX_FONT_SIZE}, fontcolor={q(S.INK)}];",
        f"  edge [color={q(S.EDGE)}, arrowsize=0.6, penwidth=1, fontname={font}];",
    ]
    if scene.inputs:
        # Inputs side by side in the order the spec declares them (the invisible arrows hold
        # them so), the order a reader expects their streams in; at the very top, unless a U's
        # way back climbs higher than its input.
        top = "" if any(e.route == UP for e in edges) else " rank=min;"
        out.append(f"  {{{top}")
        out += [f"    {node_stmt(t, ctx)}" for t in scene.inputs]
        out += [
            f"    {q(a.id)} -> {q(b.id)} [style=invis];"
            for a, b in zip(scene.inputs, scene.inputs[1:], strict=False)
        ]
        out.append("  }")
    items(out, scene.items, ctx, "  ")
    out += [f"  {node_stmt(t, ctx)}" for t in scene.outputs]
    out += [f"  {{ rank=same; {'; '.join(q(i) for i in row)}; }}" for row in scene.rows]
    texts = {b.id for b in scene.boxes() if b.hparams or b.shape or b.message}
    out += ["  " + edge_stmt(e, kinds, texts, e.dst in named and e.port >= 0) for e in edges]
    if scene.legend or scene.note or scene.remark or scene.swatches:
        out.append(f"  graph [labelloc=b, labeljust=l, label=<{legend(scene)}>];")
    out.append("}")
    return "\n".join(out) + "\n"

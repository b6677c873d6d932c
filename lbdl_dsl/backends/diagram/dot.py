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

from dataclasses import dataclass
from html import escape

from lbdl_dsl.backends.diagram import style as S
from lbdl_dsl.backends.diagram.columns import Columns, columns
from lbdl_dsl.backends.diagram.labels import wrap
from lbdl_dsl.backends.diagram.scene import (
    BRANCH,
    FAIL,
    FAN,
    MAIN,
    PARAM,
    POISON,
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

_ROW = '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR>{}</TR></TABLE>>'


def q(text: str) -> str:
    """A quoted DOT identifier."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def h(text: str) -> str:
    """Text inside an HTML-like label."""
    return escape(text, quote=True)


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
    tag: str = "",
    message: str = "",
) -> str:
    """The cells right of a box: hyper-parameters in blue, the shape, a frame's ×N, an error."""
    cells = [
        f'<TD WIDTH="{S.GAP}"></TD>',
        f'<TD ALIGN="LEFT" WIDTH="{cols.hparams}">{_font(hparams, blue, S.SIDE_FONT_SIZE)}</TD>',
        f'<TD WIDTH="{S.SHAPE_GAP if cols.hparams and cols.shape else 0}"></TD>',
        f'<TD ALIGN="RIGHT" WIDTH="{cols.shape}">{_font(shape, S.SHAPE, S.SIDE_FONT_SIZE)}</TD>',
    ]
    if tag:
        cells += [
            f'<TD WIDTH="{S.SHAPE_GAP}"></TD>',
            f'<TD ALIGN="RIGHT">{_font(tag, S.INK, S.FRAME_FONT_SIZE)}</TD>',
        ]
    if message:
        cells += [f'<TD WIDTH="{S.GAP}"></TD>', f'<TD ALIGN="LEFT">{_message(message)}</TD>']
    return "".join(cells)


def box_label(box: Box, cols: Columns, tag: str = "") -> str:
    fill = box.fill or {PARAM: S.PARAM_FILL, POISON: S.POISON_FILL}.get(box.look, S.PLAIN_FILL)
    border = {FAIL: S.FAIL, POISON: S.POISON}.get(box.look, S.BOX_BORDER)
    ink = S.POISON if box.look == POISON else S.INK
    dashed = ",dashed" if box.look == POISON else ""
    height = S.TALL_HEIGHT if box.tall else S.BOX_HEIGHT
    name = _font(box.name, ink, S.BOX_FONT_SIZE)
    inner = (
        f'<TABLE STYLE="rounded{dashed}" BORDER="{2 if box.look == FAIL else 1}" '
        f'CELLBORDER="0" CELLSPACING="0" CELLPADDING="0" BGCOLOR="{fill}" COLOR="{border}">'
        f'<TR><TD WIDTH="{cols.box}" HEIGHT="{height}">{name}</TD>'
        "</TR></TABLE>"
    )
    blue = S.POISON if box.look == POISON else S.HPARAM
    side = _side(cols, box.hparams, box.shape, blue, tag, box.message)
    return _ROW.format(f'<TD PORT="b">{inner}</TD>{side}')


def terminal_label(term: Terminal, cols: Columns, output: bool) -> str:
    """An input's or output's name; an output's sits low in its cell, clear of the arrowhead
    (the hat of Ŷ reaches above the capitals)."""
    ink = {POISON: S.POISON, FAIL: S.FAIL}.get(term.look, S.INK)
    name = _font(term.text, ink, S.BOX_FONT_SIZE + 1, italic=True)
    valign = "BOTTOM" if output else "MIDDLE"
    cell = (
        f'<TD PORT="b" WIDTH="{cols.box}" HEIGHT="{S.BOX_HEIGHT + (4 if output else 0)}" '
        f'VALIGN="{valign}">{name}</TD>'
    )
    side = _side(cols, shape=term.shape, message=term.message)
    return _ROW.format(cell + (side if term.shape or term.message else ""))


def legend(entries: tuple[tuple[str, str], ...]) -> str:
    """A row of coloured swatches with their meaning (boxes coloured by sharding)."""
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


def node_stmt(element: Box | Plus | Fork | Stub | Terminal, ctx: Context, tag: str = "") -> str:
    cols = ctx.cols
    if isinstance(element, Box):
        pairs = [("label", box_label(element, cols[element.id], tag))]
    elif isinstance(element, Terminal):
        output = element.id.startswith("output:")
        pairs = [("label", terminal_label(element, cols[element.id], output))]
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
            ("label", q("+")),
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


def tag_row(frame: Frame) -> Box | None:
    """The box whose row carries a ×N frame's factor at its right, as the book writes
    ``resblock ×2``; None when the frame ends otherwise (its label then carries it)."""
    last = frame.items[-1] if frame.items else None
    if frame.kind == "repeat" and not frame.message and isinstance(last, Box):
        return last
    return None


def frame_attrs(frame: Frame) -> list[tuple[str, str]]:
    color = {FAIL: S.FAIL, POISON: S.POISON}.get(frame.look, S.FRAME)
    ink = S.POISON if frame.look == POISON else S.INK
    if frame.kind == "repeat":
        title = "" if tag_row(frame) else _font(frame.title, ink, S.FRAME_FONT_SIZE)
        pairs = [("style", q("dashed,rounded")), ("labeljust", "r")]
    else:
        title = f'<FONT COLOR="{ink}"><B>{h(frame.title)}</B></FONT>'
        if frame.hparams:
            blue = S.POISON if frame.look == POISON else S.HPARAM
            title += "  " + _font(frame.hparams, blue, S.SIDE_FONT_SIZE)
        pairs = [
            ("style", q("rounded,filled")),
            ("fillcolor", q(S.BLOCK_FRAME_FILL)),
            ("labeljust", "l"),
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


def items(
    out: list[str], elements: list[Item], ctx: Context, indent: str, tag: tuple[str, str] = ("", "")
) -> None:
    """Nodes and frames, nested as the frames nest; ``tag`` is (box id, ×N) for one row."""
    for item in elements:
        if isinstance(item, Frame):
            out.append(f"{indent}subgraph {q(item.id)} {{")
            out.append(f"{indent}  graph {_attrs(frame_attrs(item))};")
            row = tag_row(item)
            items(out, item.items, ctx, indent + "  ", (row.id, item.title) if row else tag)
            out.append(f"{indent}}}")
        else:
            out.append(indent + node_stmt(item, ctx, tag[1] if item.id == tag[0] else ""))
            if isinstance(item, Plus) and item.message:
                out += plus_message(item, indent)


_RANK = {MAIN: 1, FAN: 2}  # every other kind goes round on the left: 0


def ordered(edges: list[Edge]) -> list[Edge]:
    """Per source box: side arrows, then the data path, then fan-outs (see the module doc)."""
    first: dict[str, int] = {}
    for i, e in enumerate(edges):
        first.setdefault(e.src, i)
    keyed = sorted(enumerate(edges), key=lambda t: (first[t[1].src], _RANK.get(t[1].kind, 0), t[0]))
    return [e for _, e in keyed]


def edge_stmt(edge: Edge, kinds: dict[str, type]) -> str:
    def end(eid: str, side: str) -> str:
        kind = kinds[eid]
        if kind in (Fork, Stub):
            return q(eid)
        if kind is Plus:
            return f"{q(eid)}:{side}"
        return f"{q(eid)}:b:{side}" if side else f"{q(eid)}:b"

    if edge.kind in (MAIN, BRANCH, FAN):
        head = end(edge.dst, "n")
    elif kinds[edge.dst] is Plus:
        head = end(edge.dst, "w")  # into a `+` from the side, as the book draws a bypass
    else:
        head = end(edge.dst, "")  # onto the box's border, wherever the arrow comes from
    pairs: list[tuple[str, str]] = []
    if edge.kind == MAIN:
        pairs.append(("weight", str(S.MAIN_WEIGHT)))
    if edge.label:
        # Placed once the layout is done, beside the arrow where nothing else is: a label
        # inside the layout would double every rank and space the boxes unevenly.
        pairs.append(("xlabel", "<" + _font(edge.label, S.INK, S.SIDE_FONT_SIZE, True) + ">"))
    if edge.look == FAIL:
        pairs += [("color", q(S.FAIL)), ("penwidth", "1.8")]
    elif edge.look == POISON:
        pairs += [("color", q(S.POISON)), ("style", "dashed")]
    attrs = f" {_attrs(pairs)}" if pairs else ""
    return f"{end(edge.src, 's')} -> {head}{attrs};"


def write(scene: Scene) -> str:
    """The DOT text; the same scene always gives the same bytes."""
    kinds = {eid: type(e) for eid, e in scene.elements().items()}
    edges = ordered(scene.edges)
    ctx = Context(columns(scene), {e.src for e in edges if e.kind not in (MAIN, FAN)})
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
        # them so), the order a reader expects their streams in.
        out.append("  { rank=min;")
        out += [f"    {node_stmt(t, ctx)}" for t in scene.inputs]
        out += [
            f"    {q(a.id)} -> {q(b.id)} [style=invis];"
            for a, b in zip(scene.inputs, scene.inputs[1:], strict=False)
        ]
        out.append("  }")
    items(out, scene.items, ctx, "  ")
    out += [f"  {node_stmt(t, ctx)}" for t in scene.outputs]
    out += ["  " + edge_stmt(e, kinds) for e in edges]
    if scene.note:
        out.append(f"  graph [labelloc=b, labeljust=l, label=<{_message(scene.note)}>];")
    elif scene.legend:
        out.append(f"  graph [labelloc=b, labeljust=l, label=<{legend(scene.legend)}>];")
    out.append("}")
    return "\n".join(out) + "\n"

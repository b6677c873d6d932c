"""A `Scene` as a DOT document, with the book's look.

Each box is one Graphviz node whose HTML-like label is a row of cells: the box itself (port
``b``), then the blue hyper-parameters, then the output shape. Arrows attach to the box's port
and the arrows of the data path weigh heavily, which makes Graphviz line the boxes up in a
straight column however long the text beside them; every row uses the same column widths, so
the shapes line up at the far right as in the book. Side arrows (skip connections, residual
bypasses) are written before the data path's arrows from the same box, and ``ordering=out``
then keeps them to its left, outside the boxes they go round.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from lbdl_dsl.backends.diagram import style as S
from lbdl_dsl.backends.diagram.labels import wrap
from lbdl_dsl.backends.diagram.scene import (
    BRANCH,
    FAIL,
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
    Terminal,
)


@dataclass(frozen=True)
class Columns:
    """Widths, in points, shared by every row of one diagram."""

    box: int
    hparams: int
    shape: int


def columns(scene: Scene) -> Columns:
    """Size the columns from the widest text in each, so that no row needs to grow."""
    boxes = scene.boxes()
    names = [S.text_width(b.name, S.BOX_FONT_SIZE) for b in boxes]
    names += [S.text_width(t.text, S.BOX_FONT_SIZE) for t in scene.inputs + scene.outputs]
    wide = [b for b in boxes if not b.narrow]
    hps = [S.text_width(b.hparams, S.SIDE_FONT_SIZE) for b in wide]
    shapes = [S.text_width(b.shape, S.SIDE_FONT_SIZE) for b in wide]
    shapes += [S.text_width(t.shape, S.SIDE_FONT_SIZE) for t in scene.inputs]
    return Columns(
        max([S.BOX_MIN_WIDTH, *(round(w) + 2 * S.BOX_PAD for w in names)]),
        max([0, *(round(w) + 2 for w in hps)]),
        max([0, *(round(w) + 2 for w in shapes)]),
    )


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


def _side(hparams: str, shape: str, cols: Columns, narrow: bool, message: str = "",
          tag: str = "", blue: str = S.HPARAM) -> str:
    """The cells right of a box: hyper-parameters in blue, the shape, a frame's ×N, an error."""
    hp_w = "" if narrow else f' WIDTH="{cols.hparams}"'
    sh_w = "" if narrow else f' WIDTH="{cols.shape}"'
    cells = [
        f'<TD WIDTH="{S.GAP}"></TD>',
        f'<TD ALIGN="LEFT"{hp_w}>{_font(hparams, blue, S.SIDE_FONT_SIZE)}</TD>',
        f'<TD WIDTH="{S.SHAPE_GAP if (shape or not narrow) else 0}"></TD>',
        f'<TD ALIGN="RIGHT"{sh_w}>{_font(shape, S.SHAPE, S.SIDE_FONT_SIZE)}</TD>',
    ]
    if tag:
        cells += [f'<TD WIDTH="{S.GAP}"></TD>',
                  f'<TD ALIGN="RIGHT">{_font(tag, S.INK, S.FRAME_FONT_SIZE)}</TD>']
    if message:
        cells += [f'<TD WIDTH="{S.GAP}"></TD>', f'<TD ALIGN="LEFT">{_message(message)}</TD>']
    return "".join(cells)


_ROW = '<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR>{}</TR></TABLE>>'


def box_label(box: Box, cols: Columns, tag: str = "") -> str:
    fill = {PARAM: S.PARAM_FILL, POISON: S.POISON_FILL}.get(box.look, S.PLAIN_FILL)
    border = {FAIL: S.FAIL, POISON: S.POISON}.get(box.look, S.BOX_BORDER)
    ink = S.POISON if box.look == POISON else S.INK
    width = 2 if box.look == FAIL else 1
    dashed = ",dashed" if box.look == POISON else ""
    height = S.TALL_HEIGHT if box.tall else S.BOX_HEIGHT
    inner = (
        f'<TABLE STYLE="rounded{dashed}" BORDER="{width}" CELLBORDER="0" CELLSPACING="0" '
        f'CELLPADDING="0" BGCOLOR="{fill}" COLOR="{border}"><TR>'
        f'<TD WIDTH="{cols.box}" HEIGHT="{height}">{_font(box.name, ink, S.BOX_FONT_SIZE)}</TD>'
        "</TR></TABLE>"
    )
    blue = S.POISON if box.look == POISON else S.HPARAM
    side = _side(box.hparams, box.shape, cols, box.narrow, box.message, tag, blue)
    return _ROW.format(f'<TD PORT="b">{inner}</TD>{side}')


def terminal_label(term: Terminal, cols: Columns) -> str:
    ink = S.POISON if term.look == POISON else S.INK
    name = _font(term.text, ink, S.BOX_FONT_SIZE + 1, italic=True)
    cell = f'<TD PORT="b" WIDTH="{cols.box}" HEIGHT="{S.BOX_HEIGHT}">{name}</TD>'
    return _ROW.format(cell + _side("", term.shape, cols, False))


def _attrs(pairs: list[tuple[str, str]]) -> str:
    return "[" + ", ".join(f"{k}={v}" for k, v in pairs) + "]"


def node_stmt(element: Box | Plus | Fork | Terminal, cols: Columns, tag: str = "") -> str:
    if isinstance(element, Box):
        pairs = [("label", box_label(element, cols, tag))]
        if element.tooltip:
            pairs.append(("tooltip", q(element.tooltip)))
    elif isinstance(element, Terminal):
        pairs = [("label", terminal_label(element, cols))]
    elif isinstance(element, Fork):
        pairs = [("shape", "point"), ("width", "0.05"), ("color", q(S.EDGE))]
    else:
        border = {FAIL: S.FAIL, POISON: S.POISON}.get(element.look, S.BOX_BORDER)
        pairs = [
            ("shape", "circle"), ("label", q("+")), ("fixedsize", "true"),
            ("width", str(S.PLUS_SIZE)), ("height", str(S.PLUS_SIZE)), ("style", "filled"),
            ("fillcolor", q(S.PLAIN_FILL)), ("color", q(border)),
            ("penwidth", "2" if element.look == FAIL else "1"),
        ]
        if element.tooltip:
            pairs.append(("tooltip", q(element.tooltip)))
    return f"{q(element.id)} {_attrs(pairs)};"


def tag_row(frame: Frame) -> Box | None:
    """The box whose row carries a ×N frame's factor at its right, as the book writes
    ``resblock ×2``; None when the frame ends with something else (its label then says it)."""
    last = frame.items[-1] if frame.items else None
    if frame.kind == "repeat" and not frame.message and isinstance(last, Box) and not last.narrow:
        return last
    return None


def frame_attrs(frame: Frame) -> list[tuple[str, str]]:
    color = {FAIL: S.FAIL, POISON: S.POISON}.get(frame.look, S.FRAME)
    ink = S.POISON if frame.look == POISON else S.INK
    blue = S.POISON if frame.look == POISON else S.HPARAM
    if frame.kind == "repeat":
        title = "" if tag_row(frame) else _font(frame.title, ink, S.FRAME_FONT_SIZE)
        pairs = [("style", q("dashed,rounded")), ("labeljust", "r")]
    else:
        title = f'<FONT COLOR="{ink}"><B>{h(frame.title)}</B></FONT>'
        if frame.hparams:
            title += "  " + _font(frame.hparams, blue, S.SIDE_FONT_SIZE)
        pairs = [("style", q("rounded,filled")), ("fillcolor", q(S.BLOCK_FRAME_FILL)),
                 ("labeljust", "l")]
    if frame.message:
        title += '<BR ALIGN="LEFT"/>' + _message(frame.message)
    return pairs + [
        ("label", f"<{title}>" if title else '""'), ("labelloc", "t"), ("color", q(color)),
        ("penwidth", "2" if frame.look == FAIL else "1"), ("margin", "8"),
        ("fontsize", str(S.FRAME_FONT_SIZE)),
    ]


def plus_message(plus: Plus, indent: str) -> list[str]:
    """A failing `+` has its message in a text node on its right, on the same rank: a circle
    has no cells to hold it, and a floating label could land on the bypass arrow."""
    label = "<" + _message(plus.message) + ">"
    msg = q(f"{plus.id}/message")
    return [
        f"{indent}{{ rank=same; {q(plus.id)}; {msg} [shape=plaintext, label={label}]; }}",
        f"{indent}{q(plus.id)} -> {msg} [style=invis, weight=0];",
    ]


def items(out: list[str], elements: list[Item], cols: Columns, indent: str,
          tag: tuple[str, str] = ("", "")) -> None:
    """Nodes and frames, nested as the frames nest; ``tag`` is (box id, ×N) for one row."""
    for item in elements:
        if isinstance(item, Frame):
            out.append(f"{indent}subgraph {q(item.id)} {{")
            out.append(f"{indent}  graph {_attrs(frame_attrs(item))};")
            row = tag_row(item)
            items(out, item.items, cols, indent + "  ", (row.id, item.title) if row else tag)
            out.append(f"{indent}}}")
        else:
            out.append(indent + node_stmt(item, cols, tag[1] if item.id == tag[0] else ""))
            if isinstance(item, Plus) and item.message:
                out += plus_message(item, indent)


def ordered(edges: list[Edge]) -> list[Edge]:
    """Side arrows of a box before its data-path arrow: ``ordering=out`` puts them left."""
    first: dict[str, int] = {}
    for i, e in enumerate(edges):
        first.setdefault(e.src, i)
    keyed = sorted(enumerate(edges), key=lambda t: (first[t[1].src], t[1].kind == MAIN, t[0]))
    return [e for _, e in keyed]


def edge_stmt(edge: Edge, kinds: dict[str, type]) -> str:
    def port(eid: str, side: str) -> str:
        if kinds[eid] is Fork:
            return q(eid)
        return f"{q(eid)}:{side}" if kinds[eid] is Plus else f"{q(eid)}:b:{side}"

    head = "n" if edge.kind in (MAIN, BRANCH) else "w"
    pairs: list[tuple[str, str]] = []
    if edge.kind == MAIN:
        pairs.append(("weight", str(S.MAIN_WEIGHT)))
    if edge.label:
        pairs += [("headlabel", "<" + _font(edge.label, S.INK, S.SIDE_FONT_SIZE, True) + ">"),
                  ("labeldistance", "1.6"), ("labelangle", "40")]
    if edge.look == FAIL:
        pairs += [("color", q(S.FAIL)), ("penwidth", "1.8")]
    elif edge.look == POISON:
        pairs += [("color", q(S.POISON)), ("style", "dashed")]
    attrs = f" {_attrs(pairs)}" if pairs else ""
    return f"{port(edge.src, 's')} -> {port(edge.dst, head)}{attrs};"


def write(scene: Scene) -> str:
    """The DOT text; the same scene always gives the same bytes."""
    cols = columns(scene)
    out = [
        f"digraph {q(scene.name)} {{",
        f"  graph [rankdir=TB, ordering=out, newrank=true, nodesep={S.NODESEP}, "
        f"ranksep={S.RANKSEP}, fontname={q(S.FONT)}, fontsize={S.SIDE_FONT_SIZE}, "
        f'bgcolor="white", pad=0.2, forcelabels=true, charset="UTF-8"];',
        f"  node [shape=plain, fontname={q(S.FONT)}, fontsize={S.BOX_FONT_SIZE}, "
        f"fontcolor={q(S.INK)}];",
        f"  edge [color={q(S.EDGE)}, arrowsize=0.6, penwidth=1, fontname={q(S.FONT)}];",
    ]
    if scene.inputs:
        out.append("  { rank=min;")
        out += [f"    {node_stmt(t, cols)}" for t in scene.inputs]
        out.append("  }")
    items(out, scene.items, cols, "  ")
    if scene.outputs:
        out.append("  { rank=max;")
        out += [f"    {node_stmt(t, cols)}" for t in scene.outputs]
        out.append("  }")
    kinds = {eid: type(e) for eid, e in scene.elements().items()}
    out += ["  " + edge_stmt(e, kinds) for e in ordered(scene.edges)]
    if scene.note:
        out.append(f"  graph [labelloc=b, labeljust=l, label=<{_message(scene.note)}>];")
    out.append("}")
    return "\n".join(out) + "\n"

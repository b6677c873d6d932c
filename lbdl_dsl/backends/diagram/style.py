"""How the diagram looks: one table of fonts, colours and sizes, after the book's figures.

Every colour and size the DOT writer uses comes from here, so that the same spec always gives the
same bytes and a change of look is a change of this file alone. Sizes are in points (1/72 inch),
as Graphviz's HTML-like labels take them.
"""

from __future__ import annotations

FONT = "Helvetica,Arial,sans-serif"
BOX_FONT_SIZE = 12  # the layer's name inside its box
SIDE_FONT_SIZE = 11  # hyper-parameters and shapes beside the box
FRAME_FONT_SIZE = 12  # ×N and block names on frames

INK = "#1a1a1a"  # text and arrows
EDGE = "#3a3a3a"
HPARAM = "#1f4fbf"  # hyper-parameters, in blue as the book writes them
SHAPE = "#1a1a1a"
BOX_BORDER = "#51627f"
PARAM_FILL = "#c9d8ee"  # boxes with trainable parameters: darker
PLAIN_FILL = "#eef3fa"  # parameter-free boxes: light
FRAME = "#51627f"  # dashed ×N frames and solid block frames
BLOCK_FRAME_FILL = "#fbfcfe"
FAIL = "#d0021b"  # the box where checking stopped, the arrow into it, the message
POISON = "#a8a8a8"  # boxes after a failure: never checked
POISON_FILL = "#f4f4f4"

BOX_MIN_WIDTH = 72  # every box of one diagram has the same width, at least this
BOX_PAD = 10  # room left and right of the widest name
BOX_HEIGHT = 20  # a plain layer
TALL_HEIGHT = 34  # a composite box (resblock, self-att, ffw): the book draws them taller
PORT_HEIGHT = 11  # the row of named input points (Q, K, V) along the top of a box
PORT_FONT_SIZE = 9
FAN_ROOM = 14  # under a box whose arrows fan out into Q, K and V
FUNNEL_ROOM = 40  # above a mixture's Σ, where its lanes' arrows converge
GAP = 9  # between the box and its hyper-parameters
WIRE_GAP = 4  # between a tensor read by name (on the left) and its box
SHAPE_GAP = 14  # between the hyper-parameters and the shape column
PLUS_SIZE = 0.24  # the diameter of a `+` node, in inches
TITLE_WIDTH = 16  # characters per line of a block frame's arguments, under its name
MESSAGE_WIDTH = 56  # characters per line of an error message beside its box

NODESEP = 0.3  # inches between side-by-side columns
RANKSEP = 0.2  # inches between boxes in a column
MAIN_WEIGHT = 100  # keeps the data path straight: Graphviz aligns what it weighs heavily

WIDTH_MARGIN = 1.05  # text columns are sized this much wider than `text_width` estimates

# Liberation Sans / Arial advance widths in em, for the few characters whose width is far from
# the average; used to size the label columns so that shapes line up at the far right.
_NARROW = set("fijlrtI.,:;'!()[]|/ ")
_WIDE = set("mwMW")
_CAPS = 0.68
_LOWER = 0.52
_DIGIT = 0.556


def text_width(text: str, size: float) -> float:
    """An estimate of ``text``'s width in points; Graphviz grows a cell that turns out wider."""
    em = 0.0
    for ch in text:
        if ch in _NARROW:
            em += 0.3
        elif ch in _WIDE:
            em += 0.85
        elif ch.isdigit():
            em += _DIGIT
        elif ch.isupper():
            em += _CAPS
        else:
            em += _LOWER
    return em * size

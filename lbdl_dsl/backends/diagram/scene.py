"""What the diagram shows, before any DOT is written: boxes, `+` nodes, labels, frames, arrows.

The walk over the checked tree (`walk`) decides *what* is drawn and the writer (`dot`) decides
*how*; this small vocabulary between them keeps each side testable and lets the writer size the
label columns once it has seen every box. Element ids are instance paths (``dresblock_1/
residual_0/conv_2d_0``), so they are stable from run to run and say where a box comes from.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Union

# How an element is painted: with trainable parameters, without, the box where checking stopped,
# or a box after it that was never checked; an arrow may also be HIDDEN (it only holds its
# head in place: the "⋯" between a mixture's lanes).
PARAM, PLAIN, FAIL, POISON, HIDDEN = "param", "plain", "fail", "poison", "hidden"


@dataclass
class Box:
    """One layer or collapsed block: a box, its blue hyper-parameters, its output shape."""

    id: str
    name: str
    hparams: str = ""
    shape: str = ""
    look: str = PLAIN
    tall: bool = False  # a composite (self-att, ffw, a block call): drawn taller
    tooltip: str = ""
    message: str = ""
    trainable: bool = False  # filled dark, even where checking failed (its kind has weights)
    wires: list[str] = field(default_factory=list)  # tensors read by name, written on its left
    fill: str = ""  # a colour that overrides the look's (boxes coloured by sharding)
    # The points along its top where arrows come in, left to right, with their names (mha's
    # Q, K, V; "" for a box whose inputs only need arrowheads apart): set by the walk for a
    # registry's named ports, by `layout` for any box that reads more than one arrow.
    ports: list[str] = field(default_factory=list)


@dataclass
class Plus:
    """A small circle with a symbol: the `+` of a residual group, or a box whose registry entry
    draws it as a glyph (``+(X)``: `Layer.glyph`)."""

    id: str
    look: str = PLAIN
    tooltip: str = ""
    message: str = ""
    symbol: str = "+"


@dataclass
class Fork:
    """A dot where a residual group's input splits into its path and the arrow that bypasses
    it; drawn inside the group's frames so that the bypass stays inside them too."""

    id: str


@dataclass
class Stub:
    """A tensor's name written where it is read, for a tensor that many boxes read from the
    side (a diffusion U-Net's time embedding): arrows from far away would cross everything."""

    id: str
    text: str


@dataclass
class Terminal:
    """A model input or output, written as plain text (``X``, ``Ŷ``) above or below the boxes."""

    id: str
    text: str
    shape: str = ""
    look: str = PLAIN
    message: str = ""


@dataclass
class Frame:
    """A dashed ``×N`` frame around one copy, or a solid frame around an expanded block call.

    A ×N frame whose one copy is an open block call is drawn as one frame: the dashed ×N frame
    around the block's boxes, as the book draws ``[self-att, ffw] ×N``; the block's name and
    arguments (``block``, ``hparams``) are shown on hover. ``shape`` is what leaves a ×N frame when
    its copies change the shape (DenseNet's 256×56×56 after six layers that each add 32)."""

    id: str
    kind: str  # "repeat" | "block" | "experts" (a mixture, drawn as a block is)
    title: str  # "×2", or the block's name
    hparams: str = ""
    items: list[Item] = field(default_factory=list)
    look: str = PLAIN
    message: str = ""
    block: str = ""  # a ×N frame around an open block call: the block's name
    shape: str = ""
    mark: str = ""  # a border colour laid over the look (`paint`: a frame lbdl diff changed)


Item = Union[Box, Plus, Fork, Stub, Frame]

MAIN, SIDE, BYPASS, BRANCH, FAN = "main", "side", "bypass", "branch", "fan"


@dataclass
class Edge:
    """An arrow. ``main`` carries the flowing tensor straight down; ``side`` a tensor used again
    further on (a skip connection, Z into cross-attention); ``bypass`` a residual's input (or its
    shortcut's output) into its `+`; ``branch`` a residual's input into its shortcut path, which
    runs beside the main one; ``fan`` the flowing tensor into a second column that reads it
    (``from m32`` in a detector's heads), which only one column can continue straight down.
    ``look`` says how the arrow is painted."""

    src: str
    dst: str
    kind: str = MAIN
    label: str = ""
    look: str = PLAIN
    route: str = ""  # set by `layout`: "" (as the kind says), ACROSS or UP
    name: str = ""  # the tensor's name, if it has one, whether or not it is written
    port: int = -1  # which of its box's `Box.ports` it comes into; -1: the box's top middle
    right: bool = False  # a bypass drawn on the right (side inputs come in from the left)


ACROSS, UP = "across", "up"  # an arrow drawn sideways on one row, or upward (a U's way back)


@dataclass
class Scene:
    """A whole diagram: inputs at the top, items in data-flow order, outputs at the bottom."""

    name: str
    inputs: list[Terminal] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    outputs: list[Terminal] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    note: str = ""  # a diagnostic that belongs to no box (a failed count assertion)
    legend: list[str] = field(default_factory=list)  # conventions, written once under it
    remark: str = ""  # what the figure leaves unchecked, by design (a block drawn on its own)
    rows: list[list[str]] = field(default_factory=list)  # set by `layout`: ids on one row
    swatches: tuple[tuple[str, str], ...] = ()  # (text, colour) under the figure (paint)
    warnings: list[str] = field(default_factory=list)  # what was asked and not drawn (stderr)
    loose: set[str] = field(default_factory=set)  # boxes whose words are sized alone (`columns`)
    funnels: set[str] = field(default_factory=set)  # boxes whose side arrows come a rank apart
    # The walk's `Origin` of each drawn path (a box's id; a frame's id after ``cluster:``):
    # not drawn, read by what links the figure back to the spec (lbdl serve)
    origins: dict[str, Any] = field(default_factory=dict)

    def elements(self) -> dict[str, Item | Terminal]:
        """Every element by id, frames included, in drawing order."""
        out: dict[str, Item | Terminal] = {t.id: t for t in self.inputs}
        out.update((item.id, item) for item, _ in walk_items(self.items))
        out.update((t.id, t) for t in self.outputs)
        return out

    def boxes(self) -> list[Box]:
        return [e for e in self.elements().values() if isinstance(e, Box)]


def walk_items(
    items: list[Item], frames: tuple[str, ...] = ()
) -> Iterator[tuple[Item, tuple[str, ...]]]:
    """Every item, frames and what they hold, in drawing order, with the ids of the frames
    around it (outermost first). At module level: a nested function that calls itself is a
    reference cycle that keeps the scene alive until the cycle collector runs."""
    for item in items:
        yield item, frames
        if isinstance(item, Frame):
            yield from walk_items(item.items, (*frames, item.id))

"""Tensors that many boxes read from the side are drawn by name, not by arrow.

A time embedding read by every block of a diffusion U-Net, or a model input read at five
places, would be five long arrows crossing the figure. From `BROADCAST` side readers on, each
reader instead gets the tensor's name with a short arrow, and the box that makes the tensor gets
the name below it, as one labels a wire in a circuit diagram. A box writes the name in its own
row, left of it (``temb →``), so that it stays beside the box wherever the box goes; a `+`,
which has no row, gets the name in a text node above it.
"""

from __future__ import annotations

from lbdl_dsl.backends.diagram.scene import MAIN, SIDE, Box, Edge, Frame, Item, Scene, Stub

BROADCAST = 3


def _insert(items: list[Item], anchor: str, new: Item, after: bool) -> bool:
    """Put ``new`` beside the element ``anchor``, in the same frame; False if it is not here."""
    for i, item in enumerate(items):
        if item.id == anchor:
            items.insert(i + 1 if after else i, new)
            return True
        if isinstance(item, Frame) and _insert(item.items, anchor, new, after):
            return True
    return False


def name_broadcasts(scene: Scene) -> None:
    """Replace the side arrows of widely read tensors by names at both ends."""
    readers: dict[str, list[Edge]] = {}
    for edge in scene.edges:
        if edge.kind == SIDE and edge.label:
            readers.setdefault(edge.src, []).append(edge)
    inputs = {t.id for t in scene.inputs}
    elements = scene.elements()
    for src, edges in readers.items():
        if len(edges) < BROADCAST:
            continue
        name = edges[0].label
        for n, edge in enumerate(edges):
            reader = elements.get(edge.dst)
            if isinstance(reader, Box):
                reader.wires.append(name)
                scene.edges.remove(edge)
                continue
            stub = Stub(f"{edge.dst}/{name}#{n}", name)
            _insert(scene.items, edge.dst, stub, after=False)
            edge.src, edge.label = stub.id, ""
        if src not in inputs:  # an input's name is written at the top already
            tag = Stub(f"{src}/{name}", name)
            _insert(scene.items, src, tag, after=True)
            scene.edges.append(Edge(src, tag.id, MAIN))


__all__ = ["BROADCAST", "name_broadcasts"]

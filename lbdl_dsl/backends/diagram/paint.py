"""Colours laid over a finished scene: boxes and frames named by instance path, and a legend.

Other tools say things *about* a model's boxes (`lbdl diff`: added and changed; a mesh: how
each box's weights are split) and want them seen on the book's figure itself. They hand this
module a path → colour map; a path that the figure does not draw at its depth (a box inside a
collapsed block call) colours the nearest drawn box or frame that holds it, so nothing said is
lost by drawing less.
"""

from __future__ import annotations

from collections.abc import Mapping

from lbdl_dsl.backends.diagram.scene import Box, Frame, Scene


def paint(
    scene: Scene, colours: Mapping[str, str], legend: tuple[tuple[str, str], ...] = ()
) -> Scene:
    """``scene`` with each box's fill, or each ``×N``/block frame's border, taken from
    ``colours`` (instance path → colour); ``legend`` ((text, colour) pairs) is written under it."""
    elements = scene.elements()
    for path, colour in colours.items():
        target = _drawn(path, elements)
        if isinstance(target, Box):
            target.fill = colour
        elif isinstance(target, Frame):
            target.mark = colour
    if legend:
        scene.swatches = legend
    return scene


def _drawn(path: str, elements: Mapping[str, object]) -> object | None:
    """The element that draws ``path``: itself, its frame, or the nearest drawn ancestor."""
    parts = path.split("/")
    for n in range(len(parts), 0, -1):
        prefix = "/".join(parts[:n])
        for key in (prefix, f"cluster:{prefix}"):
            if key in elements:
                return elements[key]
    return None

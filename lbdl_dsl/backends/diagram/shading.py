"""Boxes coloured by how their parameters are split over a device mesh (``--mesh``).

A box's colour says which mesh axes its parameters use, all of them together: ``replicated``
(every device holds them whole), ``fsdp``, ``tensor``, ``fsdp+tensor``... The colours come from
one fixed table in a fixed order of categories, so that the same layout gives the same bytes;
boxes without parameters, and boxes whose weights are another's (``tie=``), keep the ordinary
look, whose blue is in none of the categories. The writer paints what `Shading` says and writes
its legend under the figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lbdl_dsl.compiler.sharding import Layout

REPLICATED = "replicated"
REPLICATED_FILL = "#e3e3e3"
PALETTE = ("#cfe8c9", "#f6dcb5", "#e4cfee", "#c9ece8", "#f3c9c9", "#eee6b5", "#d6d9f2")
"""Fills for the split categories, in order: fewer mesh axes first, then the mesh's order."""


@dataclass(frozen=True)
class Shading:
    """Box id → fill colour, and the legend's (category, colour) pairs in order."""

    fills: dict[str, str] = field(default_factory=dict)
    legend: tuple[tuple[str, str], ...] = ()


def category(axes: set[str], order: tuple[str, ...]) -> str:
    return "+".join(a for a in order if a in axes) or REPLICATED


def from_layout(layout: Layout) -> Shading:
    """Each box (an instance path, as `walk` names elements) by the mesh axes under it."""
    used: dict[str, set[str]] = {}
    for placement in layout.arrays.values():
        parts = placement.path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            used.setdefault("/".join(parts[:i]), set()).update(placement.mesh_axes)
    order = layout.mesh.names
    cats = sorted(
        {category(axes, order) for axes in used.values()} - {REPLICATED},
        key=lambda c: (c.count("+"), [order.index(a) for a in c.split("+")]),
    )
    colours = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(cats)}
    colours[REPLICATED] = REPLICATED_FILL
    fills = {box: colours[category(axes, order)] for box, axes in used.items()}
    shown = [c for c in [REPLICATED, *cats] if c in {category(a, order) for a in used.values()}]
    legend = tuple((f"split over {c}" if c != REPLICATED else c, colours[c]) for c in shown)
    return Shading(fills, legend)

"""How a model shows itself in a notebook: its summary table, then its figure, in one output.

Jupyter asks an object for ``_repr_html_`` (or ``_repr_svg_``); `html_figure` is what the
checked spec and the `Model` answer, and `Svg` is the figure's text that a notebook draws
instead of printing. Graphviz is optional here: without ``dot`` the table comes with a line
saying why there is no figure, never an exception in the middle of a notebook.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from lbdl_dsl.backends.diagram.run_dot import render
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import ArgumentError, LbdlError
from lbdl_dsl.output import write_atomic

MAX_INLINE_BOXES = 2_000
"""A model drawn inline only up to this many boxes: a notebook is not the place to wait for
Graphviz on a figure nobody can read (``model.diagram()`` still draws it on request)."""


class Svg(str):
    """SVG text that a notebook shows as the figure; everywhere else, the text itself. It keeps
    the figure's DOT, so that `save` writes any format: ``model.diagram().save("m.png")``."""

    dot: str = ""

    def __new__(cls, text: str, dot: str = "") -> Svg:
        made = super().__new__(cls, text)
        made.dot = dot
        return made

    def _repr_svg_(self) -> str:
        return str(self)

    def save(self, path: str | Path, scale: float = 1.0, dpi: float | None = None) -> Path:
        """Write the figure to ``path``, in the format its suffix names (``.svg``, ``.png``,
        ``.pdf``, ``.dot``), ``scale`` times the default size (or a PNG at ``dpi``)."""
        target = Path(path)
        fmt = target.suffix.lstrip(".").lower()
        if fmt not in ("svg", "png", "pdf", "dot"):
            raise LbdlError(
                f"cannot save a figure as {target.name!r}",
                hint="name it .svg, .png, .pdf or .dot",
            )
        as_drawn = fmt == "svg" and scale == 1.0 and dpi is None
        if not as_drawn and not self.dot:
            raise LbdlError("this figure was made without its DOT; draw it again to save it")
        if fmt == "dot":
            data: str | bytes = self.dot
        elif fmt == "svg" and scale == 1.0 and dpi is None:
            data = str(self)
        else:
            data = render(self.dot, fmt, scale, dpi)
        return write_atomic(target, data)

    def __repr__(self) -> str:
        return f"<SVG figure, {len(self):,} characters (str() for the text)>"


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*>\s*)?(<!DOCTYPE[^>]*>\s*)?(<!--.*?-->\s*)*", re.DOTALL)


def inline_svg(svg: str) -> str:
    """The ``<svg>`` element alone, to sit inside an HTML page."""
    return _PROLOG.sub("", svg, count=1)


def figure(
    compiled: Checked, fmt: str = "svg", expand: str | None = None, scale: float = 1.0
) -> Svg | str | bytes:
    """What ``model.diagram()`` (and ``lbdl_dsl.check(...).diagram()``) answers: SVG text that
    shows as the figure and saves in any format, DOT text, or PNG/PDF bytes."""
    from lbdl_dsl.backends.diagram.draw import to_dot

    if fmt not in ("svg", "dot", "png", "pdf"):
        raise ArgumentError(f"fmt must be one of svg, dot, png, pdf; got {fmt!r}")
    dot = to_dot(compiled, expand=expand)
    if fmt == "dot":
        return dot
    data = render(dot, fmt, scale)
    return Svg(data.decode("utf-8"), dot) if fmt == "svg" else data


def html_figure(compiled: Checked) -> str:
    """The summary table and the figure as one HTML fragment."""
    from lbdl_dsl import report
    from lbdl_dsl.backends.diagram.draw import scene, to_dot

    parts = [report.render_html(compiled)] if compiled is not None else []
    try:
        drawn = len(scene(compiled).boxes())
        if drawn > MAX_INLINE_BOXES:
            note = f"{drawn:,} boxes: draw it with .diagram() or the command line"
            parts.append(f"<p><i>The figure is not shown inline ({escape(note)}).</i></p>")
        else:
            svg = render(to_dot(compiled), "svg").decode("utf-8")
            parts.append(f'<div class="lbdl-figure">{inline_svg(svg)}</div>')
    except LbdlError as err:  # no Graphviz: the table alone, and why
        parts.append(f"<p><i>No figure: {escape(err.first.message)}</i></p>")
    return "\n".join(parts)

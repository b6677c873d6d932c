"""How a model shows itself in a notebook: its summary table, then its figure, in one output.

Jupyter asks an object for ``_repr_html_`` (or ``_repr_svg_``); `html_figure` is what the
checked spec and the `Model` answer, and `Svg` is the figure's text that a notebook draws
instead of printing. Graphviz is optional here: without ``dot`` the table comes with a line
saying why there is no figure, never an exception in the middle of a notebook.
"""

from __future__ import annotations

import re
from html import escape

from lbdl_dsl.backends.diagram.run_dot import render
from lbdl_dsl.compiler.driver import Compiled
from lbdl_dsl.core.errors import LbdlError

MAX_INLINE_BOXES = 2_000
"""A model drawn inline only up to this many boxes: a notebook is not the place to wait for
Graphviz on a figure nobody can read (``model.diagram()`` still draws it on request)."""


class Svg(str):
    """SVG text that a notebook shows as the figure; everywhere else, the text itself."""

    def _repr_svg_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"<SVG figure, {len(self):,} characters (str() for the text)>"


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*>\s*)?(<!DOCTYPE[^>]*>\s*)?(<!--.*?-->\s*)*", re.DOTALL)


def inline_svg(svg: str) -> str:
    """The ``<svg>`` element alone, to sit inside an HTML page."""
    return _PROLOG.sub("", svg, count=1)


def html_figure(compiled: Compiled) -> str:
    """The summary table and the figure as one HTML fragment."""
    from lbdl_dsl import report
    from lbdl_dsl.backends.diagram import scene, to_dot

    parts = [report.render_html(compiled.checked)] if compiled.checked is not None else []
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

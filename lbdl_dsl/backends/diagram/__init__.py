"""The Graphviz backend: a checked model drawn the way The Little Book of Deep Learning does.

`to_dot` gives a DOT document (deterministic: the same spec gives the same bytes), `render`
turns it into SVG, PNG or PDF with Graphviz's ``dot`` (`run_dot`). The work is split by stage:
`expand` reads ``--expand``; `walk` decides what to draw from the checked tree and the graphs,
in the vocabulary of `scene`, with the words of `labels`; `wires` names tensors read in many
places instead of drawing their arrows; `failures` puts the checker's messages beside the boxes
where it stopped; `columns` sizes the text beside the boxes and `dot` writes the document, with
the look fixed in `style`.
"""

from __future__ import annotations

from lbdl_dsl.backends.diagram import dot as _dot
from lbdl_dsl.backends.diagram.draw import MAX_DRAWN_BOXES, scene, to_dot
from lbdl_dsl.backends.diagram.notebook import Svg, html_figure
from lbdl_dsl.backends.diagram.run_dot import render

write = _dot.write  # a scene (`scene`) as its DOT text

__all__ = ["MAX_DRAWN_BOXES", "Svg", "html_figure", "render", "scene", "to_dot", "write"]

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
from lbdl_dsl.backends.diagram import expand as _expand
from lbdl_dsl.backends.diagram import failures
from lbdl_dsl.backends.diagram.run_dot import render
from lbdl_dsl.backends.diagram.scene import Scene
from lbdl_dsl.backends.diagram.walk import Walker
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.compiler.stages import Built
from lbdl_dsl.core.errors import LbdlError


def scene(compiled: Built | Checked, expand: str | None = None) -> Scene:
    """What `to_dot` draws, before it is written: for tests and other writers. A `Built`
    program (no shapes yet) is drawn from its graphs alone."""
    program = compiled.program
    if program is None:
        raise LbdlError("nothing to draw: the spec did not get past building its graph")
    checked = compiled if isinstance(compiled, Checked) else None
    walker = Walker(program, checked, _expand.parse(expand, program.blocks))
    out = Scene(program.model.name)
    walker.model(out)
    if checked is not None:
        out.note = failures.attach(walker.sites, checked.diagnostics)
    return out


def to_dot(compiled: Built | Checked, expand: str | None = None) -> str:
    """The DOT document of ``compiled``'s model; ``expand`` opens block calls (see `expand`)."""
    return _dot.write(scene(compiled, expand))


__all__ = ["render", "scene", "to_dot"]

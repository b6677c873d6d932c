"""A checked model to its figure: `scene` decides what to draw (through `walk`), `to_dot` writes
it as DOT (through `dot`). The package re-exports both; `notebook` imports them from here."""

from __future__ import annotations

from lbdl_dsl.backends.diagram import conventions, failures, layout
from lbdl_dsl.backends.diagram import dot as _dot
from lbdl_dsl.backends.diagram import expand as _expand
from lbdl_dsl.backends.diagram.scene import PARAM, Scene
from lbdl_dsl.backends.diagram.shading import Shading
from lbdl_dsl.backends.diagram.walk import Walker
from lbdl_dsl.compiler.blockdef import BlockCompiled
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.compiler.stages import Built
from lbdl_dsl.core.errors import LbdlError

MAX_DRAWN_BOXES = 5_000
"""The most boxes a figure draws. Graphviz's layout grows faster than the boxes (16,000 boxes
of an expanded model took 24 GB before it crashed), and no one reads a figure that long; the
model itself may have up to `limits.MAX_EXPANDED_LAYERS` boxes."""


def scene(
    compiled: Built | Checked, expand: str | None = None, shading: Shading | None = None
) -> Scene:
    """What `to_dot` draws, before it is written: for tests and other writers. A `Built`
    program (no shapes yet) is drawn from its graphs alone; a block checked on its own
    (`compile_block`) is drawn as its body, between its input pattern and its result."""
    program = compiled.program
    if program is None:
        raise LbdlError("nothing to draw: the spec did not get past building its graph")
    checked = compiled if isinstance(compiled, Checked) else None
    expansion = _expand.parse(expand, program.blocks)
    found = conventions.find(program.model.body, program.blocks)
    walker = Walker(program, checked, expansion, found)
    unchecked = compiled.unchecked if isinstance(compiled, BlockCompiled) else ()
    walker.sketch = bool(unchecked)
    out = Scene(program.model.name)
    walker.model(out)
    out.origins = walker.origins
    drawn = len(out.boxes())
    if drawn > MAX_DRAWN_BOXES:
        how = f" with --expand {expand}" if expand else ""
        raise LbdlError(
            f"the figure{how} would draw {drawn:,} boxes; the limit is {MAX_DRAWN_BOXES:,}",
            hint="open fewer block calls (--expand a block's name, or a depth such as 1), or "
            "leave the figure out (--emit without svg/png/pdf/dot)"
            if expand
            else "leave the figure out (--emit without svg/png/pdf/dot), or draw the model "
            "with its repeated parts in blocks and ×N groups",
        )
    out.warnings = _unopened(walker, expansion, unchecked)
    if unchecked:
        names = ", ".join(unchecked)
        out.remark = (
            f"{names} without a value: shapes past the first box that needs one are the "
            f"block's annotations, unchecked (--set {unchecked[0]}=2 checks them)"
        )
    elif checked is not None:
        out.note = failures.attach(walker.sites, checked.diagnostics)
    if shading is not None:
        for box in out.boxes():
            box.fill = shading.fills.get(box.id, "") if box.look == PARAM else ""
        out.swatches = shading.legend
    layout.arrange(out)
    return out


def _unopened(
    walker: Walker, expansion: _expand.Expansion, unchecked: tuple[str, ...]
) -> list[str]:
    """What ``--expand`` asked for and the figure could not open, said rather than silently
    ignored: a name the figure never meets, a composite whose inside needs values."""
    out = []
    if walker.shut:
        what = ", ".join(sorted(walker.shut))
        why = (
            f"their insides need values for {', '.join(unchecked)} (--set "
            + " ".join(f"{u}=..." for u in unchecked)
            + ")"
            if unchecked
            else "the checker did not reach them"
        )
        out.append(f"--expand: {what} drawn shut: {why}")
    missing = sorted(expansion.asked - walker.opened - walker.shut)
    if missing:
        out.append(f"--expand: nothing to open in this figure for {', '.join(missing)}")
    return out


def to_dot(
    compiled: Built | Checked, expand: str | None = None, shading: Shading | None = None
) -> str:
    """The DOT document of ``compiled``'s model; ``expand`` opens block calls (see `expand`);
    ``shading`` colours boxes by how a mesh splits their parameters (`shading`)."""
    return _dot.write(scene(compiled, expand, shading))

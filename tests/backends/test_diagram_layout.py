"""Every figure of the gallery, measured as drawn (`geometry`: Graphviz's own layout, read back):
no arrow through a text (a box's words, a frame's title, another arrow's name), no two arrows on
one arrowhead, no arrow's name lying on a box or a text, and a data path that goes straight down
(its sideways drift, in points).

The measure itself is tested first on small figures whose faults are known, so that a zero below
means the faults are absent, not unseen.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram import geometry, run_dot
from lbdl_dsl.backends.diagram.scene import FAN, MAIN, SIDE
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.tools.book_figures import FIGURES, OPENED

pytestmark = pytest.mark.skipif(shutil.which(run_dot.DOT) is None, reason="no Graphviz")

REPO = Path(__file__).resolve().parents[2]
MAX_DRIFT = 1.5  # points: Graphviz rounds positions to whole points


def _gallery() -> list[tuple[str, Callable[[], str]]]:
    """Each figure `make gallery` draws, by its file name, and how to draw its DOT."""
    out: list[tuple[str, Callable[[], str]]] = []
    for spec in sorted((REPO / "specs").glob("*.lbdl")):
        out.append((spec.stem, lambda spec=spec: diagram.to_dot(compile_spec(spec))))
    for o in OPENED:
        path = REPO / "specs" / f"{o.spec}.lbdl"
        out.append((o.slug, lambda p=path, e=o.expand: diagram.to_dot(compile_spec(p), e)))
    for f in FIGURES:
        out.append((f"book/{f.slug}", lambda f=f: diagram.to_dot(f.compile(REPO), f.expand)))
    return out


GALLERY = _gallery()


@pytest.mark.parametrize("make", [m for _, m in GALLERY], ids=[n for n, _ in GALLERY])
def test_a_gallery_figure_has_no_crossing_no_shared_head_no_covered_name_and_no_drift(
    make: Callable[[], str],
) -> None:
    try:
        dot = make()
    except LbdlError as err:
        pytest.skip(f"does not compile ({err.diagnostics[0].message})")
    faults = geometry.measure(dot)
    assert faults.crossings == (), faults.crossings
    assert faults.shared_heads == (), faults.shared_heads
    assert faults.covered == (), faults.covered
    assert faults.drift <= MAX_DRIFT, faults.summary()


def test_the_opened_mixture_fits_900_pixels_at_the_default_scale() -> None:
    dot = diagram.to_dot(compile_spec(REPO / "specs" / "mixtral-8x7b.lbdl"), "moe")
    pixels = geometry.measure(dot).width * run_dot.PNG_DPI / 72
    assert pixels <= 900, pixels  # was 2,181 px before issue 44


# -- the measure sees what it should --------------------------------------------------------------

_HEAD = "digraph g { node [shape=box, fontsize=12]; edge [arrowsize=0.6];\n"


def test_an_arrow_through_a_text_is_a_crossing() -> None:
    # the arrow into c comes down through its frame's long title, as the book's ×12 once was
    titled = 'subgraph cluster_f {{ label="{}"; labeljust={}; c [width=2]; }}'
    dot = _HEAD + "a -> c; " + titled.format("a long title over the box", "l") + " }\n"
    faults = geometry.measure(dot)
    assert [text for _, text in faults.crossings] == ["a long title over the box (cluster_f)"]
    assert geometry.measure(_HEAD + "a -> c; " + titled.format("×12", "r") + " }\n").crossings == ()


def test_two_arrows_on_one_arrowhead_are_shared() -> None:
    dot = _HEAD + "a -> c [headport=n]; b -> c [headport=n]; }\n"
    assert len(geometry.measure(dot).shared_heads) == 1
    ports = _HEAD + "a -> c [headport=nw]; b -> c [headport=ne]; }\n"
    assert geometry.measure(ports).shared_heads == ()


def test_a_name_on_a_box_is_covered() -> None:
    # at its arrow's very end the name lies on the box it enters (Z under mha, once)
    on_box = _HEAD + 'a -> b [headlabel="Z", labeldistance=0.5]; }\n'
    assert geometry.measure(on_box).covered == (("Z", "box (b)"),)
    assert geometry.measure(_HEAD + 'a -> b [xlabel="Z"]; }\n').covered == ()


def test_a_staircase_drifts_and_a_column_does_not() -> None:
    column = _HEAD + "a -> b [weight=100]; b -> c [weight=100]; }\n"
    assert geometry.measure(column).drift == 0
    # b is pulled under z, right of a: the data path a -> b steps sideways
    stair = _HEAD + (
        "{ rank=same; a; z; } a -> z [style=invis]; a -> b [weight=100]; z -> b [weight=1000]; }\n"
    )
    assert geometry.measure(stair).drift > MAX_DRIFT


# -- what keeps the data path straight -------------------------------------------------------------


def test_a_dense_layer_is_one_column_with_its_input_round_the_left() -> None:
    scene = diagram.scene(compile_spec(REPO / "specs" / "densenet121.lbdl"), "all")
    concat = "repeat_0/denselayer_0/concat_0"
    into = {e.src: e for e in scene.edges if e.dst == concat}
    skip = into["cluster:repeat_0/fork"]  # the layer's input, split inside its ×6 frame
    chain = into["repeat_0/denselayer_0/conv_2d_1"]
    assert (chain.kind, skip.kind) == (MAIN, SIDE)
    assert skip.port < chain.port and not skip.right  # concat(x): x on the left


def test_a_gated_unit_keeps_its_gate_in_the_column() -> None:
    scene = diagram.scene(compile_spec(REPO / "specs" / "llama2-7b.lbdl"), "all")
    ffw = "repeat_0/mlp/"
    out = {e.dst.removeprefix(ffw): e.kind for e in scene.edges if e.src == f"{ffw}ln"}
    assert out == {"gate": MAIN, "up": FAN}

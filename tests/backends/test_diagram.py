"""The Graphviz backend: golden DOT for every spec, and the book's notation construct by construct.

The DOT of each spec of specs/ is kept in tests/golden/diagram/NAME.dot, so that any change to a
drawing shows up as a diff in review; a change made on purpose is accepted with ``LBDL_ACCEPT=1
pytest tests/backends/test_diagram.py``. The other tests read the `Scene` (what is drawn) or the
DOT text (how), and render with Graphviz where it is installed: every SVG must parse as XML and
the same spec must give the same bytes.
"""

from __future__ import annotations

import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram import run_dot
from lbdl_dsl.backends.diagram.scene import (
    BRANCH,
    BYPASS,
    FAIL,
    POISON,
    SIDE,
    Box,
    Frame,
    Item,
    Plus,
    Scene,
    Stub,
)
from lbdl_dsl.backends.diagram.style import FAIL as FAIL_COLOUR
from lbdl_dsl.cli import compat as cli
from lbdl_dsl.compiler.driver import CheckFailed, compile_spec
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.lbdl"))
GOLDEN = REPO / "tests" / "golden" / "diagram"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"
HAS_DOT = shutil.which(run_dot.DOT) is not None
needs_dot = pytest.mark.skipif(not HAS_DOT, reason="Graphviz's dot is not installed")


def compiled_or_skip(spec: Path) -> Checked:
    """A spec of the library, compiled; one that does not compile is another test's failure."""
    try:
        return compile_spec(spec)
    except LbdlError as err:
        pytest.skip(f"{spec.name} does not compile ({err.diagnostics[0].message})")


def resnet50() -> Checked:
    return compile_spec(REPO / "specs" / "resnet50.lbdl")


def failed(compile_text: Callable[..., Checked], text: str) -> Checked:
    """The partial result of a spec that fails checking, as the CLI gets it."""
    with pytest.raises(CheckFailed) as info:
        compile_text(text)
    return info.value.checked


def walk_items(items: list[Item], factor: int = 1) -> Iterator[tuple[Item, int]]:
    """Every element with the product of the ×N frames around it."""
    for item in items:
        yield item, factor
        if isinstance(item, Frame):
            inner = factor * int(item.title[1:]) if item.kind == "repeat" else factor
            yield from walk_items(item.items, inner)


# -- golden DOT for every spec ------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_dot_matches_its_golden(spec: Path) -> None:
    dot = diagram.to_dot(compiled_or_skip(spec))
    golden = GOLDEN / f"{spec.stem}.dot"
    if ACCEPT:
        golden.parent.mkdir(parents=True, exist_ok=True)
        if not golden.exists() or golden.read_text("utf-8") != dot:
            golden.write_text(dot, "utf-8")
        return
    if not golden.exists():
        where = spec.relative_to(REPO).as_posix()
        pytest.fail(
            f"no golden DOT for {spec.name}: look at its drawing (lbdl-compile {where} --emit png),"
            " then write it with LBDL_ACCEPT=1 pytest tests/backends/test_diagram.py"
        )
    assert dot == golden.read_text("utf-8"), (
        f"the drawing of {spec.name} changed; if on purpose, accept it with "
        "LBDL_ACCEPT=1 pytest tests/backends/test_diagram.py"
    )


@needs_dot
@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_every_svg_parses_as_xml(spec: Path) -> None:
    svg = diagram.render(diagram.to_dot(compiled_or_skip(spec)), "svg")
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


@needs_dot
@pytest.mark.parametrize("expand", [None, "all"])
def test_the_same_spec_gives_the_same_bytes(expand: str | None) -> None:
    first, second = resnet50(), resnet50()
    dot = diagram.to_dot(first, expand)
    assert dot == diagram.to_dot(second, expand)
    for fmt in ("svg", "png", "pdf"):
        assert diagram.render(dot, fmt) == diagram.render(dot, fmt), fmt
    ET.fromstring(diagram.render(dot, "svg"))


# -- ResNet-50, collapsed and open --------------------------------------------------------------


def test_resnet50_collapsed_fits_the_books_page() -> None:
    scene = diagram.scene(resnet50())
    elements = scene.elements()
    assert len(elements) <= 40, len(elements)
    names = [b.name for b in scene.boxes()]
    assert names.count("dresblock") == 4 and names.count("resblock") == 4
    frames = [e for e in elements.values() if isinstance(e, Frame)]
    assert sorted(f.title for f in frames) == ["×2", "×2", "×3", "×5"]
    assert all([b.name for b in f.items if isinstance(b, Box)] == ["resblock"] for f in frames)


def test_resnet50_open_draws_every_convolution() -> None:
    compiled = resnet50()
    convs = {
        "/".join(path): mult.as_int()
        for path, inst, mult in compiled.walk()
        if inst.node.op == "conv-2d"
    }
    assert sum(convs.values()) == 53  # 1 + 4 × (3 + 1 shortcut) + 12 × 3, He et al.'s count
    scene = diagram.scene(compiled, expand="all")
    drawn = {
        item.id: factor
        for item, factor in walk_items(scene.items)
        if isinstance(item, Box) and item.name == "conv-2d"
    }
    assert drawn == convs  # each instance once, under frames that multiply it as the tree does
    assert "call" not in {b.name for b in scene.boxes()}
    assert not [b for b in scene.boxes() if b.name in ("resblock", "dresblock")]


def test_expand_by_block_name_and_by_depth() -> None:
    compiled = resnet50()
    by_name = diagram.scene(compiled, expand="resblock")
    frames = [e for e in by_name.elements().values() if isinstance(e, Frame)]
    # each resblock is the one copy of a ×N frame, which becomes the block's frame
    assert [f.block for f in frames] == ["resblock"] * 4
    assert all(f.title.startswith("×") for f in frames)
    assert [b.name for b in by_name.boxes()].count("dresblock") == 4
    assert diagram.to_dot(compiled, "1") == diagram.to_dot(compiled, "all")  # blocks call none
    assert diagram.to_dot(compiled, "0") == diagram.to_dot(compiled)
    with pytest.raises(LbdlError, match="no block named `resblok`") as info:
        diagram.to_dot(compiled, "resblok")
    assert "did you mean `resblock`?" in (info.value.diagnostics[0].hint or "")


# -- the notation, construct by construct -------------------------------------------------------


def test_boxes_show_written_hyperparameters_and_changed_shapes() -> None:
    boxes = diagram.scene(resnet50()).boxes()
    conv, bn = boxes[0], boxes[1]
    assert (conv.name, conv.hparams, conv.shape) == ("conv-2d", "k=7 s=2 p=3", "64×112×112")
    assert (bn.name, bn.hparams, bn.shape) == ("batchnorm", "", "")  # defaults are never written
    assert conv.look == bn.look == "param"
    assert [b.look for b in boxes if b.name in ("relu", "maxpool", "reshape")] == ["plain"] * 3
    assert [b.tall for b in boxes if b.name in ("dresblock", "fc")] == [True] * 4 + [False]
    dot = diagram.to_dot(resnet50())
    assert '<FONT COLOR="#1f4fbf" POINT-SIZE="11">k=3 s=2 p=1</FONT>' in dot
    assert 'fontname="Helvetica,Arial,sans-serif"' in dot


def test_hyperparameters_are_resolved_and_booleans_written_as_the_book(compile_text) -> None:
    compiled = compile_text(
        "model m(D=64):\n  input X: 16×D\n  self-att h=4 causal=true\n  ffw hidden=4D\n"
    )
    boxes = diagram.scene(compiled).boxes()
    assert [(b.name, b.hparams, b.tall) for b in boxes] == [
        ("self-att", "h=4 causal=true", True),
        ("ffw", "hidden=256", True),
    ]


def test_experts_and_windows_are_written_even_at_their_defaults(compile_text) -> None:
    compiled = compile_text(
        "model m:\n  input X: 16×8×8\n  window-att h=2 w=4\n  window-att h=2 w=4 shift=2\n"
    )
    assert [b.hparams for b in diagram.scene(compiled).boxes()] == [
        "window=4 shift=0 h=2",
        "window=4 shift=2 h=2",
    ]
    compiled = compile_text("model m:\n  input X: 6×8\n  moe e=4 hidden=12\n")
    assert [b.hparams for b in diagram.scene(compiled).boxes()] == ["experts=4 k=2 hidden=12"]


def test_a_repeat_draws_one_copy_in_a_frame_saying_how_many(compile_text) -> None:
    compiled = compile_text("model m:\n  input X: 32\n  ×3:\n    fc 32\n    relu\n  fc 10\n")
    scene = diagram.scene(compiled)
    frame = next(e for e in scene.items if isinstance(e, Frame))
    assert (frame.kind, frame.title) == ("repeat", "×3")
    assert [b.name for b in frame.items] == ["fc", "relu"]
    assert [b.name for b in scene.boxes()] == ["fc", "relu", "fc"]
    dot = diagram.to_dot(compiled)
    assert dot.count("subgraph") == 1 and 'style="dashed,rounded"' in dot
    assert "<B>×3</B>" in dot  # at the frame's corner, apart from the shape column


def test_a_residual_bypasses_its_boxes_into_a_plus(compile_text) -> None:
    compiled = compile_text(
        "model m:\n  input X: 8×16×16\n  residual:\n    conv-2d k=3 p=1  8×16×16\n    relu\n"
        "  relu\n"
    )
    scene = diagram.scene(compiled)
    plus = next(e for e in scene.items if isinstance(e, Plus))
    bypass = [e for e in scene.edges if e.kind == BYPASS]
    assert len(bypass) == 1 and bypass[0].dst == plus.id and bypass[0].src == "residual_0/fork"
    main_in = [e.src for e in scene.edges if e.dst == plus.id and e.kind != BYPASS]
    assert main_in == ["residual_0/relu_0"]
    dot = diagram.to_dot(compiled)
    assert '"residual_0/fork" -> "residual_0/+":w' in dot  # round the left, into its side
    assert 'shape=circle, label="+"' in dot


def test_a_shortcut_runs_beside_the_main_path_into_the_same_plus() -> None:
    scene = diagram.scene(resnet50(), expand="dresblock")
    short = [b for b in scene.boxes() if "/shortcut/" in b.id]
    assert [b.name for b in short] == ["conv-2d", "batchnorm"] * 4
    branches = [e for e in scene.edges if e.kind == BRANCH]
    assert {e.dst for e in branches} == {b.id for b in short if b.name == "conv-2d"}
    into_plus = {e.src for e in scene.edges if e.kind == BYPASS}
    assert into_plus == {b.id for b in short if b.name == "batchnorm"}


def test_a_skip_connection_is_an_arrow_from_where_the_tensor_is_made(compile_text) -> None:
    compiled = compile_text(
        "model m:\n  input X: 3×8×8\n  conv-2d k=3 p=1  4×8×8\n  relu -> a\n  maxpool k=2  4×4×4\n"
        "  upsample f=2  4×8×8\n  concat(a)  8×8×8\n"
    )
    skips = [e for e in diagram.scene(compiled).edges if e.kind == SIDE]
    # `a` only wires one box to the next: the arrow says it, so its name is not written
    assert [(e.src, e.dst, e.name, e.label) for e in skips] == [("a", "concat_0", "a", "")]


def test_two_streams_stand_side_by_side_and_z_crosses_over() -> None:
    compiled = compile_spec(REPO / "specs" / "transformer.lbdl")
    scene = diagram.scene(compiled, expand="1")  # `all` would open cross-att too
    assert [t.text for t in scene.inputs] == ["X", "Y"]
    z = [e for e in scene.edges if e.label == "Z"]
    assert len(z) == 1 and z[0].dst.endswith("cross_att_0")
    assert z[0].src.startswith("repeat_0/")  # from the encoder's last box, inside its frame
    dot = diagram.to_dot(compiled)
    assert re.search(r'\{ rank=min;\n.*"input:X".*\n.*"input:Y"', dot)


def test_a_tensor_read_in_many_places_is_named_not_wired(compile_text) -> None:
    compiled = compile_text(
        "model m:\n  input X: 16\n  fc 16 -> t\n  fc 16\n  +(t)\n  +(t)\n  +(t)\n  fc 4\n"
    )
    scene = diagram.scene(compiled)
    stubs = [e for e in scene.elements().values() if isinstance(e, Stub)]
    assert [s.text for s in stubs] == ["t"] * 4  # three readers and the maker
    assert not [e for e in scene.edges if e.kind == SIDE and e.src == "fc_0"]


def test_inputs_and_outputs_are_plain_names() -> None:
    scene = diagram.scene(resnet50())
    assert [(t.text, t.shape) for t in scene.inputs] == [("X", "3×224×224")]
    assert [t.text for t in scene.outputs] == ["Ŷ"]
    assert "<I>Ŷ</I>" in diagram.to_dot(resnet50())


def test_ids_come_from_instance_paths() -> None:
    dot = diagram.to_dot(resnet50(), "all")
    assert '"dresblock_0/residual_0/shortcut/conv_2d_0"' in dot
    assert '"repeat_0/resblock_0/residual_0/+"' in dot
    assert 'subgraph "cluster:repeat_0"' in dot


# -- failures -----------------------------------------------------------------------------------

BAD = """\
model bad:
  input X: 1×28×28
  conv-2d k=5  32×24×24
  relu
  conv-2d k=5  64×10×10
  relu
  fc  10
  output Ŷ
"""


def test_a_failing_box_is_red_with_the_message_beside_it(compile_text) -> None:
    compiled = failed(compile_text, BAD)
    message = compiled.diagnostics[0].message
    scene = diagram.scene(compiled)
    looks = [(b.id, b.look) for b in scene.boxes()]
    assert looks == [
        ("conv_2d_0", "param"),
        ("relu_0", "plain"),
        ("conv_2d_1", FAIL),
        ("relu_1", POISON),
        ("fc_0", POISON),
    ]
    red = next(b for b in scene.boxes() if b.look == FAIL)
    assert red.message == message
    assert [e.src for e in scene.edges if e.dst == red.id and e.look == FAIL] == ["relu_0"]
    dot = diagram.to_dot(compiled)
    assert f'COLOR="{FAIL_COLOUR}"' in dot and "gives 64×20×20, but the annotation says" in dot
    assert f'"relu_0":b:s -> "conv_2d_1":b:n [weight=100, color="{FAIL_COLOUR}"' in dot


def test_a_failure_inside_a_collapsed_block_marks_the_call(compile_text) -> None:
    compiled = failed(
        compile_text,
        "block b on C×H×W:\n  conv-2d k=3  C×H×W\nmodel m:\n  input X: 4×8×8\n  b\n  relu\n",
    )
    scene = diagram.scene(compiled)
    call = next(b for b in scene.boxes() if b.name == "b")
    assert call.look == FAIL and "conv-2d" in call.message
    opened = diagram.scene(compiled, expand="all")
    inner = next(b for b in opened.boxes() if b.name == "conv-2d")
    assert inner.look == FAIL and inner.message == call.message


def test_a_residual_that_cannot_add_fails_at_its_plus(compile_text) -> None:
    compiled = failed(
        compile_text, "model m:\n  input X: 16×64\n  residual:\n    fc  16×32\n  fc  16×10\n"
    )
    plus = next(e for e in diagram.scene(compiled).items if isinstance(e, Plus))
    assert plus.look == FAIL and "cannot be added" in plus.message


def test_an_input_whose_shape_fails_is_red(compile_text) -> None:
    compiled = failed(compile_text, "model m:\n  input X: 0×8\n  fc 4\n")
    scene = diagram.scene(compiled)
    assert scene.inputs[0].look == FAIL and "positive" in scene.inputs[0].message
    assert [b.look for b in scene.boxes()] == [POISON]


def test_a_program_only_built_is_drawn_from_its_graph() -> None:
    built = compile_spec(REPO / "specs" / "resnet50.lbdl", stop_after="build")
    scene = diagram.scene(built, expand="all")
    assert len([b for b in scene.boxes() if b.name == "conv-2d"]) == 29
    assert {b.look for b in scene.boxes()} == {POISON} and not any(b.shape for b in scene.boxes())


def test_a_failed_assertion_is_written_under_the_figure(compile_text) -> None:
    compiled = failed(compile_text, "model m:\n  input X: 64\n  fc 10\n  assert params == 5\n")
    scene: Scene = diagram.scene(compiled)
    assert "assertion failed" in scene.note
    assert all(b.look != FAIL for b in scene.boxes())


@needs_dot
def test_the_cli_draws_up_to_the_error(tmp_path: Path) -> None:
    spec = tmp_path / "bad.lbdl"
    spec.write_text(BAD, "utf-8")
    assert cli.main([str(spec), "--emit", "dot,svg", "-o", str(tmp_path / "out")]) == 1
    ET.fromstring((tmp_path / "out" / "bad.svg").read_bytes())
    assert FAIL_COLOUR in (tmp_path / "out" / "bad.dot").read_text("utf-8")


@needs_dot
def test_the_cli_writes_every_diagram_format(tmp_path: Path) -> None:
    spec = str(REPO / "specs" / "resnet50.lbdl")
    assert cli.main([spec, "--emit", "svg,png,dot,pdf", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "resnet50.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "resnet50.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "resnet50.dot").read_text("utf-8") == diagram.to_dot(resnet50())


# -- rendering ----------------------------------------------------------------------------------


def test_render_says_how_to_install_graphviz_when_dot_is_missing(monkeypatch) -> None:
    monkeypatch.setattr(run_dot, "DOT", "no-such-graphviz-dot")
    with pytest.raises(LbdlError, match="Graphviz's `dot` program is not installed") as info:
        diagram.render("digraph { a }", "svg")
    assert info.value.diagnostics[0].hint == "apt-get install graphviz"


def test_render_finds_no_dot_on_an_empty_path(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LbdlError, match="not installed"):
        diagram.render("digraph { a }", "png")


def test_render_refuses_unknown_formats() -> None:
    with pytest.raises(ValueError, match="cannot render 'gif'"):
        diagram.render("digraph { a }", "gif")

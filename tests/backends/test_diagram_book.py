"""The diagram as the book draws it: the book's figures (golden DOT of each command of
docs/gallery.md), what is written beside a box, how multi-branch networks are laid out, and a
block drawn on its own (``--block``).

Golden DOT of the book's figures lives in tests/golden/diagram/book/; a change made on purpose
is accepted with ``LBDL_ACCEPT=1 pytest tests/backends/test_diagram_book.py``. The other tests
read the `Scene` (what is drawn) and ask for the property the book's notation asks for, so that
they hold whatever the node ids are called.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram import run_dot
from lbdl_dsl.backends.diagram.scene import (
    ACROSS,
    BYPASS,
    SIDE,
    UP,
    Box,
    Frame,
    Item,
    Plus,
    Scene,
    Terminal,
)
from lbdl_dsl.cli import compat as cli
from lbdl_dsl.compiler.blockdef import BlockCompiled, compile_block
from lbdl_dsl.compiler.driver import CheckFailed, compile_spec
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.tools.book_figures import FIGURES, BookFigure

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "diagram" / "book"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"
needs_dot = pytest.mark.skipif(shutil.which(run_dot.DOT) is None, reason="no Graphviz")
RESNET_BLOCKS = REPO / "specs" / "blocks" / "resnet.lbdl"


def spec(name: str) -> Checked:
    return compile_spec(REPO / "specs" / f"{name}.lbdl")


def named(scene: Scene) -> dict[str, str]:
    """Each element's id to what a reader sees: a box's name, a terminal's text."""
    out = {}
    for eid, e in scene.elements().items():
        out[eid] = e.name if isinstance(e, Box) else e.text if isinstance(e, Terminal) else eid
    return out


def frames(items: list[Item]) -> list[Frame]:
    out = []
    for item in items:
        if isinstance(item, Frame):
            out += [item, *frames(item.items)]
    return out


# -- the book's figures ---------------------------------------------------------------------------


@pytest.mark.parametrize("fig", FIGURES, ids=lambda f: f.slug)
def test_book_figure_matches_its_golden(fig: BookFigure) -> None:
    dot = diagram.to_dot(fig.compile(REPO), fig.expand)
    golden = GOLDEN / f"{fig.slug}.dot"
    if ACCEPT:
        golden.parent.mkdir(parents=True, exist_ok=True)
        if not golden.exists() or golden.read_text("utf-8") != dot:
            golden.write_text(dot, "utf-8")
        return
    assert golden.exists(), f"no golden for Fig. {fig.figure}: run with LBDL_ACCEPT=1"
    assert dot == golden.read_text("utf-8"), (
        f"Fig. {fig.figure} ({fig.command}) changed; look at it, then accept it with "
        "LBDL_ACCEPT=1 pytest tests/backends/test_diagram_book.py"
    )


def test_every_book_figure_is_listed_with_its_command_and_review(repo: Path) -> None:
    page = (repo / "docs" / "gallery.md").read_text("utf-8")
    assert [f.figure for f in FIGURES] == [f"5.{i}" for i in range(1, 10)] + ["4.10"]
    for fig in FIGURES:
        assert f"`{fig.command}`" in page, f"docs/gallery.md lacks Fig. {fig.figure}: make gallery"
        assert fig.review in page
        assert (repo / "docs" / "gallery" / "book" / f"{fig.slug}.png").is_file()


@needs_dot
def test_a_book_figure_command_draws_its_picture(tmp_path: Path) -> None:
    fig = next(f for f in FIGURES if f.block)
    args = fig.command.split()[1:] + ["-o", str(tmp_path)]
    assert cli.main([str(REPO / args[0]), *args[1:]]) == 0
    written = tmp_path / f"{fig.block}.png"
    assert written.read_bytes() == diagram.render(diagram.to_dot(fig.compile(REPO)), "png")


# -- what is written beside a box -----------------------------------------------------------------


def test_defaults_are_never_written_inside_an_open_block() -> None:
    scene = diagram.scene(spec("gpt"), expand="1")
    boxes = {b.name: b.hparams for b in scene.boxes()}
    assert boxes["self-att"] == "h=12 causal=true"  # not bias=false kbias=true
    assert boxes["ffw"] == "hidden=3072"  # not p=0.1 act=gelu
    opened = diagram.scene(spec("resnet50"), expand="dresblock")
    strides = [b.hparams for b in opened.boxes() if b.name == "conv-2d" and "k=1" in b.hparams]
    assert "k=1" in strides and "k=1 s=1" not in strides  # dresblock S=1 gives s=1, the default
    assert "k=1 s=2" in strides


def test_a_block_argument_at_its_default_is_not_written(compile_text) -> None:
    compiled = compile_text(
        "block b(c=8, k=3) on C×H×W:\n  conv-2d k=k p=same  c×H×W\n"
        "model m:\n  input X: 4×8×8\n  b c=8 k=5\n"
    )
    (call,) = diagram.scene(compiled).boxes()
    assert call.hparams == "k=5"


def test_output_widths_are_always_written_on_boxes_that_set_them() -> None:
    vgg = [(b.name, b.shape) for b in diagram.scene(spec("vgg16")).boxes() if b.name == "fc"]
    assert vgg == [("fc", "4096"), ("fc", "4096"), ("fc", "1000")]
    lstm = [b.shape for b in diagram.scene(spec("lstm-lm")).boxes() if b.name == "lstm"]
    assert lstm == ["T×650", "T×650"]
    kept = {b.name: b.shape for b in diagram.scene(spec("lenet")).boxes()}
    assert kept["relu"] == ""  # a box that keeps its input's shape and sets no width


def test_token_inputs_say_what_they_hold_and_names_are_the_books() -> None:
    scene = diagram.scene(spec("gpt"))
    assert [t.shape for t in scene.inputs] == ["T int<50257>"]
    names = {b.name for b in diagram.scene(spec("dcgan-discriminator")).boxes()}
    assert "leaky relu" in names and "leaky-relu" not in names


def test_a_flag_on_every_box_of_a_kind_is_said_once_under_the_figure(compile_text) -> None:
    scene = diagram.scene(spec("resnet50"), expand="all")
    assert scene.legend == ["bias=false on every conv-2d"]
    assert not [b for b in scene.boxes() if "bias" in b.hparams]
    ssd = diagram.scene(spec("ssd-like"))  # its heads keep their bias
    assert ssd.legend == ["bias=false on conv-2d before batchnorm"]
    assert "bias=false on every conv-2d" in diagram.to_dot(spec("resnet50"))
    one = compile_text("model m:\n  input X: 3×8×8\n  conv-2d k=3 bias=false  4×6×6\n  relu\n")
    (conv, _) = diagram.scene(one).boxes()
    assert conv.hparams == "k=3 bias=false" and not diagram.scene(one).legend


# -- frames ---------------------------------------------------------------------------------------


def test_a_group_that_changes_shape_writes_its_output_not_one_copys() -> None:
    scene = diagram.scene(spec("densenet121"))
    groups = [f for f in frames(scene.items) if f.kind == "repeat"]
    assert [f.title for f in groups] == ["×6", "×12", "×24", "×16"]
    assert [f.items[-1].shape for f in groups] == [  # type: ignore[union-attr]
        "256×56×56",
        "512×28×28",
        "1024×14×14",
        "1024×7×7",
    ]
    dot = diagram.to_dot(spec("densenet121"))
    assert "256×56×56" in dot and "96×56×56" not in dot  # the first copy's output is not shown


def test_a_times_one_frame_is_not_drawn(compile_text) -> None:
    compiled = compile_text("model m(N=1):\n  input X: 8\n  ×N:\n    fc 8\n    relu\n  fc 2\n")
    scene = diagram.scene(compiled)
    assert not frames(scene.items)
    assert [b.name for b in scene.boxes()] == ["fc", "relu", "fc"]


def test_a_frame_around_one_open_block_is_the_blocks_frame() -> None:
    scene = diagram.scene(spec("transformer"), expand="tlayer,declayer")
    groups = frames(scene.items)
    assert [(f.kind, f.title, f.block) for f in groups] == [
        ("repeat", "×6", "tlayer"),
        ("repeat", "×6", "declayer"),
    ]
    assert [[b.name for b in f.items] for f in groups] == [
        ["self-att", "ffw"],
        ["self-att", "cross-att", "ffw"],
    ]
    assert diagram.to_dot(spec("transformer"), "tlayer,declayer") == diagram.to_dot(
        spec("transformer"), "1"
    )


def test_expand_names_composites_and_says_what_it_can_open() -> None:
    assert diagram.to_dot(spec("transformer_blocks"), "self-attention,ffw")
    with pytest.raises(LbdlError, match="no block named `selfatt`") as info:
        diagram.to_dot(spec("transformer_blocks"), "selfatt")
    assert "self-att" in (info.value.diagnostics[0].hint or "")


def test_a_composite_box_opens_like_a_block_call() -> None:
    scene = diagram.scene(spec("transformer_blocks"), expand="all")
    opened = [f for f in frames(scene.items) if f.kind == "block"]
    assert [(f.title, f.hparams) for f in opened] == [
        ("self-att", "h=8 causal=true"),
        ("cross-att", "h=8"),
        ("ffw", ""),
    ]
    inside = [[b.name for b in f.items if isinstance(b, Box)] for f in opened]
    assert inside == [
        ["layernorm", "mha"],
        ["layernorm", "mha"],
        ["layernorm", "fc", "gelu", "fc", "dropout"],
    ]
    # mha has an inner structure (heads, projections): the book draws it tall
    assert [b.tall for f in opened for b in f.items if isinstance(b, Box) and b.name == "mha"] == [
        True,
        True,
    ]
    # what the composite passes on is written once, on its frame, not again on its boxes
    assert not [b.hparams for f in opened for b in f.items if isinstance(b, Box) and b.hparams]
    # each closes with its residual sum, fed by the bypass from a dot at the frame's top
    assert [sum(isinstance(b, Plus) for b in f.items) for f in opened] == [1, 1, 1]
    assert len([e for e in scene.edges if e.kind == BYPASS]) == 3
    # Z comes into cross-attention's mha from the side, as its K and V (the book's arrows),
    # on the left where Z is, with the bypass on the right, out of its way
    z = [e for e in scene.edges if e.src == "input:Z"]
    assert [(e.dst, e.kind) for e in z] == [("cross_att_0/att", SIDE)] * 2
    att = next(b for b in scene.boxes() if b.id == "cross_att_0/att")
    assert att.ports == ["K", "V", "Q", "", ""]
    assert [b.right for b in scene.edges if b.kind == BYPASS] == [False, True, False]
    self_att = next(b for b in scene.boxes() if b.id == "self_att_0/att")
    assert self_att.ports == ["", "", "Q", "K", "V"]
    assert diagram.to_dot(spec("transformer_blocks")) != diagram.to_dot(
        spec("transformer_blocks"), "all"
    )


def test_a_composite_opened_inside_an_open_block_keeps_what_the_block_passes_it() -> None:
    # tlayer passes causal=causal to self-att: its frame writes the value, its mha does not
    scene = diagram.scene(spec("gpt"), expand="all")
    opened = {f.title: f for f in frames(scene.items) if f.kind == "block"}
    assert opened["self-att"].hparams == "h=12 causal=true"
    assert opened["ffw"].hparams == "hidden=3072"
    assert [b.hparams for b in opened["self-att"].items if isinstance(b, Box)] == ["", ""]


def test_a_failing_block_keeps_the_fill_of_a_box_with_weights(
    compile_text: Callable[..., Checked],
) -> None:
    with pytest.raises(CheckFailed) as info:
        compile_text(
            "block b on C×H×W:\n  conv-2d k=3  C×H×W\nmodel m:\n  input X: 4×8×8\n  b\n  relu\n"
        )
    scene = diagram.scene(info.value.checked)
    call, relu = scene.boxes()
    assert call.look == "fail" and call.trainable
    assert not relu.trainable
    assert diagram.to_dot(info.value.checked).count('BGCOLOR="#c9d8ee"') == 1


# -- multi-branch layouts -------------------------------------------------------------------------


def test_unet_is_drawn_as_a_u_with_its_skips_across() -> None:
    scene = diagram.scene(spec("unet"))
    name = named(scene)
    skips = [e for e in scene.edges if e.route == ACROSS and e.label]
    assert sorted(e.label for e in skips) == ["s1", "s2", "s3", "s4"]
    rows = [[name[i] for i in row] for row in scene.rows]
    # each skip's row: the map it copies, the crop, the concatenation of the same scale
    assert rows.count(["double", "crop", "concat"]) == 4
    assert ["double", "tconv-2d"] in rows  # the bottom of the U
    up = [(name[e.src], name[e.dst]) for e in scene.edges if e.route == UP]
    assert ("conv-2d", "Ŷ") in up and ("tconv-2d", "concat") in up
    assert not [e for e in scene.edges if e.route == UP and e.label]  # the way up is a column
    dot = diagram.to_dot(spec("unet"))
    assert dot.count("dir=back") == len(up) and dot.count("rank=same;") == 5


def test_a_diffusion_unet_is_a_u_too_and_its_time_embedding_is_named() -> None:
    scene = diagram.scene(spec("ddpm-unet"))
    skips = sorted(e.label for e in scene.edges if e.route == ACROSS and e.label)
    assert skips == ["d1", "d2"]
    readers = [b for b in scene.boxes() if b.wires]
    assert len(readers) == 6 and {tuple(b.wires) for b in readers} == {("temb",)}
    assert "temb →" in diagram.to_dot(spec("ddpm-unet"))


def test_a_detectors_heads_sit_beside_their_maps() -> None:
    scene = diagram.scene(spec("ssd-like"))
    name = named(scene)
    rows = [[name[i] for i in row] for row in scene.rows]
    assert rows == [["cbr", "conv-2d", f"head{s}"] for s in (32, 16, 8, 4, 2)]


def test_side_outputs_sit_beside_their_box_and_wiring_names_are_hidden() -> None:
    clip = diagram.scene(spec("clip"))
    rows = [[named(clip)[i] for i in row] for row in clip.rows]
    assert rows == [["l2norm", "image"], ["l2norm", "text"]]
    assert not [e.label for e in clip.edges if e.label]  # `t` only wires two boxes
    vae = diagram.scene(spec("vae"))
    assert sorted(named(vae)[r[-1]] for r in vae.rows) == ["logvar", "μ"]
    bert = diagram.scene(spec("bert-base"))
    assert [named(bert)[r[-1]] for r in bert.rows] == ["Z"]
    assert not [e for e in bert.edges if e.label == "tokens"]
    z = [e for e in diagram.scene(spec("transformer")).edges if e.label]
    assert [e.label for e in z] == ["Z"]  # it enters the decoder's frame from outside


@needs_dot
def test_a_u_gives_the_same_bytes_every_run() -> None:
    dot = diagram.to_dot(spec("unet"))
    assert dot == diagram.to_dot(spec("unet"))
    assert diagram.render(dot, "png") == diagram.render(dot, "png")


# -- a block on its own ---------------------------------------------------------------------------


def test_a_block_is_drawn_on_its_own_in_its_own_symbols() -> None:
    compiled = compile_block(RESNET_BLOCKS, "resblock")
    scene = diagram.scene(compiled)
    assert [t.shape for t in scene.inputs] == ["C×H×W"]
    convs = [(b.hparams, b.shape) for b in scene.boxes() if b.name == "conv-2d"]
    assert convs == [("k=1", "C/4×H×W"), ("k=3 p=1", "C/4×H×W"), ("k=1", "C×H×W")]
    assert scene.legend == ["bias=false on every conv-2d"] and not scene.remark


def test_a_block_parameter_without_value_is_drawn_from_the_annotations() -> None:
    compiled = compile_block(RESNET_BLOCKS, "dresblock")
    assert isinstance(compiled, BlockCompiled) and compiled.unchecked == ("S",)
    scene = diagram.scene(compiled)
    convs = [(b.hparams, b.shape) for b in scene.boxes() if b.name == "conv-2d"]
    assert convs == [
        ("k=1 s=S", "C/S×H/S×W/S"),
        ("k=3 p=1", "C/S×H/S×W/S"),
        ("k=1", "4C/S×H/S×W/S"),
        ("k=1 s=S", "4C/S×H/S×W/S"),
    ]
    assert {b.look for b in scene.boxes()} <= {"param", "plain"}  # not errors
    assert all(b.trainable for b in scene.boxes() if b.name in ("conv-2d", "batchnorm"))
    assert "S without a value" in scene.remark and not scene.note
    checked = compile_block(RESNET_BLOCKS, "dresblock", {"S": 2, "C": 256, "H": 56, "W": 56})
    first = next(b for b in diagram.scene(checked).boxes() if b.name == "conv-2d")
    assert (first.hparams, first.shape) == ("k=1 s=2", "128×28×28")


def test_a_block_with_an_error_is_drawn_up_to_it(tmp_path: Path) -> None:
    path = tmp_path / "blocks.lbdl"
    path.write_text("block b(c=4) on C×H×W:\n  conv-2d k=3  c×H×W\n  relu\n", "utf-8")
    with pytest.raises(CheckFailed) as info:
        compile_block(path, "b")
    scene = diagram.scene(info.value.checked)
    assert [b.look for b in scene.boxes()] == ["fail", "poison"]


def test_block_errors_name_the_block_and_the_flag(tmp_path: Path, capsys) -> None:
    with pytest.raises(LbdlError, match="no block named `resblok`") as info:
        compile_block(RESNET_BLOCKS, "resblok")
    assert "did you mean `resblock`?" in (info.value.diagnostics[0].hint or "")
    with pytest.raises(LbdlError, match="no parameter or input size `Q`"):
        compile_block(RESNET_BLOCKS, "resblock", {"Q": 2})
    spec_path = str(RESNET_BLOCKS)
    assert cli.main([spec_path, "--block", "resblok", "-o", str(tmp_path)]) == 1
    with pytest.raises(SystemExit) as exit_info:
        cli.main([spec_path, "--block", "resblock", "--emit", "py", "-o", str(tmp_path)])
    assert exit_info.value.code == 1  # a bad flag value, like any bad input
    assert "--block writes a figure" in capsys.readouterr().err


@needs_dot
def test_the_cli_draws_a_block_and_the_build_verb_too(tmp_path: Path) -> None:
    from lbdl_dsl import cli as lbdl_main

    assert cli.main([str(RESNET_BLOCKS), "--block", "dresblock", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "dresblock.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "dresblock.svg").is_file()
    resnet50 = str(REPO / "specs" / "resnet50.lbdl")
    out = tmp_path / "b"
    assert (
        lbdl_main.main(["build", resnet50, "--block", "resblock", "--emit", "dot", "-o", str(out)])
        == 0
    )
    assert "C/4×H×W" in (out / "resblock.dot").read_text("utf-8")


def test_a_width_given_as_a_hyperparameter_is_written_once_at_the_right(compile_text) -> None:
    (fc,) = diagram.scene(compile_text("model m:\n  input X: 8\n  fc out=16\n")).boxes()
    assert (fc.hparams, fc.shape) == ("", "16")


def test_a_residual_written_with_a_plus_bypasses_its_group(compile_text) -> None:
    compiled = compile_text(
        "block b on X: D:\n  layernorm\n  fc D\n  +(X)\n"
        "model m:\n  input X: 8\n  fc 8\n  b\n  relu\n"
    )
    scene = diagram.scene(compiled, expand="all")
    (plus,) = [e.id for e in scene.elements().values() if isinstance(e, Plus)]
    into_plus = [(e.kind, e.label) for e in scene.edges if e.dst == plus]
    assert sorted(into_plus) == [("bypass", ""), ("main", "")]
    closed = diagram.scene(compiled)
    assert not [e for e in closed.edges if e.kind == "bypass"]


@needs_dot
def test_painted_swatches_and_the_conventions_share_the_space_under_the_figure() -> None:
    from lbdl_dsl.backends.diagram import dot
    from lbdl_dsl.backends.diagram.paint import paint

    scene = paint(diagram.scene(spec("resnet50")), {"fc_0": "#a8dca8"}, (("added", "#a8dca8"),))
    text = dot.write(scene)
    assert "added" in text and "bias=false on every conv-2d" in text
    assert text.count('BGCOLOR="#a8dca8"') == 2  # the box and its swatch
    assert b"<svg" in diagram.render(text, "svg")  # one valid HTML label

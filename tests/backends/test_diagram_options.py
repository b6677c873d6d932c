"""What a reader asks of a figure beyond the spec: which numbers it writes, what ``--expand``
opens (and says when it cannot), its size (``--scale``, ``--dpi``) and ``diagram().save()``."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

import lbdl_dsl
from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram import run_dot
from lbdl_dsl.backends.diagram.scene import Frame
from lbdl_dsl.cli import compat as cli
from lbdl_dsl.compiler.blockdef import compile_block
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]
needs_dot = pytest.mark.skipif(shutil.which(run_dot.DOT) is None, reason="no Graphviz")

POOLS = """\
model pools:
  input X: 3×8×8
  maxpool k=2 s=2     3×4×4
  avgpool k=2 s=1     3×3×3
  take i=0            3×3
  output Y
"""


def test_a_default_is_hidden_unless_it_says_what_the_box_does(compile_text) -> None:
    # a pool's stride defaults to its window (the registry says so): s=2 beside k=2 is noise,
    # s=1 is not; `take` is read by the token it keeps, so i=0 is written at its default
    boxes = diagram.scene(compile_text(POOLS)).boxes()
    assert [(b.name, b.hparams) for b in boxes] == [
        ("maxpool", "k=2"),
        ("avgpool", "k=2 s=1"),
        ("take", "i=0"),
    ]


def test_vit_says_which_token_it_keeps() -> None:
    boxes = diagram.scene(compile_spec(REPO / "specs" / "vit.lbdl"), "1").boxes()
    assert [b.hparams for b in boxes if b.name == "take"] == ["i=0"]


def test_expanding_a_box_inside_a_block_opens_the_block_around_it() -> None:
    compiled = compile_spec(REPO / "specs" / "transformer.lbdl")
    scene = diagram.scene(compiled, "ffw")
    frames = [e for e in scene.elements().values() if isinstance(e, Frame)]
    assert [f.title for f in frames if f.kind == "block"] == ["ffw", "ffw"]
    assert scene.warnings == []
    assert diagram.to_dot(compiled, "ffw") != diagram.to_dot(compiled)


def test_expanding_what_the_figure_cannot_open_says_so() -> None:
    gpt2 = diagram.scene(compile_spec(REPO / "specs" / "gpt2.lbdl"), "moe")
    assert gpt2.warnings == ["--expand: nothing to open in this figure for moe"]
    block = compile_block(REPO / "specs" / "transformer.lbdl", "declayer")
    shut = diagram.scene(block, "all").warnings
    assert shut == [
        "--expand: cross-att, ffw, self-att drawn shut: their insides need values "
        "for H (--set H=...)"
    ]
    opened = compile_block(REPO / "specs" / "transformer.lbdl", "declayer", {"H": 8})
    assert diagram.scene(opened, "all").warnings == []


def test_the_cli_warns_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(REPO / "specs" / "gpt2.lbdl")
    assert cli.main([spec, "--expand", "moe", "--emit", "dot", "-o", str(tmp_path)]) == 0
    assert "warning: --expand: nothing to open in this figure for moe" in capsys.readouterr().err


def png_width(png: bytes) -> int:
    return int(struct.unpack(">II", png[16:24])[0])


@needs_dot
def test_scale_and_dpi_size_the_png(tmp_path: Path) -> None:
    dot = diagram.to_dot(compile_spec(REPO / "specs" / "mlp.lbdl"))
    one, two = png_width(diagram.render(dot, "png")), png_width(diagram.render(dot, "png", 2))
    assert abs(two - 2 * one) <= 2, (one, two)
    assert abs(png_width(diagram.render(dot, "png", dpi=220)) - two) <= 1
    assert diagram.render(dot, "svg", 1.0) == diagram.render(dot, "svg")  # scale 1: untouched
    assert b'width="' in diagram.render(dot, "svg", 2)
    with pytest.raises(LbdlError, match="scale"):
        diagram.render(dot, "png", 0)
    spec = str(REPO / "specs" / "mlp.lbdl")
    for flags, name in ((["--scale", "2"], "big"), ([], "small")):
        assert cli.main([spec, "--emit", "png", "-o", str(tmp_path / name), *flags]) == 0
    big = png_width((tmp_path / "big" / "mlp.png").read_bytes())
    assert abs(big - 2 * png_width((tmp_path / "small" / "mlp.png").read_bytes())) <= 2


def test_scale_must_be_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([str(REPO / "specs" / "mlp.lbdl"), "--scale", "-1"])
    assert "a number above 0" in capsys.readouterr().err


@needs_dot
def test_diagram_save_writes_the_format_its_suffix_names(tmp_path: Path) -> None:
    figure = lbdl_dsl.check(REPO / "specs" / "mlp.lbdl").diagram()
    assert figure.save(tmp_path / "m.svg").read_text("utf-8") == str(figure)
    assert figure.save(tmp_path / "m.dot").read_text("utf-8").startswith('digraph "mlp"')
    small = png_width(figure.save(tmp_path / "m.png").read_bytes())
    big = png_width(figure.save(tmp_path / "big.png", scale=2).read_bytes())
    assert abs(big - 2 * small) <= 2
    assert figure.save(tmp_path / "m.pdf").read_bytes().startswith(b"%PDF")
    with pytest.raises(LbdlError, match="cannot save a figure as 'm.jpg'"):
        figure.save(tmp_path / "m.jpg")

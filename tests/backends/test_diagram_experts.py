"""The figure of a mixture of experts (issues 20 and 44): the router in the column, the experts
side by side on its row (all of them up to four, else the first, a "⋯" and the last), the first
drawing the expert's body, and their gated sum; an `experts:` group and an opened `moe` box
alike. The fixture's DOT is pinned by a golden file
(``LBDL_ACCEPT=1`` rewrites it), and the same spec gives the same bytes, DOT and SVG.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram import run_dot
from lbdl_dsl.backends.diagram.scene import FAIL, MAIN, POISON, Box, Frame, Stub
from lbdl_dsl.compiler.driver import CheckFailed, compile_spec
from lbdl_dsl.tools.book_figures import OPENED

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "tests" / "fixtures" / "experts" / "experts.lbdl"
GOLDEN = REPO / "tests" / "golden" / "experts" / "experts.dot"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"


def _frames(items: list, kind: str) -> list[Frame]:
    out = []
    for item in items:
        if isinstance(item, Frame):
            out += [item] if item.kind == kind else []
            out += _frames(item.items, kind)
    return out


def _names(items: list) -> list[str]:
    return [i.name for i in items if isinstance(i, Box)]


def test_an_experts_group_draws_the_router_beside_its_experts_and_their_sum() -> None:
    scene = diagram.scene(compile_spec(SPEC, overrides={"T": 6}))
    first, second = _frames(scene.items, "experts")
    assert (first.title, first.hparams) == ("experts", "e=4 k=2 cap=1.5")
    assert (second.title, second.hparams) == ("experts", "e=3 k=1")
    (lane,) = [f for f in first.items if isinstance(f, Frame)]
    assert lane.title == "expert 1" and _names(lane.items) == ["fc", "relu", "fc"]
    assert _names(first.items) == ["router", "expert 2", "expert 3", "expert 4", "Σ"]
    total = next(b for b in first.items if isinstance(b, Box) and b.name == "Σ")
    assert (total.hparams, total.shape) == ("top-2 of 4", "6×8")
    row = next(r for r in scene.rows if "experts_0/router" in r)
    assert row == [
        "experts_0/router",
        "experts_0/expert/fc_0",
        "experts_0/expert:2",
        "experts_0/expert:3",
        "experts_0/expert:4",
    ]
    into_sum = {e.src: e for e in scene.edges if e.dst == "experts_0/sum"}
    assert set(into_sum) == {row[0], "experts_0/expert/fc_1", *row[2:]}
    # the router's gates go straight down the column; each lane has its own arrowhead
    assert into_sum[row[0]].kind == MAIN and into_sum[row[0]].name == "gates"
    assert len({e.port for e in into_sum.values()}) == 5
    assert "experts_0/sum" in scene.funnels
    # the ×2 around the second mixture stays its own dashed frame
    (repeat,) = _frames(scene.items, "repeat")
    assert repeat.title == "×2" and repeat.items == [second]


def test_more_than_four_experts_draw_the_first_a_gap_and_the_last(compile_text) -> None:
    text = "model m:\n  input X: 5×8\n  experts e={e} k=2:\n    fc 16\n    relu\n    fc 8\n"
    eight = diagram.scene(compile_text(text.format(e=8)))
    assert _names(eight.boxes()) == ["router", "fc", "relu", "fc", "expert 8", "Σ"]
    (gap,) = [e for e in eight.elements().values() if isinstance(e, Stub)]
    row = next(r for r in eight.rows if "experts_0/router" in r)
    assert gap.text == "⋯" and row.index(gap.id) == 2  # between expert 1 and expert 8
    five = diagram.scene(compile_text(text.format(e=5)))
    assert "expert 5" in _names(five.boxes()) and "expert 2" not in _names(five.boxes())


def test_the_moe_box_opens_into_its_swiglu_expert() -> None:
    spec = REPO / "specs" / "mixtral-8x7b.lbdl"
    compiled = compile_spec(spec)
    shut = diagram.scene(compiled)
    assert [b.name for b in shut.boxes() if b.name == "moe"] == ["moe"]
    assert next(b for b in shut.boxes() if b.name == "moe").tall
    for expand in ("all", "moe"):
        scene = diagram.scene(compiled, expand=expand)
        (mixture,) = _frames(scene.items, "experts")
        assert (mixture.title, mixture.hparams) == ("moe", "experts=8 k=2 hidden=14336")
        (lane,) = [f for f in mixture.items if isinstance(f, Frame)]
        assert _names(lane.items) == ["fc", "fc", "silu", "mul", "fc"]
        # the frame's title gives the hidden width; per box, words would double the width
        assert {(b.hparams, b.shape) for b in lane.items if isinstance(b, Box)} == {("", "")}
        assert _names(mixture.items) == ["router", "expert 8", "Σ"]


def test_a_failure_in_an_expert_is_red_where_it_is_and_greys_the_sum(compile_text) -> None:
    text = "model m:\n  input X: 16×64\n  experts e=4 k=2:\n    layernorm\n    self-att h=4\n"
    with pytest.raises(CheckFailed) as info:
        compile_text(text)
    scene = diagram.scene(info.value.checked)
    looks = {b.name: b.look for b in scene.boxes()}
    assert looks["self-att"] == FAIL and looks["Σ"] == POISON
    assert "needs a T×D sequence" in next(b for b in scene.boxes() if b.name == "self-att").message


def test_a_built_program_draws_its_mixtures_unchecked() -> None:
    scene = diagram.scene(compile_spec(SPEC, stop_after="build"), expand="all")
    assert {b.look for b in scene.boxes()} == {POISON}
    assert _names(scene.boxes()).count("Σ") == 2


def test_the_gallery_shows_mixtral_opened_with_its_review() -> None:
    page = (REPO / "docs" / "gallery.md").read_text("utf-8")
    for opened in OPENED:
        assert f"`{opened.command}`" in page and opened.review in page, "make gallery"
        assert (REPO / "docs" / "gallery" / f"{opened.slug}.png").is_file()
    assert [o.slug for o in OPENED] == ["mixtral-8x7b-moe", "densenet121-all", "llama2-7b-all"]


def test_the_fixture_dot_matches_its_golden_and_renders_the_same_bytes() -> None:
    compiled = compile_spec(SPEC, overrides={"T": 6})
    dot = diagram.to_dot(compiled, expand="all")
    assert dot == diagram.to_dot(compile_spec(SPEC, overrides={"T": 6}), expand="all")
    if ACCEPT:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(dot, "utf-8")
    assert dot == GOLDEN.read_text("utf-8"), "LBDL_ACCEPT=1 rewrites the golden"
    if shutil.which(run_dot.DOT) is None:
        return
    svgs = [
        subprocess.run([run_dot.DOT, "-Tsvg"], input=dot.encode(), capture_output=True).stdout
        for _ in range(2)
    ]
    assert svgs[0] == svgs[1] and b"expert 4" in svgs[0]

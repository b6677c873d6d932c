"""Receptive fields and cumulative strides (book § 4.2, Fig. 4.4), through blocks and ×N frames."""

from __future__ import annotations

from pathlib import Path

from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.report import rows

REPO = Path(__file__).resolve().parents[2]


def _rf(path: str, **overrides) -> list[tuple[str, str]]:
    checked = compile_spec(REPO / path, overrides=overrides)
    return [(r.label, r.rf) for r in rows(checked, depth=1)]


def test_resnet50_sees_483_pixels_before_its_pooling():
    # 483 is the published receptive field of ResNet-50 (Araujo et al. 2019, Distill)
    rf = _rf("specs/resnet50.lbdl")
    assert rf[0] == ("conv-2d k=7 s=2 p=3 bias=false", "7/2")
    assert rf[3] == ("maxpool k=3 s=2 p=1", "11/4")
    assert rf[4] == ("dresblock S=1", "19/4")
    assert rf[5] == ("resblock ×2", "35/4")  # each of the 2 copies adds its 3×3 convolution
    assert rf[-4] == ("resblock ×2", "483/32")


def test_a_stack_of_convolutions_grows_as_the_book_says():
    text = (
        "model m:\n  input X: 1×64×64\n  conv-2d k=3 p=1  8×64×64\n  maxpool k=2  8×32×32\n"
        "  conv-2d k=3 p=1 ×3  8×32×32\n  conv-2d k=3 d=2 p=2  8×32×32\n"
    )
    checked = compile_spec(text, file="stack.lbdl")
    got = [r.rf for r in rows(checked)]
    # 3, then ×2 stride (4, stride 2), then three 3×3 at stride 2 (+4 each), then a dilated 3×3
    assert got == ["3/1", "4/2", "16/2", "24/2"]

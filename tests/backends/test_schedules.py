"""Per-copy schedules inside ×N (`×N as i:`): a number-valued hyper-parameter follows the
copy's index while the group stays one frame, stacked and scanned or kept apart; the rules
run at the first and the last copy; a size may not follow the index; the figure shows one
frame named with its index; ConvNeXt, Swin and EfficientNet keep their counts."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.jax import storage
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.symbolic import PerCopy

SPECS = Path(__file__).resolve().parents[2] / "specs"
PRODUCT = (
    "model m:\n  input X: 4×3\n  ×5 as i:\n    fc out=3 -> f\n    leaky-relu a=i+1\n  output Y\n"
)


@pytest.mark.parametrize("stacked", [False, True])
def test_each_copy_reads_its_own_value(stacked: bool) -> None:
    """Copy i multiplies negative values by i + 1 (a leaky ReLU's slope) after an fc set to
    the identity: 5! in all, whether the copies are scanned over a stack or called in turn."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(storage, "per_copy", lambda inst: not stacked)
        model = lbdl_dsl.compile("m.lbdl", text=PRODUCT)
    assert ("scan_group(" in model.source) == stacked
    params, state = model.init(jax.random.key(0))
    eye = np.eye(3, dtype=np.float32)
    params = jax.tree_util.tree_map_with_path(
        lambda path, v: np.broadcast_to(eye, v.shape) if v.shape[-2:] == (3, 3) else 0 * v,
        params,
    )
    x = -1.0 - np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    y, _ = model.apply(params, state, x)
    np.testing.assert_allclose(np.asarray(y), x * 120.0, rtol=1e-6)


def test_the_group_stays_one_frame_with_the_schedule_in_it() -> None:
    compiled = compile_spec(PRODUCT, file="m.lbdl")
    (group,) = compiled.root
    assert group.kind == "repeat" and str(group.hp["count"]) == "5"
    leaky = group.copies[0].body[1]
    assert isinstance(leaky.attrs.a, PerCopy) and str(leaky.attrs.a) == "i + 1"
    dot = diagram.to_dot(compiled)
    assert "×5 as i" in dot and "leaky_relu_0" in dot and "leaky_relu_1" not in dot


def test_the_last_copy_s_value_is_checked() -> None:
    text = "model m:\n  input X: 4\n  ×4 as i:\n    dropout p=0.4*i\n  output Y\n"
    with pytest.raises(LbdlError, match=r"must be in \[0, 1\), got 1.2"):
        lbdl_dsl.compile("m.lbdl", text=text)
    lbdl_dsl.compile("m.lbdl", text=text.replace("0.4*i", "0.3*i"))


def test_a_size_cannot_follow_the_index() -> None:
    text = "model m:\n  input X: 4\n  ×3 as i:\n    fc out=i+4\n    fc out=4\n  output Y\n"
    with pytest.raises(LbdlError, match="cannot follow the copy's index"):
        lbdl_dsl.compile("m.lbdl", text=text)


def test_the_index_cannot_hide_a_parameter() -> None:
    text = "model m(i=2):\n  input X: 4\n  ×3 as i:\n    relu\n  output Y\n"
    with pytest.raises(LbdlError, match="would hide"):
        lbdl_dsl.compile("m.lbdl", text=text)


@pytest.mark.parametrize(
    ("name", "frames"), [("convnext-t", 4), ("swin-t", 1), ("efficientnet-b0", 3)]
)
def test_the_vision_specs_draw_their_stages_as_frames(name: str, frames: int) -> None:
    compiled = compile_spec(SPECS / f"{name}.lbdl")
    dot = diagram.to_dot(compiled)
    assert sum(dot.count(f"×{n} as ") for n in (2, 3, 9)) == frames
    rates = [
        str(i.attrs.p)
        for _, i, _ in compiled.walk()
        if i.node.op == "drop-path" and isinstance(i.attrs.p, PerCopy)
    ]
    assert rates, "some drop-path rate follows a copy's index"


def test_convnext_s_rates_are_the_published_schedule() -> None:
    """0.1·b/17 for block b of 18: the ×9 stage's copy k is block k + 6."""
    compiled = compile_spec(SPECS / "convnext-t.lbdl")
    rates = {str(i.attrs.p) for _, i, _ in compiled.walk() if i.node.op == "drop-path"}
    assert rates == {"k/170", "k/170 + 3/170", "k/170 + 3/85", "k/170 + 3/34"}

"""The task is chosen from the spec's outputs (no JAX needed), and named with ``--task``."""

from __future__ import annotations

from pathlib import Path

import pytest

import lbdl_dsl
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training.signature import signature
from lbdl_dsl.training.tasks import choose

SPECS = Path(__file__).resolve().parents[2] / "specs"


def sig_of(name: str, **overrides: object):
    return signature(lbdl_dsl.check(SPECS / f"{name}.lbdl", **overrides))


def test_a_token_model_is_trained_on_the_next_token() -> None:
    task = choose(sig_of("gpt", N=1, D=16, H=2, V=40, T=12))
    assert (task.kind, task.output.name, task.source, task.classes) == ("next-token", "P", "X", 40)
    assert task.target_shape == (12,) and task.target_dtype == "int32"


def test_a_class_sized_output_is_classified() -> None:
    task = choose(sig_of("digits-cnn"))
    assert (task.kind, task.classes, task.target_shape) == ("classify", 10, ())
    assert task.describe() == "classify (cross-entropy over 10 classes) on output Ŷ (10)"


def test_other_outputs_get_the_mean_squared_error() -> None:
    task = choose(sig_of("dcgan-generator"))
    assert (task.kind, task.target_shape) == ("mse", (3, 64, 64))


def test_several_outputs_need_a_target() -> None:
    with pytest.raises(LbdlError) as err:
        choose(sig_of("autoencoder"))
    assert err.value.first.message == (
        "the spec has 2 outputs (code, X̂); which one does the loss read?"
    )
    assert err.value.first.hint == "name it: --target X̂"
    task = choose(sig_of("autoencoder"), "reconstruct", "X̂")
    assert (task.kind, task.source, task.target_dtype) == ("reconstruct", "X", None)


def test_a_token_output_is_found_among_several() -> None:
    task = choose(sig_of("whisper", S=16))
    assert (task.kind, task.output.name) == ("next-token", "P")


def test_an_unknown_target_lists_the_outputs() -> None:
    with pytest.raises(LbdlError) as err:
        choose(sig_of("vae"), target="Z")
    assert err.value.first.message == "--target: the spec has no output `Z`"
    assert err.value.first.hint == "its outputs: X̂, μ, logvar"


def test_a_task_that_does_not_fit_the_output_is_refused() -> None:
    with pytest.raises(LbdlError, match="--task next-token needs a T×V output"):
        choose(sig_of("digits-cnn"), "next-token")
    with pytest.raises(LbdlError, match="--task classify needs an output whose last axis"):
        choose(sig_of("dcgan-discriminator"), "classify")


def test_a_symbolic_size_asks_for_its_value() -> None:
    with pytest.raises(LbdlError) as err:
        sig_of("gpt", N=1, D=16, H=2, V=40)
    assert err.value.first.message == (
        "the spec's input X has the symbolic size `T`; training needs it as a number"
    )
    assert err.value.first.hint == "give it a value with --set, e.g. --set T=64"

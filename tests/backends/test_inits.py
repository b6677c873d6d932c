"""Initialisers per box: a normal law and a truncated one of std=, Glorot's name for Xavier's,
zeros; drawn from the one init stream, so a shard of an array is what the whole array holds
there."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax import shard_init
from lbdl_dsl.backends.jax.runtime.inits import init_arrays


def _weights(init: str) -> np.ndarray:
    text = f"model m:\n  input X: 300\n  fc out=400 {init}\n"
    model = lbdl_dsl.compile("m.lbdl", text=text)
    params, _ = model.init(jax.random.key(0))
    return np.asarray(params["fc_0"]["w"], np.float64)


def test_a_normal_law_of_std() -> None:
    w = _weights("init=normal std=0.5")
    assert abs(w.mean()) < 0.005 and w.std() == pytest.approx(0.5, rel=0.01)
    assert np.mean(np.abs(w) > 1.0) == pytest.approx(0.0455, abs=0.002)  # beyond 2σ
    lecun = _weights("init=normal")
    assert lecun.std() == pytest.approx(1 / np.sqrt(300), rel=0.01)


def test_a_truncated_normal_law_stays_within_two_sigma() -> None:
    w = _weights("init=truncated-normal std=0.02")
    assert np.abs(w).max() <= 0.04 * (1 + 1e-5)
    assert w.std() == pytest.approx(0.02 * 0.8796, rel=0.01)  # the truncated law's std


def test_glorot_is_xavier_and_zeros_are_zeros() -> None:
    np.testing.assert_array_equal(_weights("init=glorot"), _weights("init=xavier"))
    np.testing.assert_array_equal(_weights("init=zeros"), 0.0)


@pytest.mark.parametrize("how", ["normal", "truncated_normal"])
def test_a_block_of_an_array_is_drawn_as_the_whole_array_draws_it(how: str) -> None:
    table = {"a": ((3, 5), "fan_in", 5.0), "w": ((40, 30), how, 0.1)}
    key = jax.random.key_data(jax.random.key(7))
    whole = init_arrays(key, table)[1]
    stream = shard_init.Stream(key)
    offset = shard_init.offsets(table)["w"]
    part = shard_init.block(stream, table["w"], offset, (slice(10, 20), slice(5, 25)))
    np.testing.assert_array_equal(part, whole[10:20, 5:25])

"""`training.rescue`: what a process whose peer died may save alone (one process here; the
launcher tests kill a real peer, and cover the state split over processes). A state is saved
only when its step completed, it was not handed to a later step, and every array is whole in
this process."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.training import rescue
from lbdl_dsl.training.step import TrainState


def _state() -> TrainState:
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    return TrainState(jnp.int32(4), params, {}, (), jnp.zeros(2, jnp.uint32))


def test_a_whole_state_comes_back_on_the_host_as_it_is() -> None:
    ts = _state()
    held = rescue.held_whole(ts)
    assert held.state is not None and held.why_not == ""
    for mine, theirs in zip(jax.tree.leaves(held.state), jax.tree.leaves(ts), strict=True):
        assert isinstance(mine, np.ndarray)
        np.testing.assert_array_equal(mine, np.asarray(theirs))
    assert int(held.state.step) == 4


def test_a_state_handed_to_a_step_is_not_saved() -> None:
    ts = _state()
    ts.params["w"].delete()  # what donating it to the next step does to an array
    held = rescue.held_whole(ts)
    assert held.state is None and "donated" in held.why_not

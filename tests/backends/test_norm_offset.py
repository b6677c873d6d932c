"""A norm's gain of 1 + w (`offset=1`, Gemma's norms): w starts at 0, the gain at 1, and
weights trained so are read as they are, not shifted on import."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers.norm import layernorm_ref, rmsnorm_ref


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_the_gain_is_one_plus_the_weight(norm: str) -> None:
    model = lbdl_dsl.compile("m.lbdl", text=f"model m:\n  input X: 5×8\n  {norm} offset=1.0\n")
    params, state = model.init(jax.random.key(0))
    box = f"{norm}_0"
    np.testing.assert_array_equal(np.asarray(params[box]["scale"]), 0.0)  # the gain starts at 1
    w = np.linspace(-0.5, 0.5, 8).astype(np.float32)
    params[box]["scale"] = w
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32)
    y, _ = model.apply(params, state, x)
    if norm == "rmsnorm":
        want = rmsnorm_ref(x, 1 + w, 1e-6)
    else:
        want = layernorm_ref(x, 1 + w, np.asarray(params[box]["bias"]), 1e-5, 1)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)


def test_an_offset_needs_a_gain() -> None:
    with pytest.raises(LbdlError, match="affine=false"):
        lbdl_dsl.compile(
            "m.lbdl", text="model m:\n  input X: 8\n  rmsnorm offset=1.0 affine=false\n"
        )

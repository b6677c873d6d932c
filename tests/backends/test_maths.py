"""The elementwise maths boxes (core/layers/maths.py) through a generated model: each value and
its gradient against NumPy formulas written here, on inputs inside the function's domain."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.core.errors import LbdlError


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


CASES = {  # box: (f, f′), on x in (−2, 2) or, for a positive domain, (0.5, 2.5)
    "exp": (np.exp, np.exp),
    "log": (np.log, lambda x: 1 / x),
    "abs": (np.abs, np.sign),
    "softplus": (lambda x: np.log1p(np.exp(x)), _sigmoid),
    "softplus beta=2.0": (lambda x: np.log1p(np.exp(2 * x)) / 2, lambda x: _sigmoid(2 * x)),
    "sqrt": (np.sqrt, lambda x: 0.5 / np.sqrt(x)),
    "rsqrt": (lambda x: x**-0.5, lambda x: -0.5 * x**-1.5),
    "clamp min=-0.5 max=1.0": (
        lambda x: np.clip(x, -0.5, 1.0),
        lambda x: ((x > -0.5) & (x < 1.0)).astype(float),
    ),
    "clamp min=0.0": (lambda x: np.maximum(x, 0.0), lambda x: (x > 0).astype(float)),
    "pow p=3.0": (lambda x: x**3, lambda x: 3 * x**2),
    "pow p=0.5": (np.sqrt, lambda x: 0.5 / np.sqrt(x)),
}
POSITIVE = ("log", "sqrt", "rsqrt", "pow p=0.5")


@pytest.mark.parametrize("box", list(CASES))
def test_value_and_gradient_match_the_formula(box: str) -> None:
    f, df = CASES[box]
    model = lbdl_dsl.compile("m.lbdl", text=f"model m:\n  input X: 5×7\n  {box}\n  output Y\n")
    params, state = model.init(jax.random.key(0))
    x = np.random.default_rng(0).uniform(-2, 2, size=(2, 5, 7))
    x = np.abs(x) + 0.5 if box in POSITIVE else x
    x = x.astype(np.float32)
    y, _ = model.apply(params, state, x)
    np.testing.assert_allclose(np.asarray(y), f(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    grad = jax.grad(lambda v: jnp.sum(model.apply(params, state, v)[0]))(x)
    np.testing.assert_allclose(np.asarray(grad), df(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_counts_are_zero_and_the_shape_is_kept() -> None:
    model = lbdl_dsl.compile("m.lbdl", text="model m:\n  input X: 5×7\n  softplus\n  exp\n")
    assert model.param_count == 0
    assert model.checked.totals["macs"].as_int() == 0
    assert model.outputs == {"Y": (5, 7)}


def test_clamp_needs_a_bound_in_order() -> None:
    with pytest.raises(LbdlError, match="needs a bound"):
        lbdl_dsl.compile("m.lbdl", text="model m:\n  input X: 5\n  clamp\n")
    with pytest.raises(LbdlError, match="is above"):
        lbdl_dsl.compile("m.lbdl", text="model m:\n  input X: 5\n  clamp min=2.0 max=1.0\n")


def test_a_boolean_tensor_is_refused() -> None:
    with pytest.raises(LbdlError, match="cast to=float"):
        lbdl_dsl.compile("m.lbdl", text="model m:\n  input X: 5 bool\n  exp\n")

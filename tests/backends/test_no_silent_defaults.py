"""Three defaults that gave a wrong answer without a word (issue 41): a Boolean tensor read as
0/1 by arithmetic, and a gated feed-forward block that had only the exact GELU (the mixture of
experts' capacity in evaluation is tests/backends/test_moe.py's)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers.activation import gelu_ref


@pytest.mark.parametrize("box", ["+(M)", "mul(M)"])
def test_a_boolean_tensor_in_arithmetic_is_refused_with_a_cast_as_hint(box: str) -> None:
    text = f"model m:\n  input M: 4×4 bool\n  input X: 4×4\n  {box}\n  output Y\n"
    with pytest.raises(LbdlError) as err:
        lbdl_dsl.compile("case.lbdl", text=text)
    assert "is a Boolean tensor" in str(err.value)
    assert "cast to=float" in str(err.value)


def test_an_explicit_cast_reads_the_mask_as_zero_and_one() -> None:
    text = (
        "model m:\n  input X: 4×4\n  input M: 4×4 bool\n"
        "  from M\n  cast to=float -> m\n  from X\n  mul(m)\n  output Y\n"
    )
    model = lbdl_dsl.compile("case.lbdl", text=text)
    params, state = model.init(jax.random.key(0))
    x = np.arange(32, dtype=np.float32).reshape(2, 4, 4)
    m = np.random.default_rng(0).random((2, 4, 4)) > 0.5
    y, _ = model.apply(params, state, x, m)
    np.testing.assert_array_equal(np.asarray(y), np.where(m, x, 0.0))


def _ffw(act: str) -> tuple[np.ndarray, np.ndarray, dict]:
    text = f"model m:\n  input X: 6×8\n  ffw hidden=12 act={act} p=0.0\n  output Y\n"
    model = lbdl_dsl.compile("case.lbdl", text=text)
    params, state = model.init(jax.random.key(0))
    x = 3 * np.random.default_rng(1).normal(size=(2, 6, 8)).astype(np.float32)
    y, _ = model.apply(params, state, x)
    return x, np.asarray(y), jax.tree.map(np.asarray, params["ffw_0"])


def test_a_gated_ffw_takes_the_tanh_form_of_gelu() -> None:
    """GeGLU with the tanh GELU (as models trained with it compute): the gate's form, computed
    from the formula, and apart from the exact form by more than rounding."""
    x, y, p = _ffw("geglu-tanh")
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    h = (x - mu) / np.sqrt(var + 1e-5) * p["ln"]["scale"] + p["ln"]["bias"]
    gate = gelu_ref(h @ p["gate"]["w"] + p["gate"]["b"], True)
    want = x + (gate * (h @ p["up"]["w"] + p["up"]["b"])) @ p["down"]["w"] + p["down"]["b"]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    _, exact, _ = _ffw("geglu")
    assert np.abs(exact - y).max() > 1e-4


def test_a_moe_takes_the_tanh_form_of_gelu() -> None:
    text = "model m:\n  input X: 6×8\n  moe e=3 k=2 hidden=5 act={}\n  output Y\n"
    ys = []
    for act in ("geglu", "geglu-tanh"):
        model = lbdl_dsl.compile("case.lbdl", text=text.format(act))
        params, state = model.init(jax.random.key(0))
        x = 3 * np.random.default_rng(1).normal(size=(2, 6, 8)).astype(np.float32)
        ys.append(np.asarray(model.apply(params, state, x)[0]))
    assert np.abs(ys[0] - ys[1]).max() > 1e-4

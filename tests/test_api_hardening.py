"""The Python API on bad arguments, in notebooks and under both modes of differentiation
(issue 17, items 8, 9 and 18): every bad argument is an `ArgumentError` (an `LbdlError` and a
`ValueError`) naming it, and `Model.apply` checks its inputs before anything is traced.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import lbdl_dsl
from lbdl_dsl import ArgumentError, LbdlError

REPO = Path(__file__).resolve().parents[1]
LENET = REPO / "specs" / "lenet.lbdl"
CONV = "model small:\n  input X: 3×8×8\n  conv-2d k=3 c=4\n  relu\n  conv-2d k=1 s=2 c=2\n"
TOKENS = "model lm:\n  input X: 5 int<11>\n  embed d=4\n"


@pytest.fixture(scope="module")
def conv() -> lbdl_dsl.api.Any:
    return lbdl_dsl.compile(text=CONV)


# -- arguments ---------------------------------------------------------------------------------


def test_a_path_without_its_suffix_is_a_path() -> None:
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(str(LENET.with_suffix("")))
    assert info.value.first.message == f"no such file: {LENET.with_suffix('')}"
    assert info.value.first.hint == f"did you mean `{LENET}`?"


def test_spec_text_passed_as_a_path() -> None:
    with pytest.raises(ArgumentError) as info:
        lbdl_dsl.check("model m:\n  input X: 3\n  relu\n")
    assert str(info.value) == (
        "error: spec is a path, and this looks like the text of a spec\n"
        "hint: pass the text as text=...: lbdl_dsl.check(text=source)"
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: lbdl_dsl.check(), "give a spec: a path, or its text as text=..."),
        (lambda: lbdl_dsl.check(42), "spec must be a path (str or os.PathLike), got int"),
        (lambda: lbdl_dsl.check(text=3), "text must be a str or bytes, got int"),
        (
            lambda: lbdl_dsl.compile(LENET, dtype="float64"),
            "dtype must be one of float32, bfloat16; got 'float64'",
        ),
        (lambda: lbdl_dsl.compile(LENET, unroll="yes"), "unroll must be True or False, got 'yes'"),
        (
            lambda: lbdl_dsl.check(LENET, import_path=3),
            "import_path must be a list of folders, got int",
        ),
        (lambda: lbdl_dsl.check(LENET, **{"not a name": 1}), "'not a name' cannot name a model"),
    ],
)
def test_bad_arguments(call, message: str) -> None:
    with pytest.raises(ArgumentError) as info:
        call()
    assert info.value.first.message.startswith(message)
    assert isinstance(info.value, ValueError)


def test_dtype_as_a_type() -> None:
    assert lbdl_dsl.compile(text=CONV, dtype=jnp.bfloat16).dtype == "bfloat16"


def test_str_of_an_error_shows_the_line_and_caret(tmp_path: Path) -> None:
    path = tmp_path / "bad.lbdl"
    path.write_text("model m:\n  input X: 3×8×8\n  conv-2d k=3 c=4   4×8×8\n", "utf-8")
    with pytest.raises(LbdlError) as info:
        lbdl_dsl.check(path)
    lines = str(info.value).split("\n")
    assert lines[0] == f"{path}:3:21: error: `conv-2d` gives 4×6×6, but the annotation says 4×8×8"
    assert lines[1:3] == ["    conv-2d k=3 c=4   4×8×8", "                      ^^^^^"]


# -- Model.apply -------------------------------------------------------------------------------


def test_channels_last_input(conv) -> None:
    params, state = conv.init(jax.random.key(0))
    with pytest.raises(ArgumentError) as info:
        conv.apply(params, state, jnp.zeros((4, 8, 8, 3)))
    assert str(info.value) == (
        "error: input X expects (B, 3, 8, 8), channels first; got (4, 8, 8, 3)\n"
        "hint: channels last? the spec's layout is channels first: jnp.moveaxis(x, -1, 1)"
    )


@pytest.mark.parametrize(
    "inputs, message",
    [
        ((jnp.zeros((3, 8, 8)),), "input X expects (B, 3, 8, 8), channels first; got (3, 8, 8)"),
        ((jnp.zeros((2, 3, 8, 8), jnp.int32),), "input X holds floats, got int32"),
        ((), "model `small` takes 1 input (X), got 0"),
        (([[1.0]],), "input X must be an array, got list"),
    ],
)
def test_bad_inputs(conv, inputs, message: str) -> None:
    params, state = conv.init(jax.random.key(0))
    with pytest.raises(ArgumentError) as info:
        conv.apply(params, state, *inputs)
    assert info.value.first.message == message


def test_params_of_another_model(conv) -> None:
    other = lbdl_dsl.compile(text=CONV.replace("c=4", "c=5"))
    params, state = other.init(jax.random.key(0))
    with pytest.raises(ArgumentError) as info:
        conv.apply(params, state, jnp.zeros((2, 3, 8, 8)))
    assert info.value.first.message.startswith("these params do not fit the model:")


def test_token_ids_out_of_range() -> None:
    model = lbdl_dsl.compile(text=TOKENS)
    params, state = model.init(jax.random.key(0))
    with pytest.raises(ArgumentError) as info:
        model.apply(params, state, jnp.full((2, 5), 11, jnp.int32))
    assert info.value.first.message == "input X holds token ids in [0, 11), got ids from 11 to 11"
    y, _ = model.apply(params, state, jnp.full((2, 5), 10, jnp.int32))
    assert y.shape == (2, 5, 4)


def test_checks_run_under_jit_once_per_signature(conv) -> None:
    params, state = conv.init(jax.random.key(0))
    f = jax.jit(conv.apply)
    assert f(params, state, jnp.ones((2, 3, 8, 8)))[0].shape == (2, 2, 3, 3)
    with pytest.raises(ArgumentError):
        f(params, state, jnp.ones((2, 8, 8, 3)))


# -- both modes of differentiation -------------------------------------------------------------


@pytest.mark.parametrize(
    "k, stride, padding, groups", [(3, (1, 1), ((1, 1), (0, 1)), 1), (1, (2, 2), ((0, 0),) * 2, 1)]
)
def test_the_runtime_convolution_has_a_forward_derivative(k, stride, padding, groups) -> None:
    """jax.jvp through our convolution (a custom JVP), against JAX's own on the same operands:
    a 3×3 kernel with uneven padding and a strided 1×1 kernel (the matrix-product path)."""
    from lbdl_dsl.backends.jax.runtime.conv import conv as ours

    keys = jax.random.split(jax.random.key(0), 4)
    x, dx = (jax.random.normal(k_, (2, 6, 5, 4)) for k_ in keys[:2])
    w, dw = (jax.random.normal(k_, (k, k, 4, 3)) for k_ in keys[2:])

    def theirs(x, w):
        return jax.lax.conv_general_dilated(
            x, w, stride, padding, dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    def mine(x, w):
        return ours(x, w, stride=stride, padding=padding, dilation=(1, 1), groups=groups)

    def jvp(f):  # jitted: eager dispatch of each small op costs more than compiling them
        return jax.jit(lambda *a: jax.jvp(f, a[:2], a[2:]))(x, w, dx, dw)

    def grad(f):
        return jax.jit(jax.grad(lambda x, w: (f(x, w) ** 2).sum(), argnums=(0, 1)))(x, w)

    (y, dy), (y_ref, dy_ref) = jvp(mine), jvp(theirs)
    assert np.allclose(y, y_ref, atol=1e-4) and np.allclose(dy, dy_ref, atol=1e-4)
    g, g_ref = grad(mine), grad(theirs)
    assert all(np.allclose(a, b, atol=1e-3) for a, b in zip(g, g_ref, strict=True))


@pytest.mark.slow
def test_convolutions_differentiate_forward_and_backward(conv) -> None:
    params, state = conv.init(jax.random.key(0))
    params = jax.tree.map(lambda a: a.astype(jnp.float32), params)
    x = jax.random.normal(jax.random.key(1), (1, 3, 8, 8))

    @jax.jit
    def f(params, x):
        return conv.apply(params, state, x)[0]

    check_grads(f, (params, x), order=1, modes=("fwd", "rev"), atol=2e-2, rtol=2e-2)
    jac = jax.jacfwd(lambda x: f(params, x))(x)
    assert jac.shape == (1, 2, 3, 3, 1, 3, 8, 8)
    assert np.allclose(jac, jax.jacrev(lambda x: f(params, x))(x), atol=1e-4)


# -- notebooks ---------------------------------------------------------------------------------


def test_short_reprs(conv) -> None:
    assert repr(lbdl_dsl.check(LENET)) == (
        f"<lbdl spec lenet ({LENET}): 105,506 parameters, 1,333,200 MACs per sample>"
    )
    assert repr(conv) == "<lbdl Model small: 122 parameters>"


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz")
def test_a_model_shows_as_one_table_and_one_figure(conv) -> None:
    html = conv._repr_html_()
    assert html.count('<div class="lbdl-summary">') == 1
    assert html.count("<svg") == 1 and "<?xml" not in html
    figure = conv.diagram()
    assert figure._repr_svg_().lstrip().startswith("<?xml") or "<svg" in figure[:400]
    assert repr(figure).startswith("<SVG figure")

"""The vision and diffusion specs after the book (ConvNeXt-T, Swin-T, EfficientNet-B0,
MLP-Mixer B/16, DiT-S/2) in small configurations: forward, and a training step that lowers the
loss; DiT's adaLN-Zero starting as the identity; what the new boxes promise beyond their NumPy
references (drop-path's per-sample masks, constants that are neither parameters nor state,
initialiser choices, broadcasting of lower-rank inputs)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import lbdl_dsl
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]

# Each spec's small configuration (--set): the same boxes and blocks, small widths and images.
SMALL: dict[str, dict] = {
    "convnext-t": dict(I=32, C=8, classes=10),
    "swin-t": dict(I=32, C=24, w=2, s=1, classes=10),
    # at I=32 the last stage's batch norms see two values a channel (batch 2, 1×1 maps), and
    # their gradients are rounding noise: (x - m)·f + b and x·f + s gave gradients 100 % apart
    "efficientnet-b0": dict(I=64, classes=10),
    "mlp-mixer": dict(I=32, P=8, D=32, N=2, S=16, E=64, classes=10),
    "dit-s2": dict(I=8, D=48, N=2, H=2, classes=10),
}


def _model(name: str):
    return lbdl_dsl.compile(str(REPO / "specs" / f"{name}.lbdl"), **SMALL[name])


def _loss(model, targets):
    """Cross-entropy on class scores, or the mean square error to a target map (DiT)."""

    def loss(params, state, inputs, key):
        out, new_state = model.apply(params, state, *inputs, train=True, key=key)
        if out.ndim == 2:
            value = optax.softmax_cross_entropy_with_integer_labels(out, targets).mean()
        else:
            value = jnp.mean((out - targets) ** 2)
        return value, (out, new_state)

    return loss


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_configuration_runs_forward_and_a_training_step(name):
    model = _model(name)
    params, state = model.init(jax.random.key(0))
    inputs = model.example_inputs(jax.random.key(1), batch=2)
    (shape,) = model.outputs.values()
    if len(shape) == 1:
        targets = jax.random.randint(jax.random.key(2), (2,), 0, shape[0])
    else:
        targets = jax.random.normal(jax.random.key(2), (2, *shape))
    step = jax.jit(jax.value_and_grad(_loss(model, targets), has_aux=True))
    (before, (out, new_state)), grads = step(params, state, inputs, jax.random.key(3))
    assert out.shape == (2, *shape) and np.isfinite(np.asarray(out)).all()
    if name == "dit-s2":  # adaLN-Zero: every block the identity, the output zero at first
        np.testing.assert_array_equal(np.asarray(out), 0.0)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
    opt = optax.adam(1e-3)

    @jax.jit  # op by op, Adam over EfficientNet's 200 arrays compiled for 10 to 25 s
    def adam(grads, params):
        updates, _ = opt.update(grads, opt.init(params), params)
        return optax.apply_updates(params, updates)

    params = adam(grads, params)
    (after, _), _ = step(params, state, inputs, jax.random.key(3))  # the same random draws
    assert float(after) < float(before), (float(before), float(after))


def test_dit_s_modulations_and_output_layer_start_at_zero():
    """adaLN-Zero: every modulation and the output layer start at zero, so that each DiT block
    is the identity and the output is zero until training moves them (the training step above
    sees that output)."""
    model = _model("dit-s2")
    params, state = model.init(jax.random.key(0))
    table = model.module["PARAMS"]
    zeros = [path for path, (_, how, value) in table.items() if how == "const" and value == 0]
    assert {"repeat_0/0/dit_0/ada/w", "repeat_0/1/dit_0/ada/w", "final_ada/w", "fc_1/w"} <= set(
        zeros
    )
    assert params["repeat_0"]["1"]["dit_0"]["ada"]["w"].shape == (48, 6 * 48)  # 2 blocks apart
    assert table["t_emb/w"][1] == "std" and table["conv_2d_0/w"][1] == "std"  # 0.02, xavier
    assert "positions" not in params and state == {}  # the sin-cos table is a constant


def _one_box(inputs: str, box: str, **overrides):
    return lbdl_dsl.compile("case.lbdl", text=f"model m:\n{inputs}\n  {box}\n", **overrides)


def test_drop_path_drops_whole_samples_in_training_only():
    model = _one_box("  input X: 4×3×3", "drop-path p=0.25")
    params, state = model.init(jax.random.key(0))
    x = np.ones((4000, 4, 3, 3), np.float32)
    y, _ = model.apply(params, state, x)
    np.testing.assert_array_equal(np.asarray(y), x)  # evaluation: the identity
    y, _ = model.apply(params, state, x, train=True, key=jax.random.key(1))
    y = np.asarray(y).reshape(4000, -1)
    kept = y[:, 0] != 0
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)  # kept ones scaled by 1/(1 − p)
    np.testing.assert_array_equal(y[~kept], 0.0)  # whole samples dropped, never parts
    assert abs(kept.mean() - 0.75) < 0.03
    assert abs(y.mean() - 1.0) < 0.05  # the expectation is preserved
    other, _ = model.apply(params, state, x, train=True, key=jax.random.key(2))
    assert (np.asarray(other).reshape(4000, -1)[:, 0] != 0).tolist() != kept.tolist()
    with pytest.raises(ValueError, match="key"):
        model.apply(params, state, x, train=True)


def test_constants_are_neither_parameters_nor_state_nor_inputs():
    text = (
        "model m:\n  input X: 16×8\n  sincos-1d  16×8  -> pe\n  band below=2  16×16  -> keep\n"
        "  rel-index grid=(4, 4)  16×16  -> index\n  from X\n  +(pe)\n  attention(X, X, keep)\n"
    )
    model = lbdl_dsl.compile("c.lbdl", text=text)
    assert model.param_count == 0 and list(model.inputs) == ["X"]
    params, state = model.init(jax.random.key(0))
    assert params == {} and state == {}
    checked = model.checked
    assert checked.totals["params"].as_int() == 0 and checked.totals["state"].as_int() == 0
    by_op = {inst.node.op: inst for inst in checked.root}
    assert by_op["band"].output.dtype == "bool"
    assert (by_op["rel-index"].output.dtype, by_op["rel-index"].output.vocab.as_int()) == (
        "int",
        49,
    )


def test_sincos_1d_is_the_table_pos_enc_adds():
    """Two implementations of § 4.10's table agree: the constant and pos-enc's."""
    const = _one_box("  input X: 12×6", "sincos-1d  12×6\n  +(X)")
    added = _one_box("  input X: 12×6", "pos-enc")
    x = np.random.default_rng(0).normal(size=(2, 12, 6)).astype(np.float32)
    a, _ = const.apply({}, {}, x)
    b, _ = added.apply({}, {}, x)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_rel_index_is_swin_s_relative_position_index():
    """Swin's construction (coordinates, pairwise differences, shifted and in mixed radix),
    written as the paper's code does it, against the constant."""
    w = 7
    coords = np.stack(np.meshgrid(np.arange(w), np.arange(w), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (w - 1)
    swin = rel[:, :, 0] * (2 * w - 1) + rel[:, :, 1]
    model = _one_box("  input X: 1", "output X\n  rel-index grid=(7, 7)  49×49\n  output I")
    out, _ = model.apply({}, {}, np.zeros((1, 1), np.float32))
    np.testing.assert_array_equal(np.asarray(out["I"])[0], swin)


def test_initialiser_choices():
    model = _one_box(
        "  input X: 300", "fc init=zeros  200\n  fc std=0.5  400\n  fc init=xavier 100"
    )
    params, _ = model.init(jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(params["fc_0"]["w"]), 0.0)
    assert abs(float(np.std(params["fc_1"]["w"])) - 0.5) < 0.01
    xavier = np.asarray(params["fc_2"]["w"])  # uniform within √(6/(fan-in + fan-out))
    assert np.abs(xavier).max() <= np.sqrt(6 / 500) and np.abs(xavier).max() > 0.9 * np.sqrt(
        6 / 500
    )
    assert model.module["PARAMS"]["fc_1/w"][1] == "std"


def test_a_lower_rank_input_broadcasts_after_the_batch_axis():
    """T×D · D and T×D + D: the vector is the same for every position (it failed to run)."""
    text = "model m:\n  input X: 4×6\n  input c: 6\n  from X\n  mul(c)\n  +(c, X)\n"
    model = lbdl_dsl.compile("b.lbdl", text=text)
    x, c = (
        np.random.default_rng(i).normal(size=s).astype(np.float32)
        for i, s in enumerate([(2, 4, 6), (2, 6)])
    )
    y, _ = model.apply({}, {}, x, c)
    np.testing.assert_allclose(np.asarray(y), x * c[:, None] + c[:, None] + x, rtol=1e-6)


def test_layernorm_of_the_last_axes_runs():
    """`layernorm axes=2` once stopped with a leaked TypeError; it normalises the last two axes."""
    model = _one_box("  input X: 4×6×8", "layernorm axes=2")
    x = np.random.default_rng(0).normal(size=(2, 4, 6, 8)).astype(np.float32)
    params, state = model.init(jax.random.key(0))
    y, _ = model.apply(params, state, x)
    y = np.asarray(y).reshape(2, 4, -1)
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.std(-1), 1.0, atol=1e-3)
    assert params["layernorm_0"]["scale"].shape == (6, 8)


def test_a_rate_may_be_an_expression_of_a_block_parameter():
    """`drop-path p=i/55`: the i-th block's rate, as Swin and ConvNeXt raise it with depth; a
    fraction used where a size is needed is refused, never left as a symbol."""
    text = (
        "block b(i) on C×H×W:\n  drop-path p=i/10\n\nmodel m:\n  input X: 4×3×3\n  b i=3\n  b i=7\n"
    )
    compiled = compile_spec(text, file="rates.lbdl")
    rates = [inst.body[0].attrs.p for inst in compiled.root]
    assert rates == pytest.approx([0.3, 0.7])
    with pytest.raises(LbdlError, match="9/2, not a whole number"):
        compile_spec("model m(n=9/2):\n  input X: 4\n  fc n\n", file="n.lbdl")


def test_window_attention_pads_a_map_as_torchvision_s_swin() -> None:
    """torchvision's shifted_window_attention on a 5×7 map with a 3×3 window shifted by 1: it
    pads to 6×9 with zeros at the bottom and right, attends, and crops; so does window-att
    (tests/fixtures/swin/make_padded_window.py; measured 4.8e-7 of outputs up to 3.1)."""
    from lbdl_dsl.backends.jax.runtime.vision import window_attention

    d = np.load(Path(__file__).resolve().parents[1] / "fixtures" / "swin" / "padded-window.npz")
    c = 8
    w, b = d["qkv_w"], d["qkv_b"]
    p = {f"w{n}": w[i * c : (i + 1) * c].T for i, n in enumerate("qkv")}
    p |= {f"b{n}": b[i * c : (i + 1) * c] for i, n in enumerate("qkv")}
    p |= {"wo": d["proj_w"].T, "bo": d["proj_b"], "table": d["table"]}
    checked = compile_spec("model m:\n  input X: 8×5×7\n  window-att h=2 w=3 shift=1\n")
    a = checked.root[0].attrs
    assert (a.window, a.shift, a.pad) == (3, 1, (1, 2))
    y = window_attention(d["x"], p, heads=2, window=3, shift=1, pad=a.pad)
    np.testing.assert_allclose(np.asarray(y), d["y"], atol=5e-6)

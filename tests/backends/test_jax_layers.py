"""Every layer's lowering, through a whole generated model, against a NumPy reference.

Each case compiles a one-box spec, runs the generated ``apply`` (so layouts, parameter paths and
hyper-parameter passing are exercised, not only the runtime function), and compares with a
reference written in NumPy in channels-first order (tests/numpy_ref.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy_ref as ref  # noqa: E402

import lbdl_dsl  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


def one_box(inputs: str, box: str, **overrides):
    """A model whose body is ``box`` on the declared ``inputs`` (extra inputs A, B, C...)."""
    text = f"model m:\n{inputs}\n  {box}\n"
    return lbdl_dsl.compile("case.lbdl", text=text, **overrides)


def npy(tree):
    """Parameters as NumPy arrays, so that references compute in NumPy, not in JAX."""
    return jax.tree.map(np.asarray, tree)


def run(model, *xs, train=False, key=None):
    params, state = model.init(jax.random.key(0))
    y, new_state = model.apply(params, state, *xs, train=train, key=key)
    return npy(params), npy(state), np.asarray(y), npy(new_state)


def rand(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def close(a, b, tol=2e-4):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


CONV_CASES = [
    ("8×10×10", "conv-2d k=3 s=2 p=1  16×5×5", (2, 1, 1, 1)),
    ("8×10×10", "conv-2d k=3 d=2 g=2 p=same bias=false  8×10×10", (1, "same", 2, 2)),
    ("8×9×9", "conv-2d k=(3, 1) g=8  8×7×9", (1, 0, 1, 8)),
    ("4×20", "conv-1d k=3 s=2 p=1  6×10", (2, 1, 1, 1)),
]


@pytest.mark.parametrize("shape,box,args", CONV_CASES)
def test_convolution(shape, box, args):
    model = one_box(f"  input X: {shape}", box)
    x = rand((2, *model.inputs["X"][0]))
    params, _, y, _ = run(model, x)
    p = params["conv_2d_0" if "conv-2d" in box else "conv_1d_0"]
    s, pad, d, g = args
    close(y, ref.conv_nd_ref(x, p["w"], p.get("b"), s, pad, d, g))


@pytest.mark.parametrize(
    "shape,box,args",
    [
        ("4×5×5", "tconv-2d k=3 s=2 p=1 op=1  6×10×10", (2, 1, 1, 1, 1)),
        ("4×6", "tconv-1d k=2 s=2 g=2  6×12", (2, 0, 0, 1, 2)),
    ],
)
def test_transposed_convolution(shape, box, args):
    model = one_box(f"  input X: {shape}", box)
    x = rand((2, *model.inputs["X"][0]))
    params, _, y, _ = run(model, x)
    p = params["tconv_2d_0" if "2d" in box else "tconv_1d_0"]
    s, pad, op, d, g = args
    close(y, ref.conv_transpose_nd_ref(x, p["w"], p["b"], s, pad, op, d, g))


@pytest.mark.parametrize(
    "shape,box,fn",
    [
        ("3×9×9", "maxpool k=3 s=2 p=1  3×5×5", lambda x: ref.max_pool_ref(x, 3, 2, 1)),
        ("3×8×8", "maxpool k=2 d=2  3×3×3", lambda x: ref.max_pool_ref(x, 2, 2, 0, 2)),
        ("3×8", "maxpool-1d k=2  3×4", lambda x: ref.max_pool_ref(x, 2, 2, 0)),
        ("3×8×8", "avgpool k=3 s=2 p=1  3×4×4", lambda x: ref.avg_pool_ref(x, 3, 2, 1)),
        ("3×8", "avgpool-1d k=4  3×2", lambda x: ref.avg_pool_ref(x, 4, 4, 0)),
        ("3×5×5", "global-avgpool  3×1×1", ref.global_avg_pool_ref),
        ("3×4×4", "upsample f=2  3×8×8", lambda x: ref.upsample_nearest_ref(x, 2)),
        ("3×4×4", "upsample f=2 mode=bilinear", lambda x: ref.upsample_bilinear_ref(x, 2)),
        ("3×8×8", "patches P=4  4×48", lambda x: ref.patches_ref(x, 4)),
    ],
)
def test_parameter_free_spatial(shape, box, fn):
    model = one_box(f"  input X: {shape}", box)
    x = rand((2, *model.inputs["X"][0]))
    close(run(model, x)[2], fn(x))


def test_batchnorm_both_modes():
    model = one_box("  input X: 4×3×3", "batchnorm momentum=0.2")
    x = rand((5, 4, 3, 3))
    params, state, y, ns = run(model, x, train=True)
    p, s = params["batchnorm_0"], state["batchnorm_0"]
    want, mean, var = ref.batch_norm_ref(
        x, p["scale"], p["bias"], s["mean"], s["var"], True, 0.2, 1e-5
    )
    close(y, want)
    close(ns["batchnorm_0"]["mean"], mean)
    close(ns["batchnorm_0"]["var"], var)
    y_eval, ns_eval = model.apply(params, ns, x, train=False)
    want_eval, *_ = ref.batch_norm_ref(x, p["scale"], p["bias"], mean, var, False, 0.2, 1e-5)
    close(y_eval, want_eval)
    close(ns_eval["batchnorm_0"]["mean"], mean)


@pytest.mark.parametrize(
    "shape,box,fn",
    [
        ("6×8", "layernorm", lambda x, p: ref.layer_norm_ref(x, p["scale"], p["bias"], 1e-5, 1)),
        ("2×3×3", "layernorm", lambda x, p: ref.layer_norm_ref(x, p["scale"], p["bias"], 1e-5, 3)),
        (
            "8×3×3",
            "groupnorm g=4",
            lambda x, p: ref.group_norm_ref(x, p["scale"], p["bias"], 4, 1e-5),
        ),
        ("6×8", "rmsnorm", lambda x, p: ref.rms_norm_ref(x, p["scale"], 1e-6)),
        ("6×8", "fc  6×5", lambda x, p: ref.dense_ref(x, p["w"], p["b"])),
        ("6×8", "fc bias=false  6×5", lambda x, p: ref.dense_ref(x, p["w"])),
        ("6×8", "pos-embed len=10", lambda x, p: ref.add_learned_positions_ref(x, p["table"])),
        (
            "6×8",
            "cls-token  7×8",
            lambda x, p: np.concatenate([np.broadcast_to(p["e0"], (x.shape[0], 1, 8)), x], axis=1),
        ),
    ],
)
def test_layers_with_parameters(shape, box, fn):
    model = one_box(f"  input X: {shape}", box)
    x = rand((2, *model.inputs["X"][0]))
    params, _, y, _ = run(model, x)
    (p,) = params.values()
    close(y, fn(x, {k: np.asarray(v) for k, v in p.items()}))


@pytest.mark.parametrize(
    "box,fn",
    [
        ("relu", ref.relu_ref),
        ("tanh", ref.tanh_ref),
        ("sigmoid", ref.sigmoid_ref),
        ("leaky relu a=0.2", lambda x: ref.leaky_relu_ref(x, 0.2)),
        ("gelu", ref.gelu_ref),
        ("gelu approximate=true", lambda x: ref.gelu_ref(x, True)),
        ("silu", ref.silu_ref),
        ("softargmax", lambda x: ref.softmax_ref(x, -1)),
        ("softargmax axis=0", lambda x: ref.softmax_ref(x, 1)),
        ("pos-enc", ref.add_positions_ref),
        ("dropout p=0.3", lambda x: x),
        ("identity", lambda x: x),
        ("transpose  8×6", lambda x: x.transpose(0, 2, 1)),
        ("take i=2  8", lambda x: x[:, 2]),
        ("slice start=1 stop=4  3×8", lambda x: x[:, 1:4]),
        ("split n=2 i=1  3×8", lambda x: x[:, 3:]),
        ("mean  8", lambda x: x.mean(axis=1)),
        ("l2norm", lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)),
        ("reshape  48", lambda x: x.reshape(x.shape[0], 48)),
        ("reshape to=(2, -1)  2×24", lambda x: x.reshape(x.shape[0], 2, 24)),
        ("flatten  48", lambda x: x.reshape(x.shape[0], 48)),
    ],
)
def test_parameter_free_sequence(box, fn):
    model = one_box("  input X: 6×8", box)
    x = rand((2, 6, 8))
    close(run(model, x)[2], fn(x))


@pytest.mark.parametrize(
    "box,fn",
    [
        ("+(A)", lambda x, a, b: x + a),
        ("mul(B)", lambda x, a, b: x * b),
        ("concat(A)  8×3×3", lambda x, a, b: np.concatenate([x, a], axis=1)),
        ("concat(A) axis=2  4×3×6", lambda x, a, b: np.concatenate([x, a], axis=3)),
    ],
)
def test_combining_layers(box, fn):
    # every input is used: the model also outputs A + B
    text = "  input X: 4×3×3\n  input A: 4×3×3\n  input B: 4×1×1\n  from X"
    model = one_box(text, f"{box}\n  output out\n  from A\n  +(B)\n  output other")
    x, a, b = rand((2, 4, 3, 3)), rand((2, 4, 3, 3), 1), rand((2, 4, 1, 1), 2)
    params, state = model.init(jax.random.key(0))
    out, _ = model.apply(params, state, x, a, b)
    close(out["out"], fn(x, a, b))
    close(out["other"], a + b)


def test_matmul_and_attention():
    model = one_box(
        "  input Q: 5×4\n  input K: 7×4\n  input V: 7×3\n  from Q",
        "attention(K, V) causal=true\n  -> att\n  from Q\n  matmul(K) tb=true\n"
        "  output scores\n  output att",
    )
    q, k, v = rand((2, 5, 4)), rand((2, 7, 4), 1), rand((2, 7, 3), 2)
    params, state = model.init(jax.random.key(0))
    out, _ = model.apply(params, state, q, k, v)
    close(out["scores"], q @ k.transpose(0, 2, 1))
    want = ref.attention_ref(q[:, None], k[:, None], v[:, None], causal=True)[:, 0]
    close(out["att"], want)


@pytest.mark.parametrize("bias,causal", [(False, False), (True, True)])
def test_mha_self_and_cross(bias, causal):
    flags = f"bias={'true' if bias else 'false'} causal={'true' if causal else 'false'}"
    model = one_box(
        "  input X: 5×8\n  input Z: 6×4\n  from X",
        f"mha h=2 {flags}\n  -> selfatt\n  from X\n  mha(Z) h=2 {flags}\n"
        "  output cross\n  output selfatt",
    )
    x, z = rand((2, 5, 8)), rand((2, 6, 4), 1)
    params, state = model.init(jax.random.key(0))
    out, _ = model.apply(params, state, x, z)
    as_np = npy(params)
    close(out["selfatt"], ref.mha_ref(x, x, as_np["mha_0"], 2, causal=causal))
    close(out["cross"], ref.mha_ref(x, z, as_np["mha_1"], 2, causal=causal))


def test_embed_and_recurrent_layers():
    for box, fn in [
        ("rnn  6×5", ref.rnn_ref),
        ("lstm  6×5", ref.lstm_ref),
        ("gru  6×5", ref.gru_ref),
    ]:
        model = one_box("  input X: 6×4", box)
        x = rand((2, 6, 4))
        params, _, y, _ = run(model, x)
        (p,) = params.values()
        close(y, fn(x, {k: np.asarray(v) for k, v in p.items()}), 1e-4)
    model = one_box("  input X: 6 int<11>", "embed  6×3")
    ids = np.random.default_rng(0).integers(0, 11, (2, 6)).astype(np.int32)
    params, _, y, _ = run(model, ids)
    close(y, ref.embed_ref(ids, np.asarray(params["embed_0"]["table"])))


def test_dropout_needs_a_key_only_in_training():
    model = one_box("  input X: 100", "dropout p=0.5")
    x = np.ones((4, 100), np.float32)
    params, state = model.init(jax.random.key(0))
    y, _ = model.apply(params, state, x, train=True, key=jax.random.key(3))
    kept = np.asarray(y) != 0
    assert 0.3 < kept.mean() < 0.7
    close(np.asarray(y)[kept], 2.0)
    y2, _ = model.apply(params, state, x, train=True, key=jax.random.key(3))
    close(y, y2)
    with pytest.raises(ValueError, match="key"):
        model.apply(params, state, x, train=True)


def test_tied_output_layer_reads_the_embedding():
    model = one_box(
        "  input X: 4 int<9>", "embed  4×6\n  -> tokens\n  fc bias=false tie=tokens  4×9"
    )
    assert model.param_count == 9 * 6
    ids = np.arange(8, dtype=np.int32).reshape(2, 4)
    params, _, y, _ = run(model, ids)
    table = np.asarray(params["embed_0"]["table"])
    close(y, table[ids] @ table.T)
    assert "fc_0" not in params


def test_attention_without_a_key_bias():
    """Whisper's attention: biases on queries, values and output, none on the keys."""
    model = one_box("  input X: 5×8", "self-att h=2 bias=true kbias=false")
    params, _, y, _ = run(model, rand((2, 5, 8)))
    assert set(params["self_att_0"]) == {
        "ln_scale",
        "ln_bias",
        "wq",
        "wk",
        "wv",
        "wo",
        "bq",
        "bv",
        "bo",
    }
    assert model.param_count == 2 * 8 + 4 * 64 + 3 * 8
    assert np.isfinite(y).all()


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_registry import ENTRIES, example_spec  # noqa: E402


@pytest.mark.parametrize("layer", ENTRIES, ids=lambda layer: layer.name)
def test_every_entry_lowers_runs_and_differentiates(layer):
    """Each registry example runs in both modes with the checker's shape and finite gradients."""
    sizes = {"T": 16} if "T" in re.split(r"[×\s]", layer.example[0]) else {}
    model = lbdl_dsl.compile("example.lbdl", text=example_spec(*layer.example), **sizes)
    params, state = model.init(jax.random.key(0))
    inputs = model.example_inputs(jax.random.key(1), batch=2)
    y, _ = model.apply(params, state, *inputs)
    assert y.shape == (2, *model.outputs["Y"])

    def loss(p):
        out, _ = model.apply(p, state, *inputs, train=True, key=jax.random.key(2))
        return jnp.sum(out.astype(jnp.float32) ** 2)

    grads = jax.grad(loss)(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))

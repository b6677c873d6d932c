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
from lbdl_dsl.core.layers.base import Numbers  # noqa: E402

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


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_registry import ENTRIES, example_spec  # noqa: E402

CASES = [
    pytest.param(layer, shape, line, id=f"{layer.name}: {line.strip()}")
    for layer in ENTRIES
    for shape, line in (layer.example, *layer.cases)
]


def _sizes(shape: str) -> dict[str, int]:
    return {"T": 6} if "T" in re.split(r"[×\s]", shape) else {}


def _domain(layer, arrays: list) -> list:
    """The example inputs inside the entry's domain: |x| + ½ for a function of positive
    values (log, sqrt), so that its reference and its gradient are numbers."""
    if not layer.positive:
        return arrays
    return [jnp.abs(a) + 0.5 if jnp.issubdtype(a.dtype, jnp.floating) else a for a in arrays]


def _as_reference(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind == "f" else a


@pytest.mark.parametrize("layer,shape,line", CASES)
def test_every_lowering_matches_its_entry_s_reference(layer, shape, line):
    """Generated from the registry: each entry's example and cases, run through a whole
    generated model (layouts, parameter paths, attributes), against the entry's NumPy
    reference in channels-first order, in evaluation mode."""
    model = lbdl_dsl.compile("case.lbdl", text=example_spec(shape, line), **_sizes(shape))
    params, state = model.init(jax.random.key(0))
    arrays = _domain(layer, model.example_inputs(jax.random.key(1), batch=2))
    # jitted: one program to compile, where running op by op compiled each operation apart
    # (the eager run is the next test's)
    y, _ = jax.jit(model.apply)(params, state, *arrays)
    y = y["Y"] if isinstance(y, dict) else y  # a constant's model passes its input X through
    graph = model.checked.program.model.body
    (inst,) = [i for i in model.checked.root if i.node.kind == "layer"]
    by_name = dict(zip(model.checked.inputs, (np.asarray(a) for a in arrays)))
    xs = [_as_reference(by_name[graph.node(u).name]) for u in graph.preds(inst.id)]
    p = jax.tree.map(_as_reference, npy(params).get(inst.id, {}))
    s = jax.tree.map(_as_reference, npy(state).get(inst.id, {}))
    close(y, layer.reference(xs, p, s, Numbers(inst.attrs)), 3e-4)


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
    assert set(params["self_att_0"]) == {"ln", "att"}
    assert set(params["self_att_0"]["att"]) == {"wq", "wk", "wv", "wo", "bq", "bv", "bo"}
    assert model.param_count == 2 * 8 + 4 * 64 + 3 * 8
    assert np.isfinite(y).all()


@pytest.mark.parametrize("layer", ENTRIES, ids=lambda layer: layer.name)
def test_every_entry_lowers_runs_and_differentiates(layer):
    """Each registry example runs in both modes with the checker's shape and finite gradients."""
    sizes = {"T": 16} if "T" in re.split(r"[×\s]", layer.example[0]) else {}
    model = lbdl_dsl.compile("example.lbdl", text=example_spec(*layer.example), **sizes)
    params, state = model.init(jax.random.key(0))
    inputs = _domain(layer, model.example_inputs(jax.random.key(1), batch=2))
    y, _ = model.apply(params, state, *inputs)
    y = y["Y"] if isinstance(y, dict) else y  # a constant's model passes its input X through
    assert y.shape == (1 if layer.source else 2, *model.outputs["Y"])  # a constant: batch 1

    def loss(p):
        out, _ = model.apply(p, state, *inputs, train=True, key=jax.random.key(2))
        return sum(jnp.sum(o.astype(jnp.float32) ** 2) for o in jax.tree.leaves(out))

    grads = jax.jit(jax.grad(loss))(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))

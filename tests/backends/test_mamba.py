"""Recurrences and Mamba (specs/mamba-130m.lbdl): the associative scan against a sequential
loop, Mamba's block against transformers' MambaForCausalLM, its published count, its MACs by
hand, and a forward pass and a training step of a small configuration."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import lbdl_dsl
from lbdl_dsl.backends.jax.runtime.ssm import linear_recurrence, mamba_mixer
from lbdl_dsl.core.layers.ssm import scan_ref

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "mamba-130m.lbdl"
FIXTURE = REPO / "tests" / "fixtures" / "mamba" / "mamba-tiny.npz"  # make_mamba_tiny.py's


def test_the_associative_scan_is_the_sequential_loop() -> None:
    r = np.random.default_rng(0)
    a = r.uniform(0.5, 1.0, size=(3, 37, 5, 4)).astype(np.float32)
    b = r.normal(size=(3, 37, 5, 4)).astype(np.float32)
    fast = np.asarray(linear_recurrence(a, b))
    slow = np.asarray(linear_recurrence(a, b, sequential=True))
    want = scan_ref(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(slow, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fast, want, rtol=1e-5, atol=1e-5)


def test_the_selective_scan_lowerings_agree_and_differentiate_alike() -> None:
    model = lbdl_dsl.compile("m.lbdl", text="model m:\n  input X: 9×8\n  mamba state=4\n")
    params, _ = model.init(jax.random.key(0))
    p = params["mamba_0"]
    x = jax.random.normal(jax.random.key(1), (2, 9, 8))

    def run(q: dict, sequential: bool) -> jax.Array:
        return jnp.sum(mamba_mixer(x, q, state=4, rank=1, sequential=sequential) ** 2)

    np.testing.assert_allclose(float(run(p, False)), float(run(p, True)), rtol=1e-5)
    gf = jax.grad(run)(p, False)
    gs = jax.grad(run)(p, True)
    for k in gf:
        np.testing.assert_allclose(np.asarray(gf[k]), np.asarray(gs[k]), rtol=1e-4, atol=1e-5)


def test_mamba_130m_has_its_published_count_and_macs_by_hand() -> None:
    model = lbdl_dsl.compile(str(SPEC), T=1024)
    assert model.param_count == 129_135_360
    t, d, e, n, r, k, v = 1024, 768, 1536, 16, 48, 4, 50_280
    block = t * (d * 2 * e + e * (r + 2 * n) + r * e + e * d + e * k + 3 * e * n + 2 * e)
    assert model.checked.totals["macs"].as_int() == 24 * block + t * d * v


def test_the_spec_computes_what_transformers_mamba_computes() -> None:
    """transformers' MambaForCausalLM (2 layers, D=16, N=4, its sequential path), its weights
    at the spec's paths by hand: the logits agree (measured 3.6e-7 of logits up to 2.2)."""
    data = np.load(FIXTURE)
    w = {k[11:]: data[k] for k in data.files if k.startswith("w/backbone.")}
    model = lbdl_dsl.compile(str(SPEC), N=2, D=16, S=4, V=100, T=12)
    params, state = model.init(jax.random.key(0))
    params = jax.tree.map(np.asarray, params)
    params["embed_0"]["table"] = w["embeddings.weight"]
    params["rmsnorm_0"]["scale"] = w["norm_f.weight"]
    for i in range(2):
        p, hf = params["repeat_0"][str(i)]["residual_0"], f"layers.{i}."
        p["norm"]["scale"] = w[hf + "norm.weight"]
        q, m = p["mixer"], hf + "mixer."
        for name in ("in_proj", "x_proj", "dt_proj", "out_proj"):
            q[name] = w[m + name + ".weight"].T
        q["conv"] = w[m + "conv1d.weight"][:, 0, :].T  # (E, 1, k) → (k, E)
        q["conv_bias"], q["dt_bias"] = w[m + "conv1d.bias"], w[m + "dt_proj.bias"]
        q["A_log"], q["D"] = w[m + "A_log"], w[m + "D"]
    logits, _ = model.apply(params, state, data["x"])
    np.testing.assert_allclose(np.asarray(logits), data["logits"], atol=2e-5, rtol=1e-5)


def test_a_forward_pass_and_a_training_step() -> None:
    model = lbdl_dsl.compile(str(SPEC), N=2, D=32, V=100, T=16)
    params, state = model.init(jax.random.key(0))
    (tokens,) = model.example_inputs(jax.random.key(1), batch=2)
    targets = jax.random.randint(jax.random.key(2), (2, 16), 0, 100)

    def loss(p):
        logits = model.apply(p, state, tokens)[0]
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    opt = optax.adam(1e-2)
    updates, _ = opt.update(grads, opt.init(params))
    assert float(loss(optax.apply_updates(params, updates))) < float(value)
    a_log = jax.tree.leaves({k: v for k, v in grads.items() if k == "repeat_0"})
    assert any(g.shape[-1] == 16 and float(jnp.abs(g).sum()) > 0 for g in a_log)


def test_the_scan_s_states_are_counted_as_activations() -> None:
    """A sequence of T holds T·E·N states per layer while training (E = 2D, N = 16): the
    activations count them beside each box's output."""
    small = lbdl_dsl.compile(str(SPEC), N=2, D=32, V=100, T=16)
    text = "model m:\n  input X: 16×32\n  mamba\n"
    one = lbdl_dsl.compile("m.lbdl", text=text).checked.totals["activations"].as_int()
    assert one == 16 * 32 + 16 * 64 * 16  # the output, and the states
    assert small.checked.totals["activations"].as_int() > 2 * 16 * 64 * 16

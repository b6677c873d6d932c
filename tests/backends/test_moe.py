"""The mixture of experts: capacity drops, active MACs, and the load-balancing loss reached by a
training step of the small Mixtral (the dispatch itself is checked against the entry's dense
loop by tests/backends/test_jax_layers.py)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import optax
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.runtime.moe import moe, pooled_balance_loss

SPECS = Path(__file__).resolve().parents[2] / "specs"


def _experts(e: int, d: int, f: int) -> dict:
    r = np.random.default_rng(0)
    shapes = {"router": (d, e), "gate": (e, d, f), "up": (e, d, f), "down": (e, f, d)}
    return {k: r.normal(size=s).astype(np.float32) for k, s in shapes.items()}


def test_tokens_beyond_capacity_are_dropped() -> None:
    p = _experts(2, 4, 3)
    p["router"][:] = 0.0
    p["router"][:, 0] = 100.0  # every token prefers expert 0 ...
    x = np.abs(np.random.default_rng(1).normal(size=(1, 8, 4))).astype(np.float32)
    y, _ = moe(x, p, k=1, capacity=0.5, act="silu", train=True)  # ... holds ⌈0.5·8/2⌉ = 2
    kept = np.abs(np.asarray(y)).sum(-1)[0] > 0
    assert kept.tolist() == [True, True] + [False] * 6
    y, _ = moe(x, p, k=1, capacity=0.5, act="silu")  # evaluation: every token is routed
    assert (np.abs(np.asarray(y)).sum(-1)[0] > 0).all()


def test_in_evaluation_a_sample_never_depends_on_its_batch() -> None:
    """Mixtral's reference drops no token: one sample's logits are the same alone or batched
    (with the old default capacity 1.25 they differed by up to 0.66)."""
    model = lbdl_dsl.compile(
        str(SPECS / "mixtral-8x7b.lbdl"), N=1, D=16, H=2, KV=1, F=24, E=4, V=40, T=8
    )
    params, state = model.init(jax.random.key(0))
    params = jax.tree_util.tree_map_with_path(  # every token's first choice is expert 0,
        lambda path, v: v.at[..., 0].add(10.0) if "router" in str(path[-1]) else v,  # which a
        params,  # capacity would overflow
    )
    (tokens,) = model.example_inputs(jax.random.key(1), batch=6)
    alone, _ = model.apply(params, state, tokens[:1])
    batched, _ = model.apply(params, state, tokens)
    np.testing.assert_allclose(np.asarray(batched[:1]), np.asarray(alone), atol=1e-5)


def test_balanced_routing_has_the_least_auxiliary_loss() -> None:
    p = _experts(4, 4, 3)
    x = np.random.default_rng(2).normal(size=(2, 16, 4)).astype(np.float32)
    _, aux = moe(x, p, k=2, act="silu")
    p["router"][:] = 0.0
    _, uniform = moe(x, p, k=2, act="silu")
    assert float(uniform) <= float(aux) + 1e-6
    np.testing.assert_allclose(float(uniform), 1.0, rtol=1e-5)  # E · Σ_e (1/E)·(1/E) = 1


def test_mixtral_counts_two_active_experts_of_eight() -> None:
    small = {"N": 1, "D": 64, "H": 4, "KV": 2, "F": 128, "V": 100, "T": 16}
    two = lbdl_dsl.compile(str(SPECS / "mixtral-8x7b.lbdl"), **small, E=8, K=2)
    one = lbdl_dsl.compile(str(SPECS / "mixtral-8x7b.lbdl"), **small, E=8, K=1)
    macs = [m.checked.totals["macs"].as_int() for m in (two, one)]
    assert macs[0] - macs[1] == 16 * 3 * 64 * 128  # one expert's SwiGLU per token


def test_a_training_step_adds_the_load_balancing_loss() -> None:
    model = lbdl_dsl.compile(
        str(SPECS / "mixtral-8x7b.lbdl"), N=2, D=32, H=4, KV=2, F=48, E=4, V=50, T=12
    )
    params, state = model.init(jax.random.key(0))
    (tokens,) = model.example_inputs(jax.random.key(1), batch=2)
    targets = jax.random.randint(jax.random.key(2), (2, 12), 0, 50)

    def loss(params):
        logits, new_state = model.apply(params, state, tokens, train=True, key=jax.random.key(3))
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
        aux = sum(jax.tree.leaves(jax.tree.map(lambda a: a.sum(), new_state)))
        return ce + 0.02 * aux, aux

    (value, aux), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    assert np.isfinite(float(value)) and float(aux) > 0
    for layer in ("0", "1"):  # the two layers keep their arrays apart (`storage`)
        router = grads["repeat_0"][layer]["residual_0"]["moe"]["router"]
        assert router.shape == (32, 4) and float(np.abs(router).sum()) > 0
    opt = optax.adamw(1e-3)
    updates, _ = jax.jit(lambda g, p: opt.update(g, opt.init(p), p))(grads, params)
    assert jax.tree.structure(optax.apply_updates(params, updates)) == jax.tree.structure(params)


def _hf_pooled(logits: list[np.ndarray], k: int) -> float:
    """transformers' load_balancing_loss_func, in NumPy: the layers' router logits
    concatenated, top-k one-hots and probabilities averaged over all their tokens."""
    cat = np.concatenate(logits)
    probs = np.exp(cat - cat.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    chosen = np.argsort(-probs, axis=-1)[:, :k]
    mask = np.eye(cat.shape[-1])[chosen]  # (tokens, k, E)
    return float(cat.shape[-1] * np.sum(mask.mean(0) * probs.mean(0)[None]))


def test_the_load_balancing_loss_pooled_across_layers_is_transformers() -> None:
    """Two mixtures with `pool=true` (one on X, one on its double): the pooled loss of their
    statistics is transformers' over both layers' logits, not the mean of the two losses."""
    text = (
        "model m(D=8):\n  input X: 6×D\n  moe e=4 k=2 hidden=5 pool=true -> a\n"
        "  from X\n  times a=2.0\n  moe e=4 k=2 hidden=5 pool=true -> b\n  +(a)\n  output Y\n"
    )
    model = lbdl_dsl.compile("m.lbdl", text=text)
    params, state = model.init(jax.random.key(0))
    (x,) = model.example_inputs(jax.random.key(1), batch=3)
    _, new_state = model.apply(params, state, x)
    tokens = np.asarray(x, np.float64).reshape(-1, 8)
    logits = [
        tokens @ np.asarray(params["a"]["router"]),
        2 * tokens @ np.asarray(params["b"]["router"]),
    ]
    pooled = float(pooled_balance_loss(new_state))
    assert pooled == pytest.approx(_hf_pooled(logits, 2), rel=1e-5)
    per_layer = [2 * float(new_state[n]["aux"]) for n in ("a", "b")]  # k·ours is theirs
    assert per_layer[0] == pytest.approx(_hf_pooled(logits[:1], 2), rel=1e-5)
    assert pooled != pytest.approx(sum(per_layer) / 2, rel=1e-6)


def test_the_checkers_activations_count_the_dispatch_buffers(tmp_path: Path) -> None:
    """Doubling the capacity factor adds, per sample, cap·k·T more buffer rows: their D values,
    and the experts' 3 hidden values (gate, up, product) of width F, in float32."""
    from lbdl_dsl.compiler.memory import per_device
    from lbdl_dsl.compiler.sharding import parse_mesh, parse_rules, resolve

    t, d, f, k = 32, 16, 8, 2
    figures = []
    for cap in ("1.0", "2.0"):
        spec = tmp_path / f"m{cap}.lbdl"
        spec.write_text(f"model m(D={d}):\n  input X: {t}×D\n  moe e=4 k={k} hidden={f} "
                        f"cap={cap}\n  output Y\n", "utf-8")  # fmt: skip
        checked = lbdl_dsl.check(spec)
        mesh = parse_mesh("data=1")
        layout = resolve(checked, mesh, parse_rules([], mesh))
        whole, _ = per_device(checked, layout, [], batch=1)
        figures.append(whole.activations.as_int())
    assert figures[1] - figures[0] == 4 * (1 * k * t) * (d + 3 * f)

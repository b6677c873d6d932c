"""Mixtures of experts over any block (`experts e=E k=K:`): the lowering against a dense NumPy
loop over experts with the same routing and capacity, for two different expert bodies; the
counts by hand; the stacked parameters and their roles; gradients through a training step; and
the generated module, pinned by a golden file.

The fixture (tests/fixtures/experts/experts.lbdl) holds a plain `fc; relu; fc` mixture and, in
a ×2 frame, a mixture whose expert is a block call with a residual inside. The frame is short,
so its copies keep their arrays apart (`storage`); the ``stacked`` models force it stacked, a
scan over the vmapped experts, as a longer frame would be.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax import storage
from lbdl_dsl.backends.jax.codegen import generate
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.paths import arrays
from lbdl_dsl.compiler.roles import logical_roles
from lbdl_dsl.core.layers.activation import gelu_ref
from lbdl_dsl.core.layers.moe import moe_groups, moe_routes
from lbdl_dsl.core.symbolic import sym

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "tests" / "fixtures" / "experts" / "experts.lbdl"
GOLDEN = REPO / "tests" / "golden" / "experts" / "experts.py"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"


def _np(tree: Any) -> Any:
    return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def _mlp(p: dict, t: np.ndarray) -> np.ndarray:
    h = np.maximum(t @ p["fc_0"]["w"] + p["fc_0"]["b"], 0.0)
    return h @ p["fc_1"]["w"] + p["fc_1"]["b"]


def _ffn(p: dict, t: np.ndarray) -> np.ndarray:
    q = p["ffn_0"]["residual_0"]
    mu, var = t.mean(), t.var()
    h = (t - mu) / np.sqrt(var + 1e-5) * q["layernorm_0"]["scale"] + q["layernorm_0"]["bias"]
    h = gelu_ref(h @ q["fc_0"]["w"] + q["fc_0"]["b"], False)
    return t + h @ q["fc_1"]["w"] + q["fc_1"]["b"]


def _mixture(x: np.ndarray, p: dict, k: int, cap: float | None, body: Any) -> np.ndarray:
    """A dense loop over experts: each kept (token, expert) adds gate · expert_e(token)."""
    groups = moe_groups(x)
    out = np.zeros_like(groups)
    for tokens, into in zip(groups, out, strict=True):
        for i, e, gate in moe_routes(tokens, p["router"], k, cap):
            one = jax.tree.map(lambda a, e=e: a[e], p["expert"])
            into[i] += gate * body(one, tokens[i])
    return out.reshape(x.shape)


@pytest.fixture(scope="module", params=["apart", "stacked"])
def model(request: pytest.FixtureRequest) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "stacked":
            patch.setattr(storage, "per_copy", lambda inst: False)
        built = lbdl_dsl.compile(str(SPEC), T=6)
    assert ("scan_group(" in built.source) == (request.param == "stacked")
    return built


def _copy(tree: Any, layer: int, model: Any) -> Any:
    """Copy ``layer`` of the ×2 frame: its own arrays, or its index of the stacked ones."""
    if "scan_group(" in model.source:
        return jax.tree.map(lambda a: a[layer], tree["repeat_0"])
    return tree["repeat_0"][str(layer)]


def test_the_lowering_matches_a_dense_loop_over_experts(model: Any) -> None:
    params, state = model.init(jax.random.key(0))
    (x,) = model.example_inputs(jax.random.key(1), batch=3)
    y, new_state = model.apply(params, state, x)
    p = _np(params)
    want = _mixture(np.asarray(x, np.float64), p["experts_0"], 2, None, _mlp)  # evaluation
    for layer in range(2):
        want = _mixture(want, _copy(p, layer, model)["experts_0"], 1, None, _ffn)
    np.testing.assert_allclose(np.asarray(y), want, rtol=2e-4, atol=2e-5)
    assert new_state["experts_0"]["aux"].shape == ()
    for layer in range(2):
        assert _copy(new_state, layer, model)["experts_0"]["aux"].shape == ()


def test_a_full_expert_drops_the_tokens_beyond_its_capacity(model: Any) -> None:
    params, state = model.init(jax.random.key(0))
    router = np.zeros((8, 4), np.float32)
    router[:, 0] = 100.0  # every token's first choice is expert 0
    params["experts_0"]["router"] = router
    x = np.abs(np.random.default_rng(3).normal(size=(1, 6, 8))).astype(np.float32)
    p = _np(params)
    routes = moe_routes(x.reshape(6, 8).astype(np.float64), p["experts_0"]["router"], 2, 1.5)
    cap = math.ceil(1.5 * 2 * 6 / 4)  # 5 of the 6 first choices fit
    assert sum(1 for _, e, _ in routes if e == 0) == cap
    first = _mixture(x.astype(np.float64), p["experts_0"], 2, 1.5, _mlp)
    jitted = jax.jit(lambda pr, s, a: model.apply(pr, s, a, train=True))
    y, _ = jitted(params, state, x)
    out = _mixture(first, _copy(p, 0, model)["experts_0"], 1, None, _ffn)  # no cap: no drop
    out = _mixture(out, _copy(p, 1, model)["experts_0"], 1, None, _ffn)
    np.testing.assert_allclose(np.asarray(y), out, rtol=2e-4, atol=2e-5)
    # evaluation routes every token, whatever the spec's capacity
    y_eval, _ = model.apply(params, state, x)
    every = _mixture(x.astype(np.float64), p["experts_0"], 2, None, _mlp)
    for layer in range(2):
        every = _mixture(every, _copy(p, layer, model)["experts_0"], 1, None, _ffn)
    np.testing.assert_allclose(np.asarray(y_eval), every, rtol=2e-4, atol=2e-5)
    assert not np.allclose(np.asarray(y_eval), np.asarray(y), atol=1e-3)


def test_the_counts_are_all_experts_parameters_and_k_experts_macs() -> None:
    d, e, k, f = 8, 4, 2, 12
    mlp = (d * 2 * d + 2 * d) + (2 * d * d + d)
    ffn = 2 * d + (d * f + f) + (f * d + d)
    params = d * e + e * mlp + 2 * (d * 3 + 3 * ffn)
    mlp_macs, ffn_macs = d * 2 * d + 2 * d * d, d * f + f * d
    per_token = d * e + k * mlp_macs + 2 * (d * 3 + 1 * ffn_macs)
    checked = lbdl_dsl.check(str(SPEC))  # T left symbolic
    assert checked.totals["params"].as_int() == params == 2568
    assert checked.totals["macs"] == sym("T") * per_token
    assert checked.totals["state"].as_int() == 3  # one load-balancing loss per mixture
    # activations: each token's k experts' outputs (the MLP's 2D, 2D, D; ffn's D, F, F, D)
    assert checked.totals["activations"] == sym("T") * (k * (4 * d + d) + 2 * (2 * d + 2 * f))
    wider = lbdl_dsl.check(str(SPEC), K=3, T=6)
    assert wider.totals["macs"].as_int() - 6 * per_token == 6 * mlp_macs  # one more expert active


def test_the_experts_arrays_are_stacked_with_an_experts_axis() -> None:
    """In the logical layout (what maps, files and sharding read)."""
    checked = lbdl_dsl.check(str(SPEC), T=6)
    view = arrays(checked.root)
    shapes = {a.path: tuple(int(d.as_int() or 0) for d in a.shape) for a in view}
    assert shapes["experts_0/router"] == (8, 4)
    assert shapes["experts_0/expert/fc_0/w"] == (4, 8, 16)
    assert shapes["repeat_0/experts_0/router"] == (2, 8, 3)
    assert shapes["repeat_0/experts_0/expert/ffn_0/residual_0/fc_1/w"] == (2, 3, 12, 8)
    roles = logical_roles(checked.root)
    assert roles["experts_0/router"] == ("embed", "experts")
    assert roles["experts_0/expert/fc_0/w"] == ("experts", "in", "mlp")
    assert roles["repeat_0/experts_0/expert/ffn_0/residual_0/fc_1/w"][:3] == (
        "layers",
        "experts",
        "mlp",
    )
    # as the JAX module stores them, the frame's copies are apart: no `layers` axis
    stored = logical_roles(checked.root, storage.per_copy)
    assert stored["repeat_0/1/experts_0/expert/ffn_0/residual_0/fc_1/w"][:2] == ("experts", "mlp")


def test_a_training_step_reaches_the_router_and_every_expert(model: Any) -> None:
    params, state = model.init(jax.random.key(0))
    (x,) = model.example_inputs(jax.random.key(1), batch=4)
    target = jax.random.normal(jax.random.key(2), x.shape)

    def loss(params: Any) -> Any:
        y, new_state = model.apply(params, state, x, train=True, key=jax.random.key(3))
        aux = sum(a.sum() for a in jax.tree.leaves(new_state))
        return ((y - target) ** 2).mean() + 0.01 * aux

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(float(value))
    assert float(np.abs(grads["experts_0"]["router"]).sum()) > 0
    per_expert = np.abs(np.asarray(grads["experts_0"]["expert"]["fc_0"]["w"])).sum(axis=(1, 2))
    assert per_expert.shape == (4,) and (per_expert > 0).all()
    opt = optax.adam(1e-2)
    updates, _ = jax.jit(lambda g, p: opt.update(g, opt.init(p), p))(grads, params)
    after = float(jax.jit(loss)(optax.apply_updates(params, updates)))
    assert after < float(value)


def test_the_generated_module_matches_its_golden() -> None:
    text = generate(compile_spec(SPEC, overrides={"T": 6}))
    assert "jax.vmap(expert_experts_0)" in text and "each_copy" in text
    assert "import lbdl" not in text
    if ACCEPT:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8"), "LBDL_ACCEPT=1 rewrites the golden"

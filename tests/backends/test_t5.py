"""T5 (specs/t5-small.lbdl): its published count, its relative position buckets against their
formula and the values T5's bucket function gives, ALiBi's slopes, and a forward pass and a
training step of a small configuration in which the score bias is read by every layer."""

from __future__ import annotations

import math
from pathlib import Path

import jax
import numpy as np
import optax

import lbdl_dsl
from lbdl_dsl.backends.jax.runtime.constants import alibi_bias, relative_buckets
from lbdl_dsl.core.layers.constants import alibi_slopes, t5_bucket

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "t5-small.lbdl"
FIXTURE = REPO / "tests" / "fixtures" / "t5" / "t5-tiny.npz"  # made by make_t5_tiny.py
SMALL = {"N": 2, "D": 32, "H": 4, "F": 64, "V": 100, "T": 12, "S": 10}


def test_t5_small_has_its_published_count() -> None:
    model = lbdl_dsl.compile(str(SPEC))
    assert model.param_count == 60_506_624


def test_buckets_match_t5_s_published_values() -> None:
    """google-t5's 32 buckets up to 128: a bucket per distance under 8 each way, later keys in
    the upper half; 8..127 logarithmic; beyond, the last; a decoder sees earlier keys only."""
    cases = {-1: 1, 1: 17, -7: 7, -8: 8, -12: 9, -127: 15, -500: 15, 500: 31, 0: 0}
    for rel, want in cases.items():
        assert t5_bucket(rel, 32, 128, True) == want, rel
    assert [t5_bucket(r, 32, 128, False) for r in (3, 0, -1, -15, -16, -1000)] == [
        0, 0, 1, 15, 16, 31,
    ]  # fmt: skip


def test_the_runtime_table_is_the_formula_s() -> None:
    for t, s, n, far, both in ((40, 300, 32, 128, True), (200, 200, 32, 128, False)):
        table = np.asarray(relative_buckets(t, s, n, far, bidirectional=both))[0]
        want = [[t5_bucket(j - i, n, far, both) for j in range(s)] for i in range(t)]
        np.testing.assert_array_equal(table, want)


def test_alibi_slopes_are_the_paper_s() -> None:
    assert alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    six = alibi_slopes(6)  # 4's slopes, then every other of 8's
    assert six == [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    table = np.asarray(alibi_bias(8, 3, 5))[0]
    assert table.shape == (8, 3, 5) and math.isclose(table[0, 2, 4], -0.5 * 2)


def test_a_forward_pass_and_a_training_step() -> None:
    model = lbdl_dsl.compile(str(SPEC), **SMALL)
    params, state = model.init(jax.random.key(0))
    x, y = model.example_inputs(jax.random.key(1), batch=2)
    out, _ = model.apply(params, state, x, y)
    assert out["P"].shape == (2, 10, 100) and out["Z"].shape == (2, 12, 32)
    targets = jax.random.randint(jax.random.key(2), (2, 10), 0, 100)

    def loss(p):
        logits = model.apply(p, state, x, y)[0]["P"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

    opt = optax.adam(1e-2)
    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    updates, _ = opt.update(grads, opt.init(params))
    after = loss(optax.apply_updates(params, updates))
    assert np.isfinite(float(value)) and float(after) < float(value)
    # the relative position tables are learned: each stack's reaches its loss
    tables = [v for k, v in _flat(grads).items() if k.endswith("table") and v.shape == (32, 4)]
    assert len(tables) == 2 and all(float(np.abs(t).sum()) > 0 for t in tables)


def test_the_score_bias_changes_what_a_decoder_computes() -> None:
    model = lbdl_dsl.compile(str(SPEC), **SMALL)
    params, state = model.init(jax.random.key(0))
    x, y = model.example_inputs(jax.random.key(1), batch=1)
    before = model.apply(params, state, x, y)[0]["P"]
    bumped = jax.tree_util.tree_map_with_path(
        lambda path, v: v + 1.0 if v.shape == (32, 4) else v, params
    )
    after = model.apply(bumped, state, x, y)[0]["P"]
    # a constant added to every bucket cancels in the softmax: the output is unchanged ...
    np.testing.assert_allclose(np.asarray(after), np.asarray(before), atol=1e-4)
    rows = jax.tree_util.tree_map_with_path(
        lambda path, v: v.at[1].add(3.0) if v.shape == (32, 4) else v, params
    )
    changed = model.apply(rows, state, x, y)[0]["P"]
    assert float(np.abs(np.asarray(changed) - np.asarray(before)).max()) > 1e-3  # ... one is not


def test_the_spec_computes_what_transformers_t5_computes() -> None:
    """transformers' T5ForConditionalGeneration (2+2 layers, D=16, tied embeddings), its
    weights put at the spec's paths by hand: the encoder's output and the logits agree
    (measured: 2.1e-7 and 8.2e-8 of outputs up to 1.05 and 0.29)."""
    data = np.load(FIXTURE)
    w = {k[2:]: data[k] for k in data.files if k.startswith("w/")}
    model = lbdl_dsl.compile(str(SPEC), N=2, D=16, H=4, F=32, V=100, T=12, S=10)
    params, state = model.init(jax.random.key(0))
    params = jax.tree.map(np.asarray, params)
    params["embed_0"]["table"] = w["shared.weight"]
    for stack, embed, norm in (
        ("encoder", "embed_1", "rmsnorm_0"),
        ("decoder", "embed_3", "rmsnorm_1"),
    ):
        params[embed]["table"] = w[
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        ]
        params[norm]["scale"] = w[f"{stack}.final_layer_norm.weight"]
    for stack, frame in (("encoder", "repeat_0"), ("decoder", "repeat_1")):
        sublayers = [("attn", "0", "SelfAttention")]
        sublayers += [("cross", "1", "EncDecAttention")] if stack == "decoder" else []
        ffw = "2" if stack == "decoder" else "1"
        for i in range(2):
            p, hf = params[frame][str(i)], f"{stack}.block.{i}.layer."
            for name, n, att in sublayers:
                p[name]["ln"]["scale"] = w[f"{hf}{n}.layer_norm.weight"]
                for x in "qkvo":
                    p[name]["att"][f"w{x}"] = w[f"{hf}{n}.{att}.{x}.weight"].T
            p["mlp"]["ln"]["scale"] = w[f"{hf}{ffw}.layer_norm.weight"]
            p["mlp"]["fc1"]["w"] = w[f"{hf}{ffw}.DenseReluDense.wi.weight"].T
            p["mlp"]["fc2"]["w"] = w[f"{hf}{ffw}.DenseReluDense.wo.weight"].T
    out, _ = model.apply(params, state, data["x"], data["y"])
    np.testing.assert_allclose(np.asarray(out["Z"]), data["enc"], atol=5e-6)
    np.testing.assert_allclose(np.asarray(out["P"]), data["logits"], atol=5e-6)


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}/")
        else:
            out[f"{prefix}{k}"] = v
    return out

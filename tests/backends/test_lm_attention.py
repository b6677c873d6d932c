"""Attention since 2020: rotary positions, grouped-query heads, sliding windows, their checks.

The registry's own cases (tests/backends/test_jax_layers.py) compare each option with the
entries' NumPy references; these tests check the runtime against other formulations: RoPE's
relative-position property and the explicit formula, GQA against multi-head attention whose
key/value weights are copied per group, the band against an explicit mask, and the counts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.runtime.attention import attention, mha, mha_lm, rope, window_mask
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.layers.attention import band_ref, rope_ref
from lbdl_dsl.core.layers.base import Numbers


def _rand(key: int, *shape: int) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32)


@pytest.mark.parametrize("fraction", [1.0, 0.5, 0.25])
def test_rope_is_the_rotate_half_formula(fraction: float) -> None:
    x = _rand(0, 2, 3, 7, 16)
    want = rope_ref(np.asarray(x, np.float64), 500.0, fraction)
    np.testing.assert_allclose(rope(x, theta=500.0, fraction=fraction), want, atol=1e-5)


def test_rope_scores_depend_only_on_the_distance() -> None:
    """q at position i and k at j score the same as at i + s and j + s: relative positions."""
    q, k = _rand(1, 1, 1, 1, 8), _rand(2, 1, 1, 1, 8)
    qs = rope(jnp.broadcast_to(q, (1, 1, 12, 8)))
    ks = rope(jnp.broadcast_to(k, (1, 1, 12, 8)))
    scores = np.asarray(jnp.einsum("bhqd,bhkd->qk", qs, ks))
    for d in range(-4, 5):
        diagonal = np.diagonal(scores, offset=d)
        np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-4, atol=1e-4)


def test_grouped_query_attention_is_mha_with_copied_key_value_heads() -> None:
    heads, kv, d, dh = 4, 2, 16, 4
    x = _rand(3, 2, 6, d)
    p = {
        "wq": _rand(4, d, heads * dh),
        "wk": _rand(5, d, kv * dh),
        "wv": _rand(6, d, kv * dh),
        "wo": _rand(7, heads * dh, d),
    }

    def per_query_head(w: jax.Array) -> jax.Array:  # kv head g serves query heads 2g, 2g+1
        return jnp.repeat(w.reshape(d, kv, dh), heads // kv, axis=1).reshape(d, heads * dh)

    full = p | {"wk": per_query_head(p["wk"]), "wv": per_query_head(p["wv"])}
    want = mha(x, x, full, heads=heads, causal=True)
    got = mha_lm(x, x, p, heads=heads, kv=kv, causal=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [0, 3])
def test_the_fused_path_computes_what_the_einsum_does(monkeypatch, window: int) -> None:
    # XLA's implementation of jax.nn.dot_product_attention stands in for cuDNN's (a GPU's):
    # the heads handed over in its layout, after the rotation and the groups' copies; a
    # window is a mask, which the fused call is not asked for
    from functools import partial

    from lbdl_dsl.backends.jax.runtime import attention as runtime

    heads, kv, d, dh = 4, 2, 16, 4
    x = _rand(11, 2, 6, d)
    p = {"wq": _rand(12, d, heads * dh), "wk": _rand(13, d, kv * dh), "wv": _rand(14, d, kv * dh)}
    p["wo"] = _rand(15, heads * dh, d)
    options = dict(heads=heads, kv=kv, causal=True, theta=10000.0, window=window)
    want = mha_lm(x, x, p, **options)
    asked: list[int] = []

    xla = partial(runtime.fused_attention, implementation="xla")  # before it is replaced

    def fused(*a, **k):
        asked.append(1)
        return xla(*a, **k)

    monkeypatch.setattr(runtime, "fused_attention", fused)
    got = mha_lm(x, x, p, **options)
    assert asked == ([] if window else [1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sliding_window_is_an_explicit_band_mask() -> None:
    q, k, v = _rand(8, 1, 2, 9, 4), _rand(9, 1, 2, 9, 4), _rand(10, 1, 2, 9, 4)
    np.testing.assert_array_equal(window_mask(9, 9, 3), band_ref(9, 9, 3))
    band = jnp.asarray(band_ref(9, 9, 3))
    want = attention(q, k, v, band, causal=True)
    # the window keeps exactly the 3 most recent keys: query 8 ignores keys 0..5
    w = jnp.asarray(np.tril(np.ones((9, 9), bool)) & (np.arange(9)[:, None] - np.arange(9) < 3))
    np.testing.assert_allclose(attention(q, k, v, w), want, rtol=1e-6)


def test_mistral_attention_macs_count_the_band(compile_text) -> None:
    text = (
        "model m(W=8):\n  input X: T×64\n"
        "  self-att h=4 kv=2 window=W causal=true rope=true norm=rmsnorm\n"
    )
    banded = compile_text(text, T=32).totals["macs"].as_int()
    dense = compile_text(text.replace(" window=W", ""), T=32).totals["macs"].as_int()
    # scores and weighted sums: h·T·(T − W)·(dqk + dv) fewer
    assert dense - banded == 4 * 32 * (32 - 8) * (16 + 16)


def test_grouped_query_parameters(compile_text) -> None:
    checked = compile_text("model m:\n  input X: T×64\n  mha h=8 kv=2\n")
    # wq, wo: 64×64; wk, wv: 64×(2·8)
    assert checked.totals["params"].as_int() == 2 * 64 * 64 + 2 * 64 * 16


def test_qkeps_none_is_left_out_so_that_a_block_passes_its_parameter_on(compile_text) -> None:
    """`qkeps=none` is the q/k norm's ε left out (the pre-norm's, else mha's 1e-6), and is no
    error without a q/k norm: the parallel block (blocks/transformer.lbdl) passes its `qkeps`
    to its mha whether `qk=` asks for a norm or not, and counts as before without one."""
    lines = [
        "self-att h=2 qknorm=rmsnorm eps=1e-3 qkeps=none",
        "mha h=2 qknorm=layernorm qkeps=none",
        "mha h=2 qkeps=none",
        "parallel H=2 F=32",
        "parallel H=2 F=32 qk=layernorm qkeps=1e-5",
    ]
    head = 'import "blocks/transformer.lbdl"\nmodel m:\n  input X: 6 int<32>\n  embed  6×16\n'
    checked = compile_text(head + "".join(f"  {line}\n" for line in lines))
    records = [i.attrs.qknorm for _, i, _ in checked.walk() if i.node.op == "mha"]
    assert records == [("rmsnorm", 1e-3), ("layernorm", 1e-6), (), (), ("layernorm", 1e-5)]
    blocks = [i for _, i, _ in checked.walk() if i.node.op == "parallel"]
    plain, normed = (b.totals["params"].as_int() for b in blocks)
    assert normed - plain == 4 * 8  # qn, kn, qnb, knb: one per feature of a head of 8


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("mha h=8 kv=3", "3 key/value heads do not divide the 8 query heads"),
        ("mha h=4 window=0", "the window must be at least 1"),
        ("mha h=4 rope=true rot=1.5", "the rotary fraction must be in"),
        ("mha(Z) h=4 rope=true", "rotary positions are for self-attention"),
    ],
)
def test_bad_options_are_user_errors(compile_text, line: str, message: str) -> None:
    head = "model m:\n  input Z: S×64\n  input X: T×64\n"
    text = head + f"  {line}\n" + ("" if "(Z)" in line else "  +(Z)\n")
    with pytest.raises(LbdlError, match=message):
        compile_text(text)


def test_a_float_t_by_s_input_is_a_score_bias_and_two_masks_are_refused(compile_text) -> None:
    """A float T×S after Q, K, V is added to the scores (an additive 0/−∞ mask reads as
    meant); a Boolean one masks; two of either kind are refused with a hint."""
    text = "model m:\n  input M: T×T\n  input K: T×8\n  input X: T×8\n  attention(K, K, M)\n"
    compile_text(text)
    compile_text(text.replace("M: T×T", "M: T×T bool"))
    two = "model m:\n  input M: T×T bool\n  input K: T×8\n  input X: T×8\n  attention(K, K, M, M)\n"
    with pytest.raises(LbdlError, match="one Boolean mask and one additive score bias") as err:
        compile_text(two)
    assert "a mask is `bool`" in str(err.value)


@pytest.mark.parametrize(
    ("inputs", "line"),
    [
        ("  input M: 7 bool\n  input X: 7×16\n", "self-att(M) h=4 kv=2 rope=true causal=true"),
        ("  input M: 7 bool\n  input X: 7×16\n", "self-att(M) h=2 bias=true"),
        ("  input M: 5 bool\n  input Z: 5×16\n  input X: 7×16\n", "cross-att(Z, M) h=4"),
        ("  input M: 5 bool\n  input Z: 5×16\n  input X: 7×16\n", "mha(Z, M) h=4 kv=1"),
        ("  input M: 7 bool\n  input X: 7×16\n", "mha(X, M) h=2 window=3"),
    ],
)
def test_a_key_padding_mask_from_an_input(compile_text, inputs: str, line: str) -> None:
    """Padding keys (false) get no weight: the box equals its reference with the mask, and a
    value written at a padding position changes nothing."""

    model = lbdl_dsl.compile("case.lbdl", text=f"model m:\n{inputs}  {line}\n  output Y\n")
    params, state = model.init(jax.random.key(0))
    arrays = dict(zip(model.inputs, model.example_inputs(jax.random.key(1), batch=2)))
    keep = np.ones(arrays["M"].shape, bool)
    keep[0, -2:] = False  # the first sample's last two keys are padding
    arrays["M"] = jnp.asarray(keep)
    y, _ = model.apply(params, state, *arrays.values())
    (inst,) = [i for i in model.checked.root if i.node.kind == "layer"]
    graph = model.checked.program.model.body
    xs = [np.asarray(arrays[graph.node(u).name]) for u in graph.preds(inst.id)]
    xs = [x.astype(np.float64) if x.dtype.kind == "f" else x for x in xs]
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params[inst.id])
    want = lookup(inst.node.op).reference(xs, p, {}, Numbers(inst.attrs))
    np.testing.assert_allclose(np.asarray(y), want, rtol=3e-4, atol=3e-4)
    keys = "Z" if "Z" in arrays else "X"
    if keys == "Z":
        changed = dict(arrays, Z=arrays["Z"].at[0, -1].set(100.0))
        y2, _ = model.apply(params, state, *changed.values())
        np.testing.assert_allclose(np.asarray(y2), np.asarray(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("inputs", "line", "message"),
    [
        ("  input M: 7\n  input X: 7×16\n", "self-att(M) h=2", "self-att reads one sequence"),
        ("  input M: 6 bool\n  input X: 7×16\n", "self-att(M) h=2", "the key mask must be 7"),
        ("  input M: 5×16\n  input Z: 5×16\n  input X: 7×16\n", "mha(Z, M) h=2", "must be bool"),
    ],
)
def test_bad_key_masks_are_user_errors(compile_text, inputs: str, line: str, message: str) -> None:
    with pytest.raises(LbdlError, match=message):
        compile_text(f"model m:\n{inputs}  {line}\n")


@pytest.mark.parametrize("mask", ["6×5 bool", "4×6×5 bool"])
def test_attention_over_a_heads_axis_with_a_mask(mask: str) -> None:
    """h×T×d queries, h×S×d keys and values, one mask for all heads or one per head."""
    text = (
        f"model m:\n  input M: {mask}\n  input K: 4×5×8\n  input V: 4×5×3\n  input X: 4×6×8\n"
        "  attention(K, V, M)   4×6×3\n  output Y\n"
    )
    model = lbdl_dsl.compile("case.lbdl", text=text)
    arrays = dict(zip(model.inputs, model.example_inputs(jax.random.key(1), batch=2)))
    keep = np.random.default_rng(0).random(arrays["M"].shape) < 0.7
    keep[..., 0] = True
    arrays["M"] = jnp.asarray(keep)
    y, _ = model.apply(*model.init(jax.random.key(0)), *arrays.values())
    want = np.stack(
        [
            np.stack(
                [
                    attention(
                        arrays["X"][b, h][None, None],
                        arrays["K"][b, h][None, None],
                        arrays["V"][b, h][None, None],
                        keep[b] if keep.ndim == 3 else keep[b, h],
                    )[0, 0]
                    for h in range(4)
                ]
            )
            for b in range(2)
        ]
    )
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
    assert model.checked.totals["macs"].as_int() == 4 * 6 * 5 * (8 + 3)

"""What makes a prefill fast stays exact: the weights a decoding module reads by rows and fused
(`backends/jax/decode_weights.py`) give the logits of the weights as `init` makes them, and a
prefill into a fresh cache (``pos`` the int 0) attends to the prompt alone, as it must."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax import weights
from lbdl_dsl.backends.jax.decode import Decoder, Sampling
from lbdl_dsl.backends.jax.decode_weights import prepare
from lbdl_dsl.backends.jax.emit import Fused, Layout
from lbdl_dsl.backends.jax.runtime.decode import cached_attention, ring_write

REPO = Path(__file__).resolve().parents[2]
GREEDY = Sampling(greedy=True)

# biases on the query and value alone (Whisper's decoder: no key bias), under their own spec
PARTIAL_BIAS = """\
import "blocks/transformer.lbdl"

model partial(N=3, D=32, H=4, V=50):
  input X: T int<V>
  embed                               T×D
  pos-enc
  tlayer ×N H=H F=64 causal=true bias=true kbias=false
  layernorm
  fc                                  T×V
  output P
"""


def model_of(name: str, tmp_path: Path) -> lbdl_dsl.Model:
    if name == "partial":
        shutil.copytree(REPO / "specs" / "blocks", tmp_path / "blocks")
        (tmp_path / "partial.lbdl").write_text(PARTIAL_BIAS, encoding="utf-8")
        return lbdl_dsl.compile(str(tmp_path / "partial.lbdl"))
    sizes = {
        "gpt2": dict(N=3, D=32, H=4, V=50, L=32),
        "mistral-7b": dict(N=2, D=32, H=4, KV=2, F=64, V=50, W=4),  # N=2: each copy apart
    }[name]
    return lbdl_dsl.compile(str(REPO / "specs" / f"{name}.lbdl"), **sizes)


@pytest.mark.parametrize("name", ["gpt2", "mistral-7b", "partial"])
def test_laid_out_weights_give_the_logits_of_the_plain_ones(name: str, tmp_path: Path) -> None:
    model = model_of(name, tmp_path)
    params, state = model.init(jax.random.key(0))
    laid_out, plain = Decoder(model), Decoder(model)
    plain.__dict__["_layouts"] = {}  # the module on the weights as they are
    names = {k.rsplit("/", 1)[1] for k in weights.flatten(laid_out.split(params))}
    assert {"wqkv_rows", "wo_rows"} <= names and not names & {"wq", "wk", "wv", "wo"}
    assert "wq" in {k.rsplit("/", 1)[1] for k in weights.flatten(plain.split(params))}
    ids = np.random.default_rng(2).integers(0, 50, (2, 7)).astype(np.int32)
    a = laid_out.generate(params, ids, 9, GREEDY, state=state, keep_logits=True)
    b = plain.generate(params, ids, 9, GREEDY, state=state, keep_logits=True)
    assert a.logits is not None and b.logits is not None
    np.testing.assert_allclose(a.logits, b.logits, atol=1e-5)
    assert (a.tokens == b.tokens).all()


def test_projections_are_fused_with_a_zero_for_a_missing_bias() -> None:
    rng = np.random.default_rng(0)
    widths = [("q", 6), ("k", 2), ("v", 2)]
    w = {n: jnp.asarray(rng.normal(size=(4, k)), jnp.float32) for n, k in widths}
    flat = {f"a/w{n}": [x, x + 1] for n, x in w.items()} | {"a/bq": [jnp.ones(6), jnp.ones(6)]}
    layout = Layout(rows=("wo",), fused=Fused(("wq", "wk", "wv"), ("bq", "bk", "bv"), "wqkv"))
    out = prepare(flat, {"a": layout})
    assert set(out) == {"a/wqkv_rows", "a/bqkv"}
    side_by_side = np.concatenate([w["q"], w["k"], w["v"]], 1)
    np.testing.assert_array_equal(out["a/wqkv_rows"][1], side_by_side.T + 1)
    np.testing.assert_array_equal(out["a/bqkv"][0], np.r_[np.ones(6), np.zeros(4)])
    # a value wider than a key: the runtime could not split the product, so nothing is fused
    wide = {"a/wq": w["q"], "a/wk": w["k"], "a/wv": jnp.zeros((4, 3))}
    assert set(prepare(wide, {"a": layout})) == set(wide)


def test_a_fresh_prefill_reads_nothing_from_the_cache() -> None:
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.normal(size=(1, 4, 5, 8)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(1, 2, 5, 8)), jnp.float32) for _ in range(2))
    zeros = jnp.zeros((1, 2, 16, 8))
    traced = cached_attention(q, k, v, zeros, zeros, jnp.int32(0), window=3)
    nan = jnp.full((1, 2, 16, 8), jnp.nan)
    fresh = cached_attention(q, k, v, nan, nan, 0, window=3)  # the int 0: nothing cached
    np.testing.assert_allclose(fresh, traced, atol=1e-6)
    # known slots in a row are written as one block, the same as slot by slot
    for pos in (0, 9, 14):
        block = ring_write(zeros, k, pos)
        slots = ring_write(zeros, k, jnp.int32(pos))
        np.testing.assert_array_equal(block, slots)


def test_weights_are_cast_once_to_the_compute_type() -> None:
    # in bf16 the module casts every parameter on entry; Decoder.split casts them once, so the
    # steps read half the bytes, and the tokens and logits are the same as casting per step
    model = lbdl_dsl.compile(
        str(REPO / "specs" / "llama2-7b.lbdl"), dtype="bfloat16", N=3, D=32, H=4, F=64, V=50
    )
    params, state = model.init(jax.random.key(0))
    cast, per_step = Decoder(model), Decoder(model)
    leaves = jax.tree.leaves(cast.split(params))
    assert leaves and all(a.dtype == jnp.bfloat16 for a in leaves)
    # float32 weights of the same values: the module casts them at each step
    per_step._split = (params, jax.tree.map(lambda a: a.astype(jnp.float32), cast.split(params)))
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(per_step.split(params)))
    ids = np.random.default_rng(3).integers(0, 50, (1, 6)).astype(np.int32)
    a = cast.generate(params, ids, 8, GREEDY, state=state, keep_logits=True)
    b = per_step.generate(params, ids, 8, GREEDY, state=state, keep_logits=True)
    assert a.logits is not None and b.logits is not None
    np.testing.assert_array_equal(a.logits, b.logits)

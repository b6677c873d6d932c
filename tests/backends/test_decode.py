"""Decoding with a cache (`backends/jax/decode.py`): each step's logits equal a full recompute
of the whole sequence without a cache, on every causal spec of specs/ at tiny sizes; sampling
draws from the distribution a NumPy reference filters; a fixed seed repeats; what cannot
generate says why."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.decode import Sampling, choose, chunks, filtered_logits
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]
PROMPT, NEW = 9, 6  # the prompt prefilled as 8 + 1: two chunks, the second the step's shape

# Every spec of specs/ that is a causal language model, at tiny sizes. Mistral's and Phi-3's
# windows (4) are shorter than the 17 positions, so their caches wrap; Mixtral's capacity is set
# to E/k, as decoding routes every token (a full pass at the default 1.25 may drop some).
CAUSAL = {
    "gpt": dict(N=2, D=32, H=4, V=50),
    "gpt2": dict(N=2, D=32, H=4, V=50, L=32),
    "gpt3": dict(N=2, D=32, H=4, V=50),
    "llama2-7b": dict(N=2, D=32, H=4, F=64, V=50),
    "llama3-8b": dict(N=2, D=32, H=4, KV=2, F=64, V=50, C=16),  # C=16: every rotary scaled
    "gemma-7b": dict(N=2, D=32, H=4, KV=2, Dh=8, F=64, V=50),
    "gemma2-9b": dict(N=4, D=32, H=4, KV=2, Dh=8, F=64, V=50, W=4),  # two pairs, a window
    "gemma3-4b": dict(G=1, R=1, D=32, H=4, KV=2, Dh=8, F=32, V=50, W=4),  # 6 + 1 layers
    "qwen2-7b": dict(N=2, D=32, H=4, KV=2, F=64, V=50),
    "qwen3-8b": dict(N=2, D=32, H=4, KV=2, Dh=16, F=64, V=50),
    "qwen3-30b-a3b": dict(N=2, D=32, H=4, KV=2, Dh=16, F=16, E=4, K=2, V=50),
    "phi3-mini": dict(N=2, D=32, H=4, KV=2, F=64, V=50, W=4),
    "olmo2-13b": dict(N=2, D=32, H=4, KV=2, F=64, V=50),
    "mistral-7b": dict(N=2, D=32, H=4, KV=2, F=64, V=50, W=4),
    "mixtral-8x7b": dict(N=2, D=32, H=4, KV=2, F=64, E=4, V=50),
    "lstm-lm": dict(V=50, D=16, Hd=16),
}


def compiled(name: str, **sets: int):
    text = (REPO / "specs" / f"{name}.lbdl").read_text()
    if name == "mixtral-8x7b":
        text = text.replace("hidden=F ", "hidden=F cap=2.0 ")
    return lbdl_dsl.compile(str(REPO / "specs" / f"{name}.lbdl"), text=text, **sets)


def test_every_causal_spec_in_specs_is_listed() -> None:
    """A new causal spec joins the recompute test below (or says here why not)."""
    from lbdl_dsl.compiler import decoding

    found = []
    for path in sorted((REPO / "specs").glob("*.lbdl")):
        try:
            decoding.plan(lbdl_dsl.check(str(path)))
        except LbdlError:
            continue
        found.append(path.stem)
    assert sorted(found) == sorted(CAUSAL)


@pytest.mark.parametrize("name", sorted(CAUSAL))
def test_cache_equals_recompute_at_every_step(name: str) -> None:
    model = compiled(name, **CAUSAL[name])
    params, state = model.init(jax.random.key(0))
    ids = np.random.default_rng(1).integers(0, 50, (2, PROMPT)).astype(np.int32)
    out = model.decoder.generate(
        params, ids, NEW, Sampling(greedy=True), state=state, keep_logits=True
    )
    assert out.ids.shape == (2, PROMPT + NEW)
    # one pass over the whole text recomputes every step: position p sees positions ≤ p only
    full = np.asarray(model.apply(params, state, jnp.asarray(out.ids[:, :-1]))[0])
    for step in range(NEW):
        at = PROMPT + step - 1
        np.testing.assert_allclose(out.logits[:, step], full[:, at], atol=1e-5, rtol=0)
        assert (out.tokens[:, step] == full[:, at].argmax(-1)).all()


SCALED = """
model scaled(D=32, V=50):
  input X: T int<V>
  embed                                                     T×D
  self-att h=4 causal=true scale={scale} window=5 -> a
  fc                                                        T×V
  output P
"""


@pytest.mark.parametrize("scale", ["none", "0.5"])
def test_a_cache_keeps_the_scores_factor(scale: str) -> None:
    """`scale=` replaces 1/√dqk in the decoding step as in the traced path (it was ignored:
    a GPT-2 with scale_attn_weights false decoded otherwise than it computed)."""
    model = lbdl_dsl.compile("scaled.lbdl", text=SCALED.format(scale=scale))
    params, state = model.init(jax.random.key(0))
    ids = np.random.default_rng(1).integers(0, 50, (2, PROMPT)).astype(np.int32)
    out = model.decoder.generate(params, ids, NEW, Sampling(greedy=True), keep_logits=True)
    full = np.asarray(model.apply(params, state, jnp.asarray(out.ids[:, :-1]))[0])
    steps = full[:, PROMPT - 1 : PROMPT + NEW - 1]
    np.testing.assert_allclose(out.logits, steps, atol=1e-5, rtol=0)


def test_compiled_once_per_shape_not_per_token() -> None:
    model = compiled("gpt2", **CAUSAL["gpt2"])
    params, _ = model.init(jax.random.key(0))
    decoder = model.decoder
    decoder.generate(params, np.arange(8), 9)
    assert decoder.traces == 2  # the prompt's chunk of 8, then the one-token step
    decoder.generate(params, np.arange(1, 9), 9, seed=3)
    assert decoder.traces == 2
    assert chunks(37) == [32, 4, 1]


def test_a_seed_repeats_and_another_differs() -> None:
    model = compiled("gpt", **CAUSAL["gpt"])
    params, _ = model.init(jax.random.key(0))
    ids = [3, 1, 4, 1, 5]
    first = model.generate(params, ids, 12, temperature=2.0, seed=7)
    again = model.generate(params, ids, 12, temperature=2.0, seed=7)
    other = model.generate(params, ids, 12, temperature=2.0, seed=8)
    assert (first.ids == again.ids).all()
    assert not (first.ids == other.ids).all()
    assert first.logprobs.shape == (1, 12) and (first.logprobs <= 0).all()


def numpy_filtered(logits: np.ndarray, temperature: float, top_k: int, top_p: float):
    """The distribution to draw from, written from the definitions: softmax of logits/T over
    the top_k largest, then the fewest most likely whose mass reaches top_p."""
    x = logits.astype(np.float64) / temperature
    out = np.zeros_like(x)
    for row, r in zip(x, out, strict=True):
        order = np.argsort(-row, kind="stable")
        kept = order[:top_k] if top_k else order
        p = np.exp(row[kept] - row[kept].max())
        p /= p.sum()
        n = len(kept)
        if top_p < 1.0:
            n = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        p = p[:n] / p[:n].sum()
        r[kept[:n]] = p
    return out


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, 5, 1.0), (0.7, 0, 0.8), (1.5, 10, 0.5), (1.0, 0, 1.0), (1.0, 3, 0.999)],
)
def test_top_k_and_top_p_filter_as_numpy_does(temperature, top_k, top_p) -> None:
    logits = np.random.default_rng(2).normal(size=(4, 30)).astype(np.float32) * 2
    s = Sampling(temperature=temperature, top_k=top_k, top_p=top_p)
    got = np.asarray(jax.nn.softmax(filtered_logits(jnp.asarray(logits), s), axis=-1))
    want = numpy_filtered(logits, temperature, top_k, top_p)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_draws_follow_the_filtered_distribution() -> None:
    logits = np.random.default_rng(3).normal(size=(1, 12)).astype(np.float32)
    s = Sampling(temperature=0.8, top_k=6, top_p=0.9)
    want = numpy_filtered(logits, 0.8, 6, 0.9)[0]
    keys = jax.random.split(jax.random.key(0), 4000)
    draws = np.asarray(jax.vmap(lambda k: choose(jnp.asarray(logits), k, s)[0][0])(keys))
    freq = np.bincount(draws, minlength=12) / len(draws)
    assert (freq[want == 0] == 0).all()
    np.testing.assert_allclose(freq, want, atol=0.03)


ENCODER_LM = """import "blocks/transformer.lbdl"
model encoder(V=20):
  input X: T int<V>
  embed                T×16
  tlayer ×2 H=2 F=32
  fc                   T×V
  output P
"""


def test_refusals_say_why() -> None:
    model = compiled("gpt2", **CAUSAL["gpt2"])
    params, _ = model.init(jax.random.key(0))
    with pytest.raises(LbdlError, match="exceed the model's context of 32"):
        model.generate(params, np.zeros(30, np.int32), 8)
    with pytest.raises(LbdlError, match="token id 50 is outside the model's vocabulary of 50"):
        model.generate(params, [1, 50], 2)
    with pytest.raises(LbdlError, match="top_p must be in"):
        model.generate(params, [1, 2], 2, top_p=0.0)
    encoder = ENCODER_LM
    with pytest.raises(LbdlError, match="without causal=true") as caught:
        _ = lbdl_dsl.compile(str(REPO / "specs" / "encoder.lbdl"), text=encoder).decoder
    assert caught.value.diagnostics[0].span is not None  # points at the box
    with pytest.raises(LbdlError, match="not one sequence of tokens"):
        _ = lbdl_dsl.compile(str(REPO / "specs" / "transformer.lbdl")).decoder
    with pytest.raises(LbdlError, match="not one sequence of tokens"):
        _ = lbdl_dsl.compile(str(REPO / "specs" / "mlp.lbdl")).decoder

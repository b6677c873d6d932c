"""What makes decoding fast stays exact (`backends/jax/decode.py`): the compiled loop of
`Decoder.generate` makes the tokens, log-probabilities and logits that one call per token
(`Decoder.stream`) makes; a tied output layer read by rows (`dense_rows`) is the product with
the transposed table; a decoding module computes its per-token tail at the last position only
(`decoding.last_only_from`)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.decode import Sampling
from lbdl_dsl.backends.jax.runtime.decode import dense_rows
from lbdl_dsl.compiler import decoding

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "gpt2": dict(N=3, D=32, H=4, V=50, L=32),  # N ≥ 3: stacked, decoded by `each_layer`
    "mistral-7b": dict(N=3, D=32, H=4, KV=2, F=64, V=50, W=4),  # its cache wraps
    "lstm-lm": dict(V=50, D=16, Hd=16),
}
DRAWN = Sampling(temperature=1.3, top_k=10, top_p=0.9)


def compiled(name: str) -> lbdl_dsl.Model:
    return lbdl_dsl.compile(str(REPO / "specs" / f"{name}.lbdl"), **TINY[name])


GREEDY = Sampling(greedy=True)


@pytest.mark.parametrize(
    ("name", "sampling"),
    [("gpt2", GREEDY), ("gpt2", DRAWN), ("mistral-7b", GREEDY), ("lstm-lm", DRAWN)],
)
def test_the_compiled_loop_makes_what_the_steps_make(name: str, sampling: Sampling) -> None:
    model = compiled(name)
    params, state = model.init(jax.random.key(0))
    ids = np.random.default_rng(4).integers(0, 50, (2, 5)).astype(np.int32)
    steps = list(model.decoder.stream(params, ids, 12, sampling, seed=3, state=state))
    loop = model.decoder.generate(params, ids, 12, sampling, seed=3, state=state, keep_logits=True)
    assert (loop.tokens == np.stack([s[0] for s in steps], 1)).all()
    np.testing.assert_allclose(loop.logprobs, np.stack([s[1] for s in steps], 1), atol=1e-5)
    assert loop.logits is not None
    np.testing.assert_allclose(loop.logits, np.stack([s[2] for s in steps], 1), atol=1e-5)
    assert (loop.ids[:, :5] == ids).all() and (loop.ids[:, 5:] == loop.tokens).all()


def test_the_loop_compiles_once_for_any_number_of_tokens() -> None:
    decoder = compiled("gpt2").decoder
    params, _ = decoder.model.init(jax.random.key(0))
    for new in (3, 7, 1, 0):
        out = decoder.generate(params, np.arange(8), new)
        assert out.tokens.shape == (1, new) and out.logprobs.shape == (1, new)
    assert decoder.traces == 2  # the prompt's chunk of 8, and the loop (3 and 7 steps alike)


def test_a_tied_output_layer_reads_the_table_by_rows() -> None:
    rng = np.random.default_rng(5)
    table, bias = rng.normal(size=(11, 8)), rng.normal(size=11)
    for shape in [(1, 1, 8), (2, 3, 8)]:
        x = rng.normal(size=shape)
        got = dense_rows(jnp.asarray(x, jnp.float32), jnp.asarray(table, jnp.float32))
        np.testing.assert_allclose(got, x @ table.T, rtol=1e-5, atol=1e-5)
        got = dense_rows(jnp.asarray(x, jnp.float32), jnp.asarray(table, jnp.float32), bias)
        np.testing.assert_allclose(got, x @ table.T + bias, rtol=1e-5, atol=1e-5)
    source = compiled("gpt2").decoder.source
    assert 'dense_rows(x, params["embed_0"]["table"])' in source
    assert '["table"].T' not in source


@pytest.mark.parametrize(
    ("name", "tail"), [("gpt2", ["layernorm", "fc"]), ("lstm-lm", ["dropout", "fc"])]
)
def test_the_prefill_computes_the_last_position_only(name: str, tail: list[str]) -> None:
    model = compiled(name)
    graph, root = model.checked.program.model.body, model.checked.root
    first = decoding.last_only_from(root, graph)
    assert first is not None
    ops, nid = [], first
    while True:
        ops.append(graph.node(nid).op)
        readers = graph.successors(nid)
        if not readers:
            break
        (nid,) = readers
    assert ops == tail
    decoder = model.decoder
    params, state = model.init(jax.random.key(0))
    cache = decoder.init_cache(2, 16, state)
    out, _ = decoder.module["apply"](
        decoder.split(params), cache, jnp.zeros((2, 8), jnp.int32), pos=0, context=16
    )
    assert out.shape == (2, 1, 50)  # not (2, 8, 50)
    whole = model.apply(params, state, jnp.zeros((2, 8), jnp.int32))[0]
    np.testing.assert_allclose(out[:, 0], whole[:, -1], atol=1e-5)

"""Greedy generation equals transformers' ``generate(do_sample=False)``, token for token, for 32
new tokens, with each step's logits within 1e-4: on the tiny random-weight checkpoints of
tests/fixtures/hf/ (made by tests/fixtures/hf/make.py with transformers; their references in
``reference.npz``): GPT-2, LLaMA (grouped-query, rotary), Mistral (a window of 8 shorter than
the 55 positions: the cache is a ring), Mixtral (experts routed per token), Qwen2 and Phi-3
(fused q, k, v cut unevenly, 0.75 of each head rotated, a window of 8).

Each checkpoint is read by `lbdl_dsl.interop.hf.from_pretrained` (`lbdl from-hf`'s); where that
module is not there, by the library's spec at the checkpoint's sizes and the import maps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.decode import Sampling
from lbdl_dsl.backends.jax.runtime.module import unflatten
from lbdl_dsl.interop import import_weights

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "hf"
SPECS = REPO / "specs"
NEW = 32


def _eps6(text: str) -> str:
    return text.replace("eps=1e-5", "eps=1e-6")


# the library's spec, its sizes and the import map, for a checkpoint read without from-hf;
# the text edits set what the library's spec writes as a constant (its norms' epsilon),
# Mixtral's capacity aside (decoding routes every token whatever the spec's)
LIBRARY: dict[str, tuple[str, dict[str, int], Callable[[str], str], str]] = {
    "gpt2": ("gpt2", dict(N=2, D=32, H=4, V=96, L=64), lambda t: t, "gpt2"),
    "llama": ("mistral-7b", dict(N=2, D=32, H=4, KV=2, F=64, V=96, W=64), _eps6, "llama"),
    "mistral": ("mistral-7b", dict(N=2, D=32, H=4, KV=2, F=64, V=96, W=8), _eps6, "llama"),
    "mixtral": (
        "mixtral-8x7b",
        dict(N=2, D=32, H=4, KV=2, F=32, E=4, V=96),
        lambda t: t,
        "mixtral",
    ),
}


def load(name: str) -> tuple[Any, Any, Any]:
    try:
        from lbdl_dsl.interop.hf import from_pretrained
    except ImportError:
        if name not in LIBRARY:
            pytest.skip("reading this checkpoint needs lbdl_dsl.interop.hf (lbdl from-hf)")
        spec, sets, edit, family = LIBRARY[name]
        path = SPECS / f"{spec}.lbdl"
        model = lbdl_dsl.compile(str(path), text=edit(path.read_text()), **sets)
        done = import_weights(model, FIXTURES / name, family)
        params = unflatten({k: jnp.asarray(v) for k, v in done.params.items()})
        state = unflatten({k: jnp.asarray(v) for k, v in done.state.items()})
        return model, params, state
    return from_pretrained(FIXTURES / name)


@pytest.mark.parametrize(
    "name",
    [
        *["gpt2", "llama", "llama3", "mistral", "mixtral", "qwen2", "qwen3", "gemma"],
        *["qwen3-moe", "phi3", "llama-yarn", "gemma2", "gemma3"],
        *["starcoder2", "gpt-neox"],
        "olmo2",  # each half's norm on its output; the whole q and k projections normalised
        *["gpt-bigcode", "gpt-bigcode-mha"],  # one key/value head; c_attn cut by heads
        "olmo",  # layernorms without parameters; q, k and v clamped (clip_qkv)
        *["llama-bias", "phi-rot1", "gpt2-unscaled"],  # biases; a whole rotary; scale=none
        "phi-qkln",  # each head's queries and keys layer-normalised (qk_layernorm)
    ],
)
def test_greedy_generation_equals_transformers(name: str) -> None:
    model, params, state = load(name)
    with np.load(FIXTURES / name / "reference.npz") as stored:
        reference = dict(stored)
    out = model.decoder.generate(
        params, reference["prompt"], NEW, Sampling(greedy=True), state=state, keep_logits=True
    )
    np.testing.assert_allclose(out.logits[0], reference["logits"], atol=1e-4, rtol=0)
    assert out.ids[0].tolist() == reference["ids"].tolist()

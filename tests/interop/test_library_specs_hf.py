"""The library's specs of today's language models compute what transformers computes: each
read at a tiny fixture's sizes (tests/fixtures/hf/, made with transformers), filled through its
family's import map, gives the reference's logits on every position within 1e-4.

`test_from_hf.py` checks the specs `lbdl from-hf` writes; this checks the hand-written ones of
specs/, whose constants (ε, the rotary's base and scaling) are the published models' and are
set here to the fixture's where they differ.
"""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.runtime.module import unflatten
from lbdl_dsl.interop import import_weights

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "hf"

# the fixture's output layer is tied to its embedding, the published model's is not
TIED = {"fc bias=false ": "fc bias=false tie=tokens ", "  ×N:": "  -> tokens\n  ×N:"}

# spec → (fixture, sizes, the spec's constants as the fixture's, import map)
CASES = {
    "gemma-7b": ("gemma", dict(N=2, D=32, H=4, KV=1, Dh=8, F=64, V=96), {}, "llama"),
    "llama3-8b": (
        "llama3",
        dict(N=2, D=32, H=4, KV=2, F=64, V=96, C=64),
        {
            "theta=500000.0": "theta=10000.0",
            "rfactor=8.0": "rfactor=32.0",
            "eps=1e-5": "eps=1e-6",
            **TIED,
        },
        "llama",
    ),  # fmt: skip
    # the fixture rotates 0.75 of each head (Phi-4-mini's), Phi-3-mini's spec all of it
    "phi3-mini": (
        "phi3",
        dict(N=2, D=32, H=4, KV=2, F=64, V=96, W=8),
        {"theta=10000 ": "theta=10000 rot=0.75 "},
        "phi3",
    ),
    "qwen2-7b": (
        "qwen2",
        dict(N=2, D=32, H=4, KV=2, F=64, V=96),
        {"theta=1e6": "theta=10000.0", **TIED},
        "qwen2",
    ),
    "gemma2-9b": (
        "gemma2",
        dict(N=4, D=32, H=4, KV=2, Dh=16, F=64, V=96, W=8),
        {
            "softcap=50.0": "scale=0.28867513459481287 softcap=2.0",
            "softcap c=30.0": "softcap c=5.0",
        },
        "gemma2",
    ),
    "gemma3-4b": (
        "gemma3",
        dict(G=1, R=2, D=32, H=4, KV=2, Dh=16, F=64, V=96, W=8),
        {
            "theta=10000 ": "theta=100 scale=0.28867513459481287 ",
            "theta=1e6 rscale=linear rfactor=8.0": "theta=1000 rscale=linear rfactor=4.0 "
            "scale=0.28867513459481287",
        },
        "gemma3@6",
    ),
    "qwen3-8b": (
        "qwen3",
        dict(N=2, D=32, H=4, KV=2, Dh=16, F=64, V=96),
        {"theta=1e6": "theta=10000.0", **TIED},
        "qwen3",
    ),
    "olmo2-13b": (
        "olmo2",
        dict(N=2, D=32, H=4, KV=2, F=64, V=96),
        {"eps=1e-6": "eps=1e-5"},
        "olmo2",
    ),
    "qwen3-30b-a3b": (
        "qwen3-moe",
        dict(N=2, D=32, H=4, KV=2, Dh=16, F=16, E=4, K=2, V=96),
        {"theta=1e6": "theta=10000.0", "hidden=F ": "hidden=F renorm=false "},
        "qwen3_moe",
    ),
}


@pytest.mark.parametrize("spec", sorted(CASES))
def test_the_library_spec_computes_the_reference(spec: str) -> None:
    fixture, sizes, edits, family = CASES[spec]
    path = REPO / "specs" / f"{spec}.lbdl"
    text = path.read_text("utf-8")
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    model = lbdl_dsl.compile(str(path), text=text, **sizes)
    done = import_weights(model, FIXTURES / fixture, family)
    params = unflatten({k: jnp.asarray(v) for k, v in done.params.items()})
    state = unflatten({k: jnp.asarray(v) for k, v in done.state.items()})
    ref = np.load(FIXTURES / fixture / "reference.npz")
    out, _ = model.apply(params, state, ref["ids"][None].astype(np.int32))
    np.testing.assert_allclose(np.asarray(out)[0], ref["forward"], atol=1e-4, rtol=0)

"""Checks that the Flax peers are the architectures they claim to be, and still train.

The parameter counts are the published ones (torchvision ResNet-50, GPT-2 small with a
tied output layer); if a peer drifts from them, every benchmark ratio against it is
meaningless. Counting uses ``jax.eval_shape`` so no weights are allocated.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# bench/ is a top-level directory, not part of the installed package; make it importable
# however pytest was invoked.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import harness, run  # noqa: E402
from bench.flax_peers import Peer, make_gpt, make_resnet50, param_count  # noqa: E402

pytestmark = pytest.mark.bench

KEY = jax.random.PRNGKey(0)


def test_resnet50_param_count() -> None:
    peer = make_resnet50(batch=1)
    shapes = jax.eval_shape(peer.init, KEY)
    assert param_count(shapes) == 25_557_032


def test_gpt2_small_param_count() -> None:
    peer = make_gpt(batch=1, T=1024)
    shapes = jax.eval_shape(peer.init, KEY)
    assert param_count(shapes) == 124_439_808


def _train(peer: Peer, variables: Any, steps: int = 3) -> list[float]:
    """Run a few jitted SGD steps on one fixed batch and return the losses."""
    opt_state = peer.opt_init(variables)
    x, y = peer.example_inputs(jax.random.PRNGKey(1))
    step = jax.jit(peer.train_step)
    losses = []
    for _ in range(steps):
        variables, opt_state, loss = step(variables, opt_state, x, y)
        losses.append(float(loss))
    return losses


def test_tiny_gpt_trains() -> None:
    peer = make_gpt(batch=2, T=16, n_layer=2, d=64, heads=4, vocab=101, ctx=32)
    losses = _train(peer, jax.jit(peer.init)(KEY))  # eagerly, Flax compiles op by op
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]


def test_resnet50_small_image_trains() -> None:
    peer = make_resnet50(batch=2, image=32)
    # the benchmark's values (Flax's own init, eager or jitted, compiles for seconds; the
    # benchmark's first outputs run it)
    variables = run.filled(jax.eval_shape(peer.init, KEY))
    losses = _train(peer, variables)
    assert np.all(np.isfinite(losses))
    logits = jax.jit(peer.forward)(variables, peer.example_inputs(KEY)[0])
    assert logits.shape == (2, 1000)


def test_harness_helpers_and_table() -> None:
    x = jnp.ones((8, 8))
    compile_s = harness.time_compile(lambda a: a @ a, x)
    median, best = harness.time_steady(jax.jit(lambda a: a + 1), x, warmup=1, repeat=3)
    first = harness.time_to_first_output(lambda: jnp.sum(x))
    assert compile_s > 0 and 0 < best <= median and first > 0

    rows = [
        harness.Row("resnet50", "compile (s)", 2.0, 4.0),
        harness.Row("gpt", "step (s)", 1.5, None),
    ]
    table = harness.format_table(rows)
    lines = table.splitlines()
    assert lines[0].split("|")[1:-1] == [" model ", " metric ", " ours ", " peer ", " ratio "]
    assert "| resnet50 | compile (s) | 2 | 4 | 0.5 |" in lines
    assert any(line.startswith("| gpt | step (s) | 1.5 |") for line in lines)

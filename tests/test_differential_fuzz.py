"""The checker and the generated code agree on every shape (issue 17, item 10).

`bench/fuzz_shapes.py` writes random specs from the patterns that once disagreed silently
(names, ``from``/``->``, per-sample broadcasts across ranks and sizes of 1, blocks that name
their input on their first line, ``×N``) and compares three answers for every output: the
generator's, the checker's and `jax.eval_shape` of the generated module (which traces and does
not compile). Here a few hundred seeded cases run, and the two patterns found by hand are
pinned with their values, not only their shapes.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import jax
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.backends.jax.lowering import LOWERINGS

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import fuzz_shapes  # noqa: E402

CASES = 200

BROADCAST = """\
model m:
  input V: 8
  input G: 1×8
  input X: 4×8
  mul(V)
  +(V)        4×8
  mul(G)
  output Y
"""

BLOCK_INPUT_NAMED_FIRST = """\
block down on N×D:
  -> x_in
  slice stop=2
  -> y
  from x_in
  fc N×3
  relu

model m:
  input X: 4×8
  down
  output Y
"""


def test_seeded_cases_agree() -> None:
    results = fuzz_shapes.fuzz(CASES, seed=0)
    bad = [r for r in results if r.status != "ok"]
    assert not bad, "\n".join(f"seed {r.seed}: {r.status}: {r.detail}" for r in bad[:10])


def test_the_cases_cover_the_patterns() -> None:
    """The generator writes what it claims to, so that the agreement above means something."""
    seen: Counter[str] = Counter()
    patterns = ("-> x_in", "from n", "mul(", "+(", "+(V)", "slice", "mean", "conv-2d", ":\n    ")
    for seed in range(CASES):
        case = fuzz_shapes.generate(seed)
        for pattern in patterns:
            seen[pattern] += pattern in case.text
        seen["call ×N"] += any(" ×" in line for line in case.text.splitlines()[-12:])
        seen["several outputs"] += len(case.expected) > 1
    assert all(seen[p] >= CASES // 10 for p in seen), seen
    # per-sample broadcasts of operands of different ranks, the shape of item 10b
    ranks = [fuzz_shapes.broadcast((4, 8), (8,)), fuzz_shapes.broadcast((8,), (3, 1))]
    assert ranks == [(4, 8), (3, 8)]


def test_broadcast_of_lower_ranks_keeps_the_batch_axis_first() -> None:
    """Item 10b: 4×8 times an 8-vector and a 1×8 row, per sample, batch of 3."""
    model = lbdl_dsl.compile("broadcast.lbdl", text=BROADCAST)
    assert model.outputs == {"Y": (4, 8)}
    params, state = model.init(jax.random.PRNGKey(0))
    v, g, x = model.example_inputs(jax.random.PRNGKey(1), batch=3)
    (y,), _ = _outputs(model.jit_apply(params, state, v, g, x))
    v, g, x = (np.asarray(a) for a in (v, g, x))
    want = (x * v[:, None, :] + v[:, None, :]) * g
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-6)


def test_a_block_input_named_on_its_first_line_is_not_overwritten() -> None:
    """Item 10a: `-> x_in` first, a box that shrinks the flow, then `from x_in`."""
    model = lbdl_dsl.compile("named.lbdl", text=BLOCK_INPUT_NAMED_FIRST)
    assert model.outputs == {"Y": (4, 3)}
    params, state = model.init(jax.random.PRNGKey(0))
    (x,) = model.example_inputs(jax.random.PRNGKey(1), batch=2)
    (y,), _ = _outputs(model.jit_apply(params, state, x))
    assert y.shape == (2, 4, 3)


def test_the_fuzzer_finds_the_broadcast_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the old lowering of `+`/`mul` (operands joined as they are), the fuzzer fails."""
    monkeypatch.setitem(LOWERINGS, "+", lambda e: " + ".join(e.x))
    monkeypatch.setitem(LOWERINGS, "mul", lambda e: " * ".join(e.x))
    case = fuzz_shapes.Case(0, BROADCAST, {"Y": (4, 8)})
    assert fuzz_shapes.run_case(case).status == "crash"
    statuses = Counter(r.status for r in fuzz_shapes.fuzz(40, seed=0))
    assert statuses["crash"] + statuses["mismatch"] > 0, statuses


def _outputs(result: tuple) -> tuple[list, object]:
    outs, state = result
    if isinstance(outs, dict):
        return list(outs.values()), state
    return (list(outs) if isinstance(outs, (list, tuple)) else [outs]), state

"""Every gallery spec traces in both compute types and both modes (issue 17, item 7).

ResNet-18 in bfloat16 once failed in evaluation only: batch norm's running statistics are
float32 state and promoted its bfloat16 output, which the next convolution refused. Tracing
(`jax.eval_shape`) is enough to catch a type error and costs no XLA compilation, so every spec
is covered in both dtypes, in training and in evaluation; the module computes in the compute
type and hands its floating outputs back in float32, as its parameters are.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import lbdl_dsl

SPECS = sorted((Path(__file__).resolve().parents[2] / "specs").glob("*.lbdl"))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_every_spec_traces_in_both_dtypes_and_modes(spec: Path, dtype: str) -> None:
    sizes = {name: 8 for name in lbdl_dsl.check(spec).free}  # a sequence's T, left free
    model = lbdl_dsl.compile(spec, dtype=dtype, **sizes)
    key = jax.random.key(0)
    params, state = jax.eval_shape(model.init, key)
    inputs = []
    for shape, kind in model.inputs.values():
        inputs.append(jax.ShapeDtypeStruct((2, *shape), jnp.dtype(kind)))
    for train in (False, True):

        def apply(params, state, *xs, train=train):
            return model.module["apply"](params, state, *xs, train=train, key=key)

        outputs, _ = jax.eval_shape(apply, params, state, *inputs)
        for leaf in jax.tree.leaves(outputs):
            if jnp.issubdtype(leaf.dtype, jnp.floating):
                assert leaf.dtype == jnp.float32, (spec.stem, train, leaf)


def test_batch_norm_keeps_the_compute_type_in_evaluation() -> None:
    """The fast case of the above: the layer alone, without the gallery."""
    model = lbdl_dsl.compile(
        text="model m:\n  input X: 3×8×8\n  batchnorm\n  conv-2d k=3 c=4\n", dtype="bfloat16"
    )
    params, state = jax.eval_shape(model.init, jax.random.key(0))
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
    for train in (False, True):
        y, new_state = jax.eval_shape(
            lambda p, s, x, train=train: model.apply(p, s, x, train=train), params, state, x
        )
        assert y.dtype == jnp.float32 and y.shape == (2, 4, 6, 6)
        assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(new_state))

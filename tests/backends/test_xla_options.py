"""XLA:CPU drops the checkpoint's barriers unless `xla_options` keeps them; the step keeps them.

Plain JAX, one device: two residual blocks, each under ``jax.checkpoint`` (as ``each_copy``
runs a ×N group's copies), differentiated. XLA:CPU's ``cse_barrier_expander`` removes the
optimization barriers before scheduling, and the scheduler then computes every copy's values
again at once: the temporaries grow by one whole recomputation per copy. When
`test_xla_cpu_still_drops_the_barriers` fails, XLA:CPU keeps them itself and the option can go.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lbdl_dsl.backends.jax.xla_options import KEEP_BARRIERS, step_options

B, D, F = 128, 64, 256
HIDDEN = B * F * 4  # one value of the hidden width: 128 KiB


def _block(x: jax.Array, w: tuple[jax.Array, jax.Array]) -> jax.Array:
    return x + jax.nn.gelu(x @ w[0], approximate=False) @ w[1]


def _loss(ws: list[tuple[jax.Array, jax.Array]], x: jax.Array) -> jax.Array:
    block = jax.checkpoint(_block, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    for w in ws:
        x = block(x, w)
    return jnp.sum(x**2)


def _args(copies: int) -> tuple[list[tuple[jax.Array, jax.Array]], jax.Array]:
    k = jax.random.split(jax.random.PRNGKey(0), 2 * copies + 1)
    ws = [
        (jax.random.normal(k[2 * i], (D, F)) / 8, jax.random.normal(k[2 * i + 1], (F, D)) / 16)
        for i in range(copies)
    ]
    return ws, jax.random.normal(k[-1], (B, D))


def _compiled(copies: int, options: dict[str, str]) -> jax.stages.Compiled:
    return jax.jit(jax.grad(_loss), compiler_options=options).lower(*_args(copies)).compile()


def _temp(copies: int, options: dict[str, str]) -> int:
    return int(_compiled(copies, options).memory_analysis().temp_size_in_bytes)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's own pass")
def test_xla_cpu_still_drops_the_barriers() -> None:
    """Today: no barrier left, and each copy adds its whole recomputation (5 values of the
    hidden width) to the temporaries. When this fails, check `xla_options` is still needed."""
    assert "opt-barrier" not in _compiled(2, {}).as_text()
    assert _temp(2, {}) - _temp(1, {}) >= 4 * HIDDEN


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's own pass")
def test_with_the_option_a_copy_adds_only_what_its_checkpoint_keeps() -> None:
    assert "opt-barrier" in _compiled(2, KEEP_BARRIERS).as_text()
    one, two, four = (_temp(n, KEEP_BARRIERS) for n in (1, 2, 4))
    assert four - two == 2 * (two - one)  # linear in the copies
    assert two - one <= HIDDEN + 1024  # per copy: the one product its checkpoint keeps


def test_the_gradients_are_the_same_bit_for_bit() -> None:
    ws, x = _args(2)
    plain = jax.jit(jax.grad(_loss))(ws, x)
    kept = jax.jit(jax.grad(_loss), compiler_options=KEEP_BARRIERS)(ws, x)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(kept), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_options_are_given_on_a_cpu_only() -> None:
    assert step_options("cpu") == KEEP_BARRIERS
    assert step_options("gpu") == step_options("tpu") == {}


def test_the_training_step_compiles_with_them() -> None:
    """`make_train_step`'s jit, and `Sharded.jit_step`'s around it, keep the barriers."""
    import lbdl_dsl
    from lbdl_dsl.training.datasets import open_data
    from lbdl_dsl.training.loader import Loader, Position
    from lbdl_dsl.training.signature import signature
    from lbdl_dsl.training.step import init_state, make_train_step
    from lbdl_dsl.training.tasks import choose

    model = lbdl_dsl.compile("specs/gpt.lbdl", N=2, D=16, H=2, V=32, T=8)
    task = choose(signature(model.checked))
    tx = optax.adam(1e-3)
    step = make_train_step(model, task, tx, lambda s: 1e-3)
    ts = init_state(model, tx, 0)
    sig = signature(model.checked)
    batch = Loader(open_data("synthetic", sig, task, 0).train, 2, 0).batch_at(Position())
    text = step.lower(ts, batch).compile().as_text()
    assert ("opt-barrier" in text) == (jax.default_backend() == "cpu")

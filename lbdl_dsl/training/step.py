"""One state, one step: the `TrainState` pytree and the pure, jitted train and eval steps.

``train_step(state, batch) -> (state, metrics)`` is a pure function of its arguments: the
random key of step ``s`` is ``fold_in(state.key, s)``, so dropout draws a new mask every step
and a resumed run draws the very masks the uninterrupted one would. The model's state
(batchnorm's running averages) comes back from ``apply(..., train=True)`` and is carried in the
`TrainState`. The state is donated to the step, so parameters and optimiser state are updated
in place. Batches are host NumPy arrays with a leading batch axis; sharding them over a mesh is
a matter of where they are put, not of this code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from lbdl_dsl.backends.jax.xla_options import step_options
from lbdl_dsl.training import tasks
from lbdl_dsl.training.tasks import Task

Metrics = dict[str, jax.Array]
TrainStep = Callable[["TrainState", dict[str, Any]], tuple["TrainState", Metrics]]
"""``train_step(ts, batch) -> (ts, metrics)``."""
EvalStep = Callable[[Any, Any, dict[str, Any], jax.typing.ArrayLike], Metrics]
"""``eval_step(params, state, batch, weights) -> sums``."""


class TrainState(NamedTuple):
    step: jax.Array  # int32 scalar: steps taken
    params: Any
    state: Any  # the model's non-trainable state (running averages)
    opt_state: Any
    key: jax.Array  # uint32[2]: the run's key; step s uses fold_in(key, s)


def init_state(model: Any, tx: optax.GradientTransformation, seed: int) -> TrainState:
    """Parameters from ``seed``, and a training key split from it (never reused for init)."""
    init_key, train_key = jax.random.split(jax.random.PRNGKey(seed))
    params, state = model.init(init_key)
    return TrainState(jnp.zeros((), jnp.int32), params, state, tx.init(params), train_key)


def _inputs(model_inputs: tuple[str, ...], batch: dict[str, Any]) -> list[Any]:
    return [batch["inputs"][name] for name in model_inputs]


def _by_name(outputs: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``apply`` returns one array for one output, and a dictionary by name for several."""
    return outputs if isinstance(outputs, dict) else {names[0]: outputs}


def make_train_step(
    model: Any, task: Task, tx: optax.GradientTransformation, lr: optax.Schedule
) -> TrainStep:
    names, outs = tuple(model.checked.inputs), tuple(model.checked.outputs)

    def train_step(ts: TrainState, batch: dict[str, Any]) -> tuple[TrainState, Metrics]:
        key = jax.random.fold_in(ts.key, ts.step)

        def loss_fn(params: Any) -> tuple[jax.Array, tuple[Any, Metrics]]:
            outputs, new_state = model.apply(
                params, ts.state, *_inputs(names, batch), train=True, key=key
            )
            per = tasks.per_sample(task, _by_name(outputs, outs), batch)
            return jnp.mean(per["loss"]), (new_state, per)

        (loss, (new_state, per)), grads = jax.value_and_grad(loss_fn, has_aux=True)(ts.params)
        updates, opt_state = tx.update(grads, ts.opt_state, ts.params)
        params = optax.apply_updates(ts.params, updates)
        metrics = {k: jnp.mean(v) for k, v in per.items()}
        metrics |= {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": lr(ts.step)}
        return TrainState(ts.step + 1, params, new_state, opt_state, ts.key), metrics

    options = step_options(jax.default_backend())
    return jax.jit(train_step, donate_argnums=0, compiler_options=options)


def make_eval_step(model: Any, task: Task) -> EvalStep:
    """``eval_step(params, state, batch, weights) -> sums``: weighted sums of the per-sample
    loss and metrics (padding rows weigh 0), in evaluation mode."""
    names, outs = tuple(model.checked.inputs), tuple(model.checked.outputs)

    def eval_step(
        params: Any, state: Any, batch: dict[str, Any], weights: jax.typing.ArrayLike
    ) -> Metrics:
        outputs, _ = model.apply(params, state, *_inputs(names, batch), train=False)
        per = tasks.per_sample(task, _by_name(outputs, outs), batch)
        return {k: jnp.sum(v * weights) for k, v in per.items()}

    return jax.jit(eval_step)

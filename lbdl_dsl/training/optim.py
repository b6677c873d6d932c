"""The optimiser and its learning-rate schedule, from the config, all from optax.

The schedule is a function of the step, so the learning rate of any step is known without
state; warm-up rises linearly from 0 to ``--lr`` over ``--warmup`` steps, then ``cosine`` and
``linear`` decay to 0 at the last step. ``--clip`` clips the gradients' global norm before the
optimiser sees them. ``--weight-decay`` is decoupled for adamw and lion (their own parameter,
defaulting to optax's 1e-4 and 1e-3), and added to the gradients for the others (0 by default).
"""

from __future__ import annotations

import optax

from lbdl_dsl.training.config import TrainConfig


def schedule(config: TrainConfig, total_steps: int) -> optax.Schedule:
    """The learning rate as a function of the step (0-based)."""
    lr, warmup = config.lr, min(config.warmup, total_steps)
    rest = max(total_steps - warmup, 1)
    if config.schedule == "cosine":
        main = optax.cosine_decay_schedule(lr, rest)
    elif config.schedule == "linear":
        main = optax.linear_schedule(lr, 0.0, rest)
    else:
        main = optax.constant_schedule(lr)
    if not warmup:
        return main
    joined: optax.Schedule = optax.join_schedules(
        [optax.linear_schedule(0.0, lr, warmup), main], [warmup]
    )
    return joined


def optimizer(config: TrainConfig, lr: optax.Schedule) -> optax.GradientTransformation:
    wd = config.weight_decay
    name = config.optimizer
    if name == "adamw":
        opt = optax.adamw(lr, weight_decay=1e-4 if wd is None else wd)
    elif name == "lion":
        opt = optax.lion(lr, weight_decay=1e-3 if wd is None else wd)
    else:
        base = {
            "adam": lambda: optax.adam(lr),
            "sgd": lambda: optax.sgd(lr),
            "momentum": lambda: optax.sgd(lr, momentum=0.9, nesterov=True),
            "rmsprop": lambda: optax.rmsprop(lr),
            "adafactor": lambda: optax.adafactor(lr),
        }[name]()
        opt = optax.chain(optax.add_decayed_weights(wd), base) if wd else base
    if config.clip is not None:
        opt = optax.chain(optax.clip_by_global_norm(config.clip), opt)
    return opt

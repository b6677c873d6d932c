"""Training any spec: ``lbdl train`` and ``lbdl_dsl.train``.

The package is named ``training`` so that the function ``lbdl_dsl.train`` is never shadowed by
a submodule of the same name. Its modules, in the order a run uses them: `config` (the run's
frozen `TrainConfig`), `signature` (the model's inputs and outputs as numbers), `tasks` (the
loss, chosen from the outputs), `datasets` and `loader` (the data and its resumable order),
`optim` (optax), `step` (the `TrainState` and the jitted steps), `checkpoint` (orbax), `rundir`
(the run folder's identity), `progress` and `plot` (records shown and drawn), and `loop`.
Importing this package imports no JAX; `train` does, when called.
"""

from __future__ import annotations

from typing import Any

from lbdl_dsl.training.config import TrainConfig

__all__ = ["TrainConfig", "train"]


def train(*args: Any, **kwargs: Any) -> Any:
    """`lbdl_dsl.training.loop.train`: imported when first called, since it needs JAX."""
    from lbdl_dsl.training.loop import train as _train

    return _train(*args, **kwargs)

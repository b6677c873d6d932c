"""What a training loop needs from a mesh, in one object: the thin layer ``lbdl train --mesh``
stands on.

A loop written for one device (a ``TrainState`` pytree of step, params, state, opt_state, key;
a pure ``train_step(state, batch)``; host NumPy batches; orbax checkpoints) becomes a sharded,
multi-process one by five calls, and no other change:

1. ``par = Parallel.start(model, mesh="data=2,fsdp=4", shard=["fsdp"], ...)`` joins the other
   processes (`distributed.initialize`) and places the model (`sharding.Sharded`);
2. ``ts = par.init_state(TrainState, model, tx, key, train_key)``: parameters drawn directly in
   their shardings (``model.init``'s very numbers), the optimiser state made in its own;
3. ``rows = par.rows(global_batch)``: the rows of each global batch this process loads;
4. ``batch = par.put(host_batch)``: this process's rows → the global batch, split over the
   batch axes;
5. ``step = par.jit(train_step, ts)``: the step with the state kept in its shardings.

Checkpoints need nothing more: orbax saves sharded arrays shard by shard from every process,
and ``restore_target(abstract_state, par.state_shardings(ts))`` restores them onto this mesh,
whatever mesh wrote them. Only process 0 should print, plot and write run files
(``par.is_main``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from lbdl_dsl.backends.jax import distributed
from lbdl_dsl.backends.jax.sharding import Sharded, restore_target


@dataclass(frozen=True)
class Parallel:
    """A mesh, the model's layout on it, and this process's place among the others."""

    sharded: Sharded
    processes: distributed.Processes

    @classmethod
    def start(
        cls,
        model: Any,
        mesh: str,
        shard: Sequence[str] = (),
        coordinator: str | None = None,
        num_processes: int | None = None,
        process_id: int | None = None,
    ) -> Parallel:
        """Join the run's processes (before anything else uses JAX), then place ``model``."""
        processes = distributed.initialize(coordinator, num_processes, process_id)
        return cls(Sharded.of(model, mesh, shard), processes)

    @property
    def is_main(self) -> bool:
        return self.processes.index == 0

    def rows(self, global_batch: int) -> slice:
        """The rows of every global batch that this process loads."""
        pieces = self.sharded.layout.batch_pieces
        if global_batch % pieces:
            from lbdl_dsl.core.errors import LbdlError

            raise LbdlError(
                f"--batch {global_batch} does not split over {pieces} batch shards "
                f"({', '.join(self.sharded.layout.batch)})",
                None,
                hint=f"use a multiple of {pieces}",
            )
        return distributed.process_rows(global_batch, self.processes.index, self.processes.count)

    def put(self, host_batch: Any) -> Any:
        """A pytree of this process's rows (NumPy, leading batch axis) → global arrays."""
        leaves, tree = jax.tree.flatten(host_batch)
        return jax.tree.unflatten(tree, self.sharded.put_batch([np.asarray(x) for x in leaves]))

    def state_shardings(self, ts: Any, tx: Any) -> Any:
        """Shardings for a ``TrainState``-like named tuple: ``params``, ``state`` and
        ``opt_state`` placed by the layout, every other field (step, key) replicated."""
        placed = {
            "params": self.sharded.params(),
            "state": self.sharded.state(),
            "opt_state": self.sharded.opt_state(tx, ts.params),
        }
        fields = {f: placed.get(f, self.sharded.replicated) for f in ts._fields}
        return type(ts)(**fields)

    def init_state(
        self,
        state_type: Callable[..., Any],
        model: Any,
        tx: Any,
        init_key: jax.Array,
        train_key: jax.Array,
    ) -> Any:
        """``state_type(step, params, state, opt_state, key)``, every array in its sharding."""
        params, state = self.sharded.init(model, init_key)
        opt_state = self.sharded.init_opt_state(tx, params)
        step = self.sharded.replicate(np.zeros((), np.int32))
        return state_type(step, params, state, opt_state, self.sharded.replicate(train_key))

    def jit(
        self, train_step: Callable[..., Any], ts: Any, tx: Any, donate: bool = True
    ) -> Callable[..., Any]:
        """``train_step(ts, batch) -> (ts, metrics)`` with ``ts`` kept in its shardings, the
        batch split over the batch axes and the metrics on every process."""
        return _ShardedStep(self.sharded, train_step, self.state_shardings(ts, tx), donate)

    def restore_target(self, abstract: Any, ts: Any, tx: Any) -> Any:
        """What orbax restores a ``TrainState`` into, on this mesh."""
        return restore_target(abstract, self.state_shardings(ts, tx))


class _ShardedStep:
    """The jitted step, compiled once per batch structure (each input split by its rank)."""

    def __init__(
        self, sharded: Sharded, step: Callable[..., Any], shardings: Any, donate: bool
    ) -> None:
        self._sharded, self._step, self._shardings, self._donate = sharded, step, shardings, donate
        self._jitted: dict[Any, Callable[..., Any]] = {}

    def __call__(self, ts: Any, batch: Any) -> Any:
        leaves, tree = jax.tree.flatten(batch)
        key = (tree, tuple(np.ndim(x) for x in leaves))
        if key not in self._jitted:
            inputs = jax.tree.unflatten(tree, [self._sharded.batch(np.ndim(x)) for x in leaves])
            self._jitted[key] = self._sharded.jit_step(
                self._step, self._shardings, inputs, self._donate
            )
        return self._jitted[key](ts, batch)

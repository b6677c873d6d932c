"""Where a run computes: one device, or a mesh of many over one or several processes.

The loop is written once, against `Devices`; ``lbdl train`` without ``--mesh`` gets `One`
(what the loop did before: host batches handed to the jitted step), with ``--mesh`` a `Mesh`
over `backends.jax.parallel.Parallel`: the processes joined first (`join`, before anything else
uses JAX), parameters drawn directly in their shardings, the optimiser state made in its own,
each process feeding its rows of every global batch, the step jitted with the state kept in
place. Checkpoints need nothing here: orbax saves each process's shards, and restores onto
whatever shardings the state it is given has, so a run saved on one mesh resumes on another
(``--resume --mesh ...``). Only the main process writes the run's files and shows progress;
the others compute beside it.
"""

from __future__ import annotations

import signal
from typing import Any

import jax
import numpy as np

from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training.step import EvalStep, TrainState, TrainStep, init_state


class One:
    """One device, one process: the loop as it always was."""

    is_main = True
    index, count = 0, 1

    def place(self, model: Any) -> One:
        return self

    def init_state(self, model: Any, tx: Any, seed: int) -> TrainState:
        return init_state(model, tx, seed)

    def check_batch(self, batch: int) -> None:
        return None

    def step(self, train_step: TrainStep, ts: TrainState, tx: Any) -> TrainStep:
        return train_step

    def eval_step(self, eval_step: EvalStep) -> EvalStep:
        return eval_step

    def put(self, host: Any) -> Any:
        return host

    def rows(self, host: Any) -> Any:
        return host

    def gather(self, tree: Any) -> Any:
        return tree

    def barrier(self, name: str) -> None:
        return None

    def describe(self) -> dict[str, Any] | None:
        return None

    def preempted(self, step: int) -> bool:
        """Whether every process agreed to stop after ``step`` (one process: a signal is seen
        by the loop's own handler)."""
        return False

    @property
    def handled_signals(self) -> tuple[int, ...]:
        """The signals the loop turns into a request to checkpoint and stop."""
        return (signal.SIGINT, signal.SIGTERM)


class Mesh:
    """A device mesh (``--mesh``, ``--shard``) over this process and the others of the run."""

    def __init__(self, mesh: str, shard: tuple[str, ...], processes: Any) -> None:
        self.mesh, self.shard, self.processes = mesh, shard, processes
        self.parallel: Any = None

    @property
    def is_main(self) -> bool:
        return bool(self.processes.index == 0)

    @property
    def index(self) -> int:
        return int(self.processes.index)

    @property
    def count(self) -> int:
        return int(self.processes.count)

    def place(self, model: Any) -> Mesh:
        from lbdl_dsl.backends.jax.parallel import Parallel
        from lbdl_dsl.backends.jax.sharding import Sharded

        self.parallel = Parallel(Sharded.of(model, self.mesh, self.shard), self.processes)
        return self

    def check_batch(self, batch: int) -> None:
        """``--batch`` (the global batch) splits over the batch axes, before the run starts."""
        layout = self.parallel.sharded.layout
        if batch % layout.batch_pieces:
            raise LbdlError(
                f"--batch {batch} does not split over the {layout.batch_pieces} batch shards "
                f"of --mesh {layout.mesh} ({' × '.join(layout.batch)})",
                None,
                hint=f"use a multiple of {layout.batch_pieces}",
            )

    def init_state(self, model: Any, tx: Any, seed: int) -> TrainState:
        """`step.init_state`'s very numbers (the same split of the seed), drawn in place."""
        init_key, train_key = jax.random.split(jax.random.PRNGKey(seed))
        ts: TrainState = self.parallel.init_state(TrainState, model, tx, init_key, train_key)
        return ts

    def step(self, train_step: TrainStep, ts: TrainState, tx: Any) -> TrainStep:
        """The jitted step. It takes the state it is given in place (donates it) except over
        several CPU processes, where the state before each step stays whole until the step
        completes: a process whose peer dies mid-step can then save it (`training.rescue`),
        for the price of up to two more copies of the state in the host's memory (the loop
        keeps the state before the step and the one last logged)."""
        jitted: TrainStep = self.parallel.jit(train_step, ts, tx, donate=not self.keeps_previous)
        return jitted

    @property
    def keeps_previous(self) -> bool:
        """Whether the state before a step outlives it (several processes, on CPUs)."""
        return self.count > 1 and jax.default_backend() == "cpu"

    def eval_step(self, eval_step: EvalStep) -> EvalStep:
        """The evaluation sums, replicated, so that every process reads them."""
        return jax.jit(eval_step, out_shardings=self.parallel.sharded.replicated)

    def rows(self, host: Any) -> Any:
        """This process's rows of a global batch every process holds (evaluation's)."""
        first = jax.tree.leaves(host)[0]
        part = self.parallel.rows(int(np.shape(first)[0]))
        return jax.tree.map(lambda a: np.asarray(a)[part], host)

    def put(self, host: Any) -> Any:
        """This process's rows (NumPy) → global arrays split over the batch axes."""
        return self.parallel.put(host)

    def gather(self, tree: Any) -> Any:
        """Every array whole on the host of every process (for ``params.safetensors``)."""
        if self.count == 1:
            return jax.tree.map(np.asarray, tree)
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)

    def preempted(self, step: int) -> bool:
        """Whether the processes agreed to stop after ``step``: SIGTERM to any process (``lbdl
        launch`` sends it to all, a cluster to some) is shared by `jax.distributed`'s
        preemption service, which names one step every process reaches, so that all save the
        same checkpoint there. Called at every step by every process, as it requires."""
        if self.count == 1:
            return False
        from jax.experimental import multihost_utils

        return bool(multihost_utils.reached_preemption_sync_point(step))

    @property
    def handled_signals(self) -> tuple[int, ...]:
        """Several processes: SIGTERM is left to `jax.distributed`'s preemption service (see
        `preempted`); the loop's own handler takes Ctrl-C."""
        if self.count == 1:
            return (signal.SIGINT, signal.SIGTERM)
        return (signal.SIGINT,)

    def barrier(self, name: str) -> None:
        if self.count > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(name)

    def describe(self) -> dict[str, Any]:
        layout = self.parallel.sharded.layout
        return {
            "mesh": str(layout.mesh),
            "shard": layout.rules.text,
            "batch_axes": list(layout.batch),
            "processes": self.count,
            "devices": layout.mesh.devices,
        }


def join(
    mesh: str | None,
    shard: tuple[str, ...],
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> One | Mesh:
    """The run's devices; with a mesh, after joining the other processes (flags, `lbdl
    launch`'s variables, or a cluster's). Call it before anything else uses JAX."""
    from lbdl_dsl.backends.jax import distributed

    if mesh is None:
        given = (coordinator, num_processes, process_id)
        if any(v is not None for v in given) or distributed.detect()[1] == "lbdl launch":
            raise LbdlError(
                "several processes train one model over a device mesh, and no --mesh was given",
                None,
                hint="add --mesh (e.g. --mesh data=4 for data parallelism over every device)",
            )
        return One()

    return Mesh(mesh, shard, distributed.initialize(coordinator, num_processes, process_id))

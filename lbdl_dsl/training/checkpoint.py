"""Checkpoints through orbax: the whole `TrainState` and the run's record, atomically, keep-K.

A checkpoint is one orbax step folder under ``RUN/checkpoints/`` with two items: ``state``, the
`TrainState` pytree (parameters, model state, optimiser state, step, key), and ``meta``, JSON:
the loader's position, the config, the spec's hash and the versions. Orbax writes each step to
a temporary folder and renames it when complete, so a run killed while saving leaves the
previous checkpoint intact; it keeps the last ``--keep`` steps. Saving is synchronous: a run
that says it saved, has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax

from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training.step import TrainState


class Checkpoints:
    """The checkpoints of one run folder."""

    def __init__(self, run_dir: Path, keep: int) -> None:
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.directory = (run_dir / "checkpoints").absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=False, create=True
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def latest(self) -> int | None:
        return self.manager.latest_step()

    def save(self, ts: TrainState, meta: dict[str, Any]) -> None:
        ocp = self._ocp
        step = int(ts.step)
        if step in self.manager.all_steps():
            return
        args = ocp.args.Composite(state=ocp.args.StandardSave(ts), meta=ocp.args.JsonSave(meta))
        self.manager.save(step, args=args, force=True)
        self.manager.wait_until_finished()

    def read_meta(self, step: int) -> dict[str, Any]:
        ocp = self._ocp
        restored = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored.meta)

    def restore(self, step: int, like: TrainState) -> TrainState:
        """The state of checkpoint ``step``, with the structure, shapes and types of ``like``."""
        ocp = self._ocp
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        try:
            restored = self.manager.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract))
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise LbdlError(
                f"{self.directory}/{step}: the checkpoint does not fit this model and optimiser "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]})",
                None,
                hint="it was written by another spec or configuration: train into a new -o folder",
            ) from None
        return TrainState(*restored.state)

    def close(self) -> None:
        self.manager.close()

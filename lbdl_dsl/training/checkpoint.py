"""Checkpoints through orbax: the whole `TrainState` and the run's record, atomically, keep-K.

A checkpoint is one orbax step folder under ``RUN/checkpoints/`` with two items: ``state``, the
`TrainState` pytree (parameters, model state, optimiser state, step, key), and ``meta``, JSON:
the loader's position, the config, the spec's hash and the versions. Orbax writes each step to
a temporary folder and renames it when complete, so a run killed while saving leaves the
previous checkpoint intact; it keeps the last ``--keep`` steps. Saving is synchronous: a run
that says it saved, has.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from lbdl_dsl.backends.jax import weights
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

    def restore(self, step: int, like: TrainState, cut: weights.Cut | None = None) -> TrainState:
        """The state of checkpoint ``step``, with the structure, shapes and types of ``like``.

        With ``cut`` (the model's `Model.cut`), a checkpoint written in the stacked layout (by
        lbdl before short ×N groups kept their copies apart) is read too: restored stacked,
        each copy cut out and placed as ``like``'s."""
        try:
            return self._restore(step, like)
        except (ValueError, KeyError, TypeError) as exc:
            if cut:
                try:
                    older = self._restore(step, like, cut)
                except (ValueError, KeyError, TypeError):
                    pass
                else:
                    cut_out = _trees(older, lambda f: weights.cut_copies(f, cut))
                    return jax.tree.map(_placed, cut_out, like)
            raise LbdlError(
                f"{self.directory}/{step}: the checkpoint does not fit this model and optimiser "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:300]})",
                None,
                hint="it was written by another spec or configuration: train into a new -o folder",
            ) from None

    def _abstract(self, leaf: Any) -> Any:
        return self._ocp.utils.to_shape_dtype_struct(leaf)

    def _restore(self, step: int, like: Any, cut: weights.Cut | None = None) -> TrainState:
        ocp = self._ocp
        abstract = jax.tree.map(self._abstract, like)
        if cut:  # the params-like trees in the stacked layout
            abstract = _trees(abstract, lambda f: _stacked(f, cut))
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract))
        return TrainState(*self.manager.restore(step, args=args).state)

    def close(self) -> None:
        self.manager.close()


def _trees(tree: Any, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """``tree`` with ``change`` applied to each dictionary of arrays by parameter path (the
    parameters, the model's state, and the optimiser's moments inside its state's tuples);
    a dictionary ``change`` gives back unchanged keeps its own structure."""
    if isinstance(tree, dict):
        flat = weights.flatten(tree)
        changed = change(flat)
        return tree if changed is flat else weights.unflatten(changed)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a NamedTuple (optax's states)
        return type(tree)(*(_trees(t, change) for t in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(_trees(t, change) for t in tree)
    return tree


def _stacked(flat: dict[str, Any], cut: weights.Cut) -> dict[str, Any]:
    """Shapes of the stacked layout for the copies kept apart in ``flat`` (the inverse of
    `weights.cut_copies`)."""
    if not any(k in cut for k in flat):
        return flat
    out = {k: v for k, v in flat.items() if k not in cut}
    for path, leaf in flat.items():
        if path in cut:
            view, index, shape = cut[path]
            sharding = getattr(leaf, "sharding", None)
            if isinstance(sharding, jax.sharding.NamedSharding):  # unsplit along the copies
                spec = jax.sharding.PartitionSpec(*(None,) * len(index), *sharding.spec)
                sharding = jax.sharding.NamedSharding(sharding.mesh, spec)
            out[view] = jax.ShapeDtypeStruct(shape, leaf.dtype, sharding=sharding)
    return out


def _placed(array: Any, like: Any) -> Any:
    return jax.device_put(array, like.sharding) if hasattr(like, "sharding") else array

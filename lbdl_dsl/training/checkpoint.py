"""Checkpoints through orbax: the whole `TrainState` and the run's record, atomically, keep-K.

A checkpoint is one orbax step folder under ``RUN/checkpoints/`` with two items: ``state``, the
`TrainState` pytree (parameters, model state, optimiser state, step, key), and ``meta``, JSON:
the loader's position, the config, the spec's hash and the versions. Orbax writes each step to
a temporary folder and renames it when complete, so a run killed while saving leaves the
previous checkpoint intact; it keeps the last ``--keep`` steps. Saving is synchronous: a run
that says it saved, has.

What orbax does not check, this module does. ``meta`` records a digest of every array
(`digests`), compared on restore, so a flipped bit or a file cut short is found rather than
trained on. A checkpoint that cannot be read is `Damaged` (its reason named), for the loop to
fall back to the one before; one of another run (its ``run_id``) is never skipped over or
restored. A failure to save (a full disk) is an `LbdlError` naming the folder, and the checkpoint
layer's own logs and thread tracebacks about it are kept off the terminal.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from lbdl_dsl.backends.jax import weights
from lbdl_dsl.backends.jax.distributed import peer_error
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.training import rundir
from lbdl_dsl.training.step import TrainState


class Damaged(Exception):
    """A checkpoint that cannot be read back as written; ``str`` says why."""


def digests(tree: Any) -> dict[str, str] | None:
    """A short digest of each array of ``tree`` by its path; None where arrays are spread over
    processes (each process would see only its part)."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array):
            if not leaf.is_fully_addressable:
                return None
            # jax.dtypes exports issubdtype, though its stub does not say so
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):  # type: ignore[attr-defined]
                leaf = jax.random.key_data(leaf)
        array = np.ascontiguousarray(np.asarray(leaf))
        digest = hashlib.blake2b(array.tobytes(), digest_size=12)
        digest.update(f"{array.dtype.str}{array.shape}".encode("ascii"))
        out[jax.tree_util.keystr(path)] = digest.hexdigest()
    return out


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def _layer_quiet(keep_after_failure: bool = False) -> Iterator[None]:
    """Keep orbax's and tensorstore's own reports of a failed save (logged errors, thread and
    event-loop tracebacks) off the terminal: the save's error says it once. After a failure
    they stay quiet, since the layer's threads go on reporting while the process ends."""
    loggers = [logging.getLogger(n) for n in ("absl", "asyncio", "orbax")]
    quiet = _Quiet()
    hooks = threading.excepthook, sys.unraisablehook
    for logger in loggers:
        logger.addFilter(quiet)
    threading.excepthook = lambda args: None
    sys.unraisablehook = lambda args: None
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        if not (failed and keep_after_failure):
            threading.excepthook, sys.unraisablehook = hooks
            for logger in loggers:
                logger.removeFilter(quiet)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def _full(exc: BaseException) -> bool:
    return (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left" in str(exc)


class Checkpoints:
    """The checkpoints of one run folder."""

    def __init__(self, run_dir: Path, keep: int, run_id: str = "") -> None:
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.run_id = run_id
        self.directory = (run_dir / "checkpoints").absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=False, create=True
        )
        with _layer_quiet():  # orbax warns of each step folder it cannot read
            self.manager = ocp.CheckpointManager(self.directory, options=options)

    def latest(self) -> int | None:
        latest: int | None = self.manager.latest_step()
        return latest

    def steps(self) -> list[int]:
        """The steps saved, newest first."""
        with _layer_quiet():
            return sorted(self.manager.all_steps(), reverse=True)

    def reload(self) -> None:
        with _layer_quiet():
            self.manager.reload()

    def save(self, ts: TrainState, meta: dict[str, Any]) -> None:
        ocp = self._ocp
        step = int(ts.step)
        if step in self.manager.all_steps():
            self._check_own(step)  # saved already, by this run: the same state
            return
        meta = {**meta, "run_id": self.run_id, "digests": digests(ts)}
        args = ocp.args.Composite(state=ocp.args.StandardSave(ts), meta=ocp.args.JsonSave(meta))
        try:
            with _layer_quiet(keep_after_failure=True):
                self.manager.save(step, args=args, force=True)
                self.manager.wait_until_finished()
        except Exception as exc:  # noqa: BLE001 - whatever the layer raised, said once
            if peer_error(exc) is not None:
                raise  # another process is gone: the loop's to handle (`training.rescue`)
            if _full(exc):
                raise LbdlError(
                    f"no space left on the device of {self.directory}: the checkpoint of step "
                    f"{step} was not saved",
                    None,
                    hint="free some space and continue with --resume (the last checkpoint "
                    "saved is intact), or train into a folder on another disk with -o",
                ) from None
            raise LbdlError(
                f"cannot save the checkpoint of step {step} in {self.directory}: {_reason(exc)}",
                None,
                hint="the last checkpoint saved is intact; continue with --resume once the "
                "folder can be written",
            ) from None

    def save_alone(self, ts: TrainState, meta: dict[str, Any]) -> None:
        """Save ``ts`` (host arrays, the whole state) from this process alone, without a
        collective or a barrier: the others of the run are gone (`training.rescue`). Written,
        like every save, to a temporary folder renamed when complete; a step already saved is
        left as it is (another survivor's rename got there first)."""
        ocp = self._ocp
        step = int(ts.step)
        if step in rundir.saved_steps(self.directory.parent):
            return
        me = jax.process_index()
        self.directory.mkdir(parents=True, exist_ok=True)
        options = ocp.CheckpointManagerOptions(
            enable_async_checkpointing=False,
            create=False,  # made above: orbax makes it only with every process
            multiprocessing_options=ocp.options.MultiprocessingOptions(
                primary_host=me, active_processes={me}
            ),
        )
        meta = {**meta, "run_id": self.run_id, "digests": digests(ts)}
        args = ocp.args.Composite(state=ocp.args.StandardSave(ts), meta=ocp.args.JsonSave(meta))
        try:
            with _layer_quiet(keep_after_failure=True):
                alone = ocp.CheckpointManager(self.directory, options=options)
                alone.save(step, args=args, force=True)
                alone.wait_until_finished()
                alone.close()
        except Exception as exc:  # noqa: BLE001 - whatever the layer raised, said once
            if step in rundir.saved_steps(self.directory.parent):
                return
            raise LbdlError(
                f"cannot save the checkpoint of step {step} in {self.directory}: {_reason(exc)}",
                None,
            ) from None

    def _check_own(self, step: int) -> None:
        try:
            theirs = self.read_meta(step).get("run_id")
        except Damaged as exc:
            theirs = f"unreadable: {exc}"
        if theirs not in (None, self.run_id):
            raise LbdlError(
                f"{self.directory}/{step}: a checkpoint of another run is already there "
                f"(run id {theirs}; this run is {self.run_id})",
                None,
                hint="train into a new -o folder: lbdl never mixes two runs' checkpoints",
            )

    def read_meta(self, step: int) -> dict[str, Any]:
        """The ``meta`` item of checkpoint ``step``; `Damaged` if it cannot be read."""
        ocp = self._ocp
        try:
            with _layer_quiet():
                args = ocp.args.Composite(meta=ocp.args.JsonRestore())
                meta = self.manager.restore(step, args=args).meta
        except Exception as exc:  # noqa: BLE001 - any failure to read is damage
            raise Damaged(f"its record cannot be read: {_reason(exc)}") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("position"), dict):
            raise Damaged("its record is not the one lbdl writes")
        return dict(meta)

    def restore_checked(
        self, step: int, like: TrainState, meta: dict[str, Any], cut: weights.Cut | None = None
    ) -> TrainState:
        """The state of checkpoint ``step``, with the structure, shapes and types of ``like``
        (with ``cut``, `Model.cut`, a checkpoint of the stacked layout lbdl wrote before short
        ×N groups kept their copies apart is read too, each copy cut out), then each array's
        digest compared with the one recorded (`Damaged` if
        any differs, or if the checkpoint cannot be read)."""
        try:
            with _layer_quiet():
                ts, stored = self._restore_either(step, like, cut)
        except Exception as exc:  # noqa: BLE001 - any failure to read is damage
            raise Damaged(f"its arrays cannot be read: {_reason(exc)}") from None
        recorded = meta.get("digests")
        if isinstance(recorded, dict):
            now = digests(stored)
            if now is not None:
                bad = sorted(k for k in recorded if now.get(k) != recorded[k])
                if bad:
                    raise Damaged(
                        f"{len(bad)} of its arrays differ from what was saved ({bad[0]}, ...)"
                    )
        return ts

    def _restore_either(
        self, step: int, like: TrainState, cut: weights.Cut | None
    ) -> tuple[TrainState, Any]:
        """The state in this model's layout, read in it or (``cut``) in the stacked one lbdl
        wrote before; and the state as stored, whose digests were recorded."""
        try:
            ts = self._restore(step, like)
            return ts, ts
        except Exception:
            if not cut:
                raise
            try:
                older = self._restore(step, like, cut)
            except Exception:  # noqa: BLE001 - the first failure is the one to report
                pass
            else:
                cut_out = _trees(older, lambda f: weights.cut_copies(f, cut))
                return jax.tree.map(_placed, cut_out, like), older
            raise

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

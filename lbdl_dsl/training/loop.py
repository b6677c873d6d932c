"""``train(...)``: the training loop, the Python function behind ``lbdl train``.

The loop reads as the run: compile the spec, choose the task from its outputs, open the data
and check it against the inputs, claim the run folder (or resume from its last checkpoint),
then step. Every ``--log-every`` steps the step metrics are fetched at once (one host sync per
log, not per step), checked for NaN, written to ``metrics.jsonl`` and shown; evaluation and
checkpoints happen at their own intervals (``--save-every`` steps, and ``--save-minutes`` of
wall time, five by default, so a killed run loses minutes, not the run) and at the end, with
``params.safetensors`` and the loss plot. Ctrl-C (or SIGTERM) asks the loop to stop after the
current step: it saves a checkpoint and raises `TrainingInterrupted`; a second Ctrl-C stops at
once, or, during a save, as soon as the save is complete.

A resumed run continues from the newest checkpoint that reads back as it was written: a
damaged one is named, moved aside to ``RUN/damaged/``, and the one before it used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from lbdl_dsl.core.errors import ArgumentError, LbdlError
from lbdl_dsl.training import optim, progress, rescue, rundir
from lbdl_dsl.training.checkpoint import Checkpoints, Damaged
from lbdl_dsl.training.config import MAX_STEPS, TrainConfig
from lbdl_dsl.training.datasets import Data, open_data
from lbdl_dsl.training.devices import Mesh, One, join
from lbdl_dsl.training.loader import Loader, Position, eval_batches
from lbdl_dsl.training.plot import plot
from lbdl_dsl.training.progress import Display, MetricsFile, Record
from lbdl_dsl.training.signature import signature
from lbdl_dsl.training.step import TrainState, TrainStep, make_eval_step, make_train_step
from lbdl_dsl.training.tasks import Task, choose

if TYPE_CHECKING:
    from lbdl_dsl.backends.jax.model import Model


@dataclass(frozen=True)
class TrainResult:
    """What a finished run leaves: its folder, files, last records and final arrays."""

    run_dir: Path
    step: int
    seconds: float  # wall time of this command (a resumed run counts from its resumption)
    train: Record | None  # the last training record
    eval: Record | None  # the last evaluation record
    params_path: Path
    plot_path: Path | None
    params: Any
    state: Any
    model: Any
    task: Task


class TrainingInterrupted(KeyboardInterrupt):
    """Raised after Ctrl-C once the checkpoint of ``step`` is saved in ``run_dir``."""

    def __init__(self, step: int, run_dir: Path) -> None:
        super().__init__(f"interrupted at step {step}")
        self.step, self.run_dir = step, run_dir


class _StopRequest:
    """Ctrl-C and SIGTERM as a request to stop after the current step (main thread only)."""

    def __init__(self) -> None:
        self.requested = False
        self.saving = False  # a second request waits for the save to complete
        self.now = False

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:  # asked twice: stop now, without the checkpoint
            if self.saving:
                self.now = True
                return
            raise KeyboardInterrupt
        self.requested = True

    @contextlib.contextmanager
    def saving_checkpoint(self) -> Iterator[None]:
        """A save is never cut in the middle (the checkpoint layer's threads would be left
        writing): a second Ctrl-C during it stops the run as soon as the save is complete."""
        self.saving = True
        try:
            yield
        finally:
            self.saving = False
        if self.now:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(
        self, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)
    ) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {s: signal.signal(s, self._handler) for s in signals}
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)


def train(
    spec: str | Path,
    data: str | Path,
    *,
    output_dir: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    quiet: bool = False,
    callbacks: Sequence[Callable[[Record], None]] = (),
    **options: Any,
) -> TrainResult:
    """Train ``spec`` on ``data``; the keywords are ``lbdl train``'s flags (`TrainConfig`).

    ``lbdl_dsl.train("specs/digits-cnn.lbdl", "digits", epochs=10, batch=32, lr=3e-3)``.
    ``overrides`` are the ``--set`` values; ``callbacks`` are called with every record.
    """
    names = {f.name for f in dataclasses.fields(TrainConfig)} - {"spec", "data", "output_dir"}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"train() got unknown options {unknown}; known: {sorted(names)}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ArgumentError(f"overrides must be a dictionary, got {type(overrides).__name__}")
    out = Path(output_dir) if output_dir is not None else Path("runs") / Path(spec).stem
    config = TrainConfig(
        spec=str(spec),
        data=str(data),
        output_dir=str(out),
        overrides=dict(overrides or {}),
        **options,
    )
    display = progress.QuietDisplay() if quiet else progress.display_for()
    return run(config, display=display, callbacks=callbacks)


def run(
    config: TrainConfig,
    *,
    display: Display | None = None,
    callbacks: Sequence[Callable[[Record], None]] = (),
    devices: One | Mesh | None = None,
) -> TrainResult:
    """Run ``config``: a new run, or the continuation of the one in its folder (``resume``).

    ``devices``: the run's devices when the caller joined the processes already (`lbdl train`
    does, with its coordinator flags); by default those ``config.mesh`` names."""
    from lbdl_dsl.backends.jax.model import model_of

    started = time.perf_counter()
    if devices is None:
        devices = join(config.mesh, config.shard)
    if not devices.is_main:
        display = progress.QuietDisplay()
    display = display or progress.display_for()
    run_dir = Path(config.output_dir)
    model = model_of(config.spec, dict(config.overrides), dtype=config.dtype, unroll=config.unroll)
    devices = devices.place(model)
    devices.check_batch(config.batch)
    digest = rundir.spec_hash(model.checked.sources)
    with rundir.claimed(run_dir) if devices.is_main else contextlib.nullcontext():
        return _run_claimed(config, model, devices, digest, display, callbacks, started)


def _run_claimed(
    config: TrainConfig,
    model: Model,
    devices: One | Mesh,
    digest: str,
    display: Display,
    callbacks: Sequence[Callable[[Record], None]],
    started: float,
) -> TrainResult:
    """The run, once the folder is this command's alone (`rundir.claimed`)."""
    run_dir = Path(config.output_dir)
    old = rundir.check_claim(run_dir, config, digest)
    devices.barrier("lbdl-train-claimed")  # every process read the folder before it changes
    sig = signature(model.checked)
    task = choose(sig, config.task, config.target)
    data = open_data(config.data, sig, task, config.seed)
    loader = Loader(data.train, config.batch, config.seed)
    if devices.count > 1:
        loader = loader.shard(devices.index, devices.count)
    total = config.steps or _epoch_steps(config.epochs or 1, loader.steps_per_epoch)
    lr = optim.schedule(config, total)
    tx = optim.optimizer(config, lr)
    ts = devices.init_state(model, tx, config.seed)
    run_id = old.get("run_id") if old is not None else None
    ckpts = Checkpoints(run_dir, config.keep, run_id or _shared_id(devices))
    loop = _Loop(config, model, task, data, loader, total, run_dir, ckpts, display, callbacks)
    loop.devices = devices
    loop.eval_step = devices.eval_step(loop.eval_step)
    loop.record = {
        "run_id": ckpts.run_id,
        "config": config.to_json(),
        "spec_hash": digest,
        "spec_file": str(Path(config.spec).resolve()),  # found again from any folder
        "model": {"name": model.name, "params": model.param_count},
        "task": task.describe(),
        "data": {"name": data.name, **data.info},
        "steps_per_epoch": loader.steps_per_epoch,
        "versions": rundir.versions(),
    }
    if devices.describe() is not None:
        loop.record["devices"] = devices.describe()
    try:
        ts = loop.start(ts, old)
        ts = loop.steps(ts, devices.step(make_train_step(model, task, tx, lr), ts, tx))
        return loop.finish(ts, started)
    finally:
        ckpts.close()


def _epoch_steps(epochs: float, per_epoch: int) -> int:
    steps = epochs * per_epoch
    if steps > MAX_STEPS:
        raise LbdlError(
            f"--epochs {epochs}: {steps:.3g} steps of {per_epoch} per epoch, more than 2^31−1",
            None,
            hint="ask for fewer epochs",
        )
    return max(1, math.ceil(steps))


def _shared_id(devices: One | Mesh) -> str:
    """A new run id, the same in every process of the run (process 0's)."""
    run_id = rundir.new_run_id()
    if devices.count > 1:
        from jax.experimental import multihost_utils

        words = np.frombuffer(bytes.fromhex(run_id), np.uint32)
        run_id = np.asarray(multihost_utils.broadcast_one_to_all(words), np.uint32).tobytes().hex()
    return run_id


class _Loop:
    """The state of one command's loop; each method is one phase of the run."""

    def __init__(self, config: TrainConfig, model: Model, task: Task, data: Data, loader: Loader,
                 total: int, run_dir: Path, ckpts: Checkpoints, display: Display,
                 callbacks: Sequence[Callable[[Record], None]]) -> None:  # fmt: skip
        self.config, self.model, self.task, self.data = config, model, task, data
        self.loader, self.total, self.run_dir, self.ckpts = loader, total, run_dir, ckpts
        self.display, self.callbacks = display, callbacks
        self.metrics = MetricsFile(run_dir / "metrics.jsonl")
        self.position = Position()
        self.time_offset = 0.0
        self.clock = self.last_flush = self.last_save = time.perf_counter()
        self.records: list[Record] = []
        self.record: dict[str, Any] = {}
        self.eval_step = make_eval_step(model, task)
        self.stop = _StopRequest()
        self.devices: One | Mesh = One()

    # -- phases ---------------------------------------------------------------------------------
    def start(self, ts: TrainState, old: dict[str, Any] | None) -> TrainState:
        steps = self.ckpts.steps() if old is not None else []
        if self.config.resume and not steps:
            self.display.note(f"{self.run_dir}: no checkpoint found: starting a new run")
        if not steps:
            if self.devices.is_main:
                self.metrics.reset()
            self._write_record(0)
            return ts
        damaged: list[tuple[int, str]] = []
        for latest in steps:
            try:
                meta = self.ckpts.read_meta(latest)
                self._check_meta(latest, meta)
                restored: TrainState = self.ckpts.restore_checked(
                    latest, ts, meta, self.model.cut()
                )
                break
            except Damaged as exc:
                damaged.append((latest, str(exc)))
        else:
            raise LbdlError(
                f"{self.run_dir}: no checkpoint there can be read:\n  "
                + "\n  ".join(f"step {s}: {why}" for s, why in damaged),
                None,
                hint="train into a new -o folder (these are left as they are)",
            )
        if latest > self.total:
            raise LbdlError(
                f"{self.run_dir}: the last checkpoint is at step {latest}, past the {self.total} "
                "steps asked for",
                None,
                hint=f"ask for more: --steps {latest + self.total}",
            )
        self._set_aside(damaged)
        self.position = Position.from_json(meta["position"])
        self.time_offset = float(meta.get("time", 0.0))
        main = self.devices.is_main
        self.records = self.metrics.keep_until(latest) if main else self.metrics.read()
        for line in self.metrics.dropped:
            self.display.note(f"{self.metrics.path}: {line}")
        self.display.note(f"{self.run_dir}: resuming from the checkpoint of step {latest}")
        self._write_record(latest)
        return restored

    def _check_meta(self, step: int, meta: dict[str, Any]) -> None:
        """A checkpoint of another run (or spec) in this folder is refused, never used."""
        theirs = meta.get("run_id")
        if theirs is not None and theirs != self.ckpts.run_id:
            raise LbdlError(
                f"{self.run_dir}/checkpoints/{step}: a checkpoint of another run (run id {theirs}; "
                f"run.json names {self.ckpts.run_id})",
                None,
                hint="train into a new -o folder: lbdl never mixes two runs' checkpoints",
            )
        if meta.get("spec_hash", self.record["spec_hash"]) != self.record["spec_hash"]:
            raise LbdlError(
                f"{self.run_dir}/checkpoints/{step}: a checkpoint of another spec",
                None,
                hint="train into a new -o folder",
            )

    def _set_aside(self, damaged: list[tuple[int, str]]) -> None:
        """Move each damaged checkpoint to ``RUN/damaged/STEP`` (kept, never deleted; out of
        the way of the steps this run saves again) and say so."""
        if not damaged:
            return
        aside = self.run_dir / "damaged"
        for step, why in damaged:
            target = aside / str(step)
            n = 1
            while target.exists():
                target, n = aside / f"{step}.{n}", n + 1
            if self.devices.is_main:
                aside.mkdir(exist_ok=True)
                os.replace(self.ckpts.directory / str(step), target)
            self.display.note(
                f"{self.run_dir}/checkpoints/{step} is damaged ({why}); moved to {target}"
            )
        self.ckpts.reload()

    def steps(self, ts: TrainState, train_step: TrainStep) -> TrainState:
        step = int(ts.step)
        pending: list[dict[str, Any]] = []
        self.clock = self.last_flush = self.last_save = time.perf_counter()
        self.display.start(self.total, step)
        before = confirmed = (ts, step, self.position)  # for `_rescue`
        try:
            stopping = False
            with self.stop.installed(self.devices.handled_signals):
                while step < self.total and not stopping:
                    before = (ts, step, self.position)  # whole until the step completes
                    batch = self.devices.put(self.loader.batch_at(self.position))
                    ts, metrics = train_step(ts, batch)
                    self.position = self.loader.advance(self.position)
                    step += 1
                    pending.append(metrics)
                    # every process asks at every step (the preemption service requires it)
                    stopping = self.devices.preempted(step) or self.stop.requested
                    last = step == self.total or stopping
                    if self._due(step, self.config.log_every) or last:
                        self._flush(step, pending)
                    if self.data.test is not None and self._due(step, self.config.eval_every):
                        self._flush(step, pending)
                        self._evaluate(ts, step)
                    if not pending and self.devices.count > 1:  # ts's step completed
                        confirmed = (ts, step, self.position)
                    stopping = stopping or self.stop.requested  # a signal during the flush
                    if self._due(step, self.config.save_every) or stopping or self._time_due(step):
                        self._flush(step, pending)
                        self._save(ts, step)
                if stopping:
                    raise TrainingInterrupted(step, self.run_dir)
        except Exception as exc:
            lost = self._peer_lost(exc)
            if lost is None:
                raise
            raise self._rescue([(ts, step, self.position), before, confirmed], lost) from None
        finally:
            self.display.stop()
        return ts

    def _peer_lost(self, exc: Exception) -> LbdlError | None:
        """A collective that failed because another process of the run is gone, as the error
        that names this process and what it saw; None for any other failure."""
        if self.devices.count == 1 or isinstance(exc, LbdlError):
            return None
        from lbdl_dsl.backends.jax.distributed import peer_error

        return peer_error(exc)

    def _rescue(self, held: list[tuple[TrainState, int, Position]], lost: LbdlError) -> LbdlError:
        """Another process is gone: save alone the newest state of ``held`` (the state of the
        failed step, the one before it, the one last logged) that this process holds whole and
        complete
        (`training.rescue`), else name the newest complete checkpoint; the error to stop
        with says which."""
        why_not: list[str] = []
        for ts, step, position in held:
            whole = rescue.held_whole(ts)
            if whole.state is None:
                why_not.append(whole.why_not)
                continue
            self.position = position
            meta = dict(self.record)
            meta |= {"position": position.to_json(), "time": self._elapsed(), "step": step}
            self.ckpts.save_alone(whole.state, meta)
            rundir.write_record(self.run_dir, {**self.record, "step": step})
            saved = f"it saved the checkpoint of step {step} alone"
            break
        else:
            steps = rundir.saved_steps(self.run_dir)
            newest = f"step {steps[-1]}" if steps else "none yet"
            why = rescue.PARTIAL if rescue.PARTIAL in why_not else why_not[0]
            saved = f"it saved no checkpoint ({why}); the newest complete one: {newest}"
        return LbdlError(
            f"{lost.first.message}\n  {saved}",
            None,
            hint=f"continue from {self.run_dir} with the same command and --resume",
        )

    def finish(self, ts: TrainState, started: float) -> TrainResult:
        step = int(ts.step)
        last_eval = next((r for r in reversed(self.records) if r["kind"] == "eval"), None)
        if self.data.test is not None and (last_eval is None or last_eval["step"] != step):
            last_eval = self._evaluate(ts, step)
        self._save(ts, step)
        params, state = self.devices.gather((ts.params, ts.state))
        params_path = self.run_dir / "params.safetensors"
        plot_path: Path | None = self.run_dir / "loss.png"
        if self.devices.is_main:
            params_path = self.model.save(params_path, params, state)
            title = f"{self.model.name} on {self.data.name}: {self.task.describe()}"
            plot_path = plot(self.records, self.run_dir / "loss.png", title)
        self.devices.barrier("lbdl-train-finished")
        if plot_path is None:
            self.display.note("no loss plot: matplotlib is not installed (pip install matplotlib)")
        last_train = next((r for r in reversed(self.records) if r["kind"] == "train"), None)
        return TrainResult(
            self.run_dir,
            step,
            time.perf_counter() - started,
            last_train,
            last_eval,
            params_path,
            plot_path,
            params,
            state,
            self.model,
            self.task,
        )

    # -- pieces ---------------------------------------------------------------------------------
    def _due(self, step: int, every: int | None) -> bool:
        return bool(every) and step % every == 0  # type: ignore[operator]

    def _time_due(self, step: int) -> bool:
        """Whether ``--save-minutes`` have passed since the last save (or the start). With
        several processes, asked at logged steps only and decided by process 0, so that all of
        them save together."""
        minutes = self.config.save_minutes
        if not minutes or step == self.total:
            return False
        due: bool = time.perf_counter() - self.last_save >= 60.0 * minutes
        if self.devices.count > 1:
            if not self._due(step, self.config.log_every):
                return False
            from jax.experimental import multihost_utils

            due = bool(multihost_utils.broadcast_one_to_all(np.int32(due)))
        return due

    def _elapsed(self) -> float:
        return self.time_offset + time.perf_counter() - self.clock

    def _emit(self, record: Record) -> None:
        self.records.append(record)
        if self.devices.is_main:
            self.metrics.append(record)
        self.display.show(record)
        for callback in self.callbacks:
            callback(record)

    def _flush(self, step: int, pending: list[dict[str, Any]]) -> None:
        """Fetch the metrics of the steps since the last record; stop at a NaN loss."""
        if not pending:
            return
        values = jax.device_get(pending)
        first = step - len(values) + 1
        for i, v in enumerate(values):
            if not np.isfinite(v["loss"]):
                self._nan(first + i, float(v["loss"]), float(v["lr"]))
        now = time.perf_counter()
        seconds = max(now - self.last_flush, 1e-9)
        self.last_flush = now
        record: Record = {"kind": "train", "step": step}
        record["epoch"] = round(step / self.loader.steps_per_epoch, 4)
        for key in ("loss", *self.task.metrics):  # means over the steps since the last record
            record[key] = float(np.mean([v[key] for v in values]))
        record["lr"] = float(values[-1]["lr"])
        record["grad_norm"] = float(values[-1]["grad_norm"])
        record["time"] = round(self._elapsed(), 3)
        rate = len(values) / seconds
        record["samples_per_s"] = round(rate * self.config.batch, 1)
        record["eta"] = round((self.total - step) / rate, 1)
        pending.clear()
        self._emit(record)

    def _nan(self, step: int, value: float, lr: float) -> None:
        saved = self.ckpts.latest()
        kept = f"the checkpoint of step {saved} is kept" if saved else "no checkpoint was saved"
        raise LbdlError(
            f"{self.run_dir}: the loss is {value} at step {step}; training stopped ({kept})",
            None,
            hint=f"lower the learning rate (--lr {lr:.3g} at that step), clip the gradients "
            "(--clip 1.0) or warm up (--warmup 100), in a new -o folder",
        )

    def _evaluate(self, ts: TrainState, step: int) -> Record:
        sums: dict[str, float] = {}
        count = 0.0
        assert self.data.test is not None
        for batch, weights in eval_batches(
            self.data.test, self.config.batch, self.config.eval_samples
        ):
            batch, weights = self.devices.put(self.devices.rows((batch, weights)))
            out = jax.device_get(self.eval_step(ts.params, ts.state, batch, weights))
            count += float(weights.sum())
            for key, value in out.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        record: Record = {"kind": "eval", "step": step}
        record |= {key: value / count for key, value in sums.items()}
        if self.task.kind == "next-token":
            record["perplexity"] = math.exp(min(record["loss"], 700.0))
        record["samples"] = int(count)
        record["time"] = round(self._elapsed(), 3)
        self._emit(record)
        return record

    def _save(self, ts: TrainState, step: int) -> None:
        meta = dict(self.record)
        meta |= {"position": self.position.to_json(), "time": self._elapsed(), "step": step}
        with self.stop.saving_checkpoint():
            self.ckpts.save(ts, meta)
            self._write_record(step)
        self.last_save = time.perf_counter()

    def _write_record(self, step: int) -> None:
        if self.devices.is_main:
            rundir.write_record(self.run_dir, {**self.record, "step": step})

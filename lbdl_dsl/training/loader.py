"""Batches in an order that is a pure function of (seed, epoch), and a position to resume from.

A `Dataset` is anything with a length and ``take(indices) -> batch``; a batch is a dictionary
``{"inputs": {name: array}, "target": array}`` of host NumPy arrays with a leading batch axis
(the target is absent for ``reconstruct``). The `Loader` shuffles with NumPy's PCG64 seeded by
``(seed, epoch)``, so the batch at any position can be made again without replaying the ones
before it: a checkpoint stores the `Position` and resuming starts there. Incomplete last batches
are dropped, so every training step has the same shapes and compiles once. ``shard(index,
count)`` gives one process its slice of every global batch, for multi-process runs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from lbdl_dsl.core.errors import LbdlError

Batch = dict[str, Any]


class Dataset(Protocol):
    def __len__(self) -> int: ...

    def take(self, indices: np.ndarray) -> Batch: ...


@dataclass(frozen=True)
class Position:
    """Where the loader is: ``batch`` batches of epoch ``epoch`` have been consumed."""

    epoch: int = 0
    batch: int = 0

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        return cls(int(data["epoch"]), int(data["batch"]))


class Loader:
    """Training batches of ``batch_size`` samples from ``dataset``, shuffled per epoch."""

    def __init__(
        self, dataset: Dataset, batch_size: int, seed: int, *, index: int = 0, count: int = 1
    ) -> None:
        if len(dataset) < batch_size:
            raise LbdlError(
                f"--batch {batch_size} is larger than the training data ({len(dataset)} samples)",
                None,
                hint=f"use --batch {max(1, len(dataset) // 4)} or fewer",
            )
        if batch_size % count:
            raise LbdlError(f"--batch {batch_size} does not split over {count} processes")
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        self.index, self.count = index, count
        self.steps_per_epoch = len(dataset) // batch_size

    def shard(self, index: int, count: int) -> Loader:
        """This loader as process ``index`` of ``count`` sees it: its rows of every batch."""
        return Loader(self.dataset, self.batch_size, self.seed, index=index, count=count)

    @functools.lru_cache(maxsize=2)  # noqa: B019 - two epochs at most, freed with the loader
    def order(self, epoch: int) -> np.ndarray:
        """The permutation of epoch ``epoch``: the same for the same (seed, epoch), always."""
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.dataset))

    def batch_at(self, pos: Position) -> Batch:
        start = pos.batch * self.batch_size
        rows = self.order(pos.epoch)[start : start + self.batch_size]
        per = self.batch_size // self.count
        return self.dataset.take(rows[self.index * per : (self.index + 1) * per])

    def advance(self, pos: Position) -> Position:
        if pos.batch + 1 < self.steps_per_epoch:
            return Position(pos.epoch, pos.batch + 1)
        return Position(pos.epoch + 1, 0)

    def position_at(self, step: int) -> Position:
        """The position after ``step`` steps from the start."""
        return Position(step // self.steps_per_epoch, step % self.steps_per_epoch)


def eval_batches(
    dataset: Dataset, batch_size: int, limit: int | None = None
) -> Iterator[tuple[Batch, np.ndarray]]:
    """The evaluation samples in order, in batches padded to ``batch_size`` (so the eval step
    compiles once), each with a weight per row: 1 for a real sample, 0 for padding. With
    ``limit``, that many samples spread evenly over the split (a long text's windows)."""
    n = len(dataset)
    chosen = (
        np.arange(n) if limit is None or limit >= n else np.linspace(0, n - 1, limit).astype(int)
    )
    for start in range(0, len(chosen), batch_size):
        rows = chosen[start : start + batch_size]
        real = len(rows)
        rows = np.concatenate([rows, np.full(batch_size - real, rows[-1])])
        weights = (np.arange(batch_size) < real).astype(np.float32)
        yield dataset.take(rows), weights

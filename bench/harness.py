"""Model-agnostic timing helpers for comparing our generated JAX against Flax peers.

Both sides of every comparison go through the same functions in the same process, so
any bias in the measurement (clock, dispatch overhead, cache behaviour) applies equally
to both. The helpers take plain callables and hold no state between calls; the caller
owns the models, the inputs and the order of measurements.

JAX dispatches asynchronously: a call returns as soon as the work is *queued*. Every
measurement therefore ends with ``jax.block_until_ready``, otherwise we would time the
enqueue rather than the computation.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jax


def time_compile(fn: Callable[..., Any], *args: Any) -> float:
    """Seconds for ``jax.jit(fn).lower(*args).compile()``: trace + lower + XLA compile.

    JAX memoises lowering and compilation per function object, so compiling the same
    ``fn`` twice would make the second measurement nearly free. We jit a fresh wrapper
    on every call so each measurement pays the full cost, without touching JAX's global
    caches (which would disturb whatever else the caller has compiled).

    Pass the *un-jitted* function: if ``fn`` is already a ``jax.jit`` object, its traced
    jaxpr may be reused from an earlier call and tracing would be under-counted.
    ``args`` may be concrete arrays or ``jax.ShapeDtypeStruct``; nothing is executed.
    """

    @functools.wraps(fn)
    def fresh(*a: Any) -> Any:
        return fn(*a)

    start = time.perf_counter()
    jax.jit(fresh).lower(*args).compile()
    return time.perf_counter() - start


def time_steady(
    fn: Callable[..., Any], *args: Any, warmup: int = 2, repeat: int = 5
) -> tuple[float, float]:
    """(median, min) seconds per call of an already compiled or jitted ``fn``.

    Warm-up calls absorb compilation (for a jitted ``fn``) and first-touch costs such as
    buffer allocation, which are not steady-state work. The median is the headline
    number because it shrugs off a stray slow run; the min is the best the hardware
    managed and shows how noisy the median is. Arguments are reused across calls, so
    ``fn`` must not donate them.
    """
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    samples: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), min(samples)


def time_to_first_output(build: Callable[[], Any]) -> float:
    """Wall seconds for ``build()`` to go from nothing to a first result on device.

    This is the latency a user feels when starting a job: construction, parameter
    initialisation, tracing, compilation and one forward pass, all together. ``build``
    must do all of that itself and return the output; we block on it so asynchronous
    dispatch cannot hide the tail of the work.
    """
    start = time.perf_counter()
    jax.block_until_ready(build())
    return time.perf_counter() - start


@dataclass(frozen=True)
class Row:
    """One comparison: the same metric for our model and its peer (lower is better)."""

    model: str
    metric: str
    ours: float | None
    peer: float | None

    @property
    def ratio(self) -> float | None:
        """ours / peer, so values below 1 mean we are faster; None if undefined."""
        if self.ours is None or self.peer is None or self.peer == 0:
            return None
        return self.ours / self.peer


_COLUMNS: Sequence[str] = ("model", "metric", "ours", "peer", "ratio")


def _fmt(value: float | None) -> str:
    # Four significant figures: timings are not more precise than that anyway.
    return "—" if value is None else f"{value:.4g}"


def format_table(rows: Iterable[Row]) -> str:
    """Render rows as a Markdown table, ready to paste into a report or PR."""
    lines = [
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * 3) + "|",
    ]
    for row in rows:
        cells = [row.model, row.metric, _fmt(row.ours), _fmt(row.peer), _fmt(row.ratio)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

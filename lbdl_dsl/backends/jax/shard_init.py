"""Any block of a model's initial parameters, drawn alone: how a sharded init never holds more.

``init(key)`` (`runtime.init_arrays`) draws every random array from one PCG64 stream, array
after array, in the order of the module's table, as float32 numbers in [0, 1) scaled to
[-bound, bound). NumPy makes each float32 from half of one 64-bit output (the low half first),
so number ``i`` of the stream is half of output ``i // 2``; PCG64 can jump ahead any distance in
logarithmic time (``advance``). A block of an array is a set of contiguous runs of its C-order
numbers, and each run is drawn by jumping to its first number: the block comes out bit for bit
as it is in the whole array, and each device (each process) draws only its own blocks. Nothing
here depends on JAX: `sharding.init` hands these blocks to ``jax.make_array_from_callback``.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

import numpy as np

_RANDOM = ("fan_in", "std", "normal", "truncated_normal")
_PERIOD = 1 << 128  # PCG64 advances modulo its period, so a jump back is a long jump forward
_CHUNK = 1 << 18  # numbers drawn and scaled at a time, as init_arrays does


class Stream:
    """The init stream of one key, positioned anywhere: ``floats(start, out)``."""

    def __init__(self, key_data: np.ndarray) -> None:
        entropy = [int(w) for w in np.asarray(key_data, np.uint32).ravel()]
        self._bits = np.random.PCG64(np.random.SeedSequence(entropy))
        self._draw = np.random.Generator(self._bits).random
        self._at = 0  # 64-bit outputs consumed so far

    def floats(self, start: int, out: np.ndarray) -> None:
        """Fill ``out`` (float32, 1-D) with numbers ``start, start + 1, ...`` of the stream."""
        target = start // 2
        self._bits.advance((target - self._at) % _PERIOD)  # also forgets a buffered half
        self._at = target
        if start % 2:  # the run starts on a high half: draw its low half and drop it
            self._draw(dtype=np.float32)
            self._at += 1
        if out.size:
            self._draw(out=out, dtype=np.float32)
            self._at += (out.size - (start % 2) + 1) // 2


def offsets(table: Mapping[str, tuple[tuple[int, ...], str, float]]) -> dict[str, int]:
    """Where each random array's numbers start in the stream (constants draw nothing)."""
    out, at = {}, 0
    for path, (shape, how, _) in table.items():
        out[path] = at
        if how in _RANDOM:
            at += prod(shape)
    return out


def _bound(how: str, scale: float) -> np.float32:
    """The half-width of the uniform law, computed as `runtime.init_arrays` computes it."""
    if how in ("normal", "truncated_normal"):
        return np.float32(1.0)  # transformed by runtime.normal_from_uniform
    return np.float32(np.sqrt(3.0 / scale) if how == "fan_in" else np.sqrt(3.0) * scale)


def _runs(shape: tuple[int, ...], index: tuple[slice, ...]) -> tuple[np.ndarray, int]:
    """The block ``index`` of a C-order array as runs: (flat starts, run length)."""
    bounds = [s.indices(n)[:2] for s, n in zip(index, shape)]
    full = len(shape)  # axes from `full` on are whole: each run spans them
    while full > 0 and bounds[full - 1] == (0, shape[full - 1]):
        full -= 1
    if full == 0:
        return np.zeros(1, np.int64), prod(shape)
    strides = [prod(shape[i + 1 :]) for i in range(len(shape))]
    lo, hi = bounds[full - 1]
    length = (hi - lo) * strides[full - 1]
    starts = np.array([lo * strides[full - 1]], np.int64)
    for axis in range(full - 2, -1, -1):
        a, b = bounds[axis]
        starts = (np.arange(a, b, dtype=np.int64)[:, None] * strides[axis] + starts).ravel()
    return starts, length


def block(
    stream: Stream,
    entry: tuple[tuple[int, ...], str, float],
    offset: int,
    index: tuple[slice, ...] | None,
) -> np.ndarray:
    """The numbers of one table entry ``(shape, how, scale)`` in the block ``index``."""
    shape, how, scale = tuple(entry[0]), entry[1], entry[2]
    index = tuple(index) if index is not None else ()
    index += (slice(None),) * (len(shape) - len(index))
    dims = tuple(len(range(*s.indices(n))) for s, n in zip(index, shape))
    if how not in _RANDOM:
        return np.full(dims, scale if how == "const" else 0.0, np.float32)
    out = np.empty(prod(dims), np.float32)
    starts, length = _runs(shape, index)
    bound = _bound(how, scale)
    for i, start in enumerate(starts.tolist()):
        piece = out[i * length : (i + 1) * length]
        for at in range(0, length, _CHUNK):
            chunk = piece[at : at + _CHUNK]
            stream.floats(offset + start + at, chunk)
            chunk *= np.float32(2.0) * bound  # [0, 1) -> [-bound, bound), as init_arrays
            chunk -= bound
    if how in ("normal", "truncated_normal"):
        from lbdl_dsl.backends.jax.runtime.inits import normal_from_uniform

        normal_from_uniform(out, scale, truncated=how == "truncated_normal")
    return out.reshape(dims)

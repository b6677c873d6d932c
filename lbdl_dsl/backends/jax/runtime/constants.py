"""Constant tensors computed from sizes when the model is traced (`core/layers/constants.py`):
NumPy arithmetic on Python numbers, made a JAX array once, with a batch axis of one."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def formula_table(
    f: Callable[..., Any], shape: tuple[int, ...], *, n: int | None = None, dtype: Any = jnp.float32
) -> jax.Array:
    """The (1, *shape) table of ``f`` over the index grids of ``shape``, computed once with
    NumPy when traced (log(0) is -inf, without a warning); with ``n``, whole numbers in
    [0, n) as int32, and a ValueError for any other value."""
    with np.errstate(all="ignore"):
        grids = np.ogrid[tuple(slice(0, size) for size in shape)]
        value = np.broadcast_to(np.asarray(f(*grids), np.float64), shape)
        if n is None:
            return jnp.asarray(value[None], dtype)
        bad = ~np.isfinite(value) | (value != np.floor(value)) | (value < 0) | (value >= n)
    if bad.any():
        at = tuple(int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"the table's value {value[at]} at {at} is not a whole number in [0, {n})")
    return jnp.asarray(value[None], jnp.int32)


def sincos_rows(pos: np.ndarray, d: int, base: float, split: bool) -> np.ndarray:
    """sin and cos of pos / base^(2i/d) for each feature pair i: alternating, or ``split``
    (sines then cosines); a float64 NumPy table (len(pos), d)."""
    angle = np.asarray(pos, np.float64)[:, None] / base ** (np.arange(0, d, 2) / d)[None, :]
    if split:
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
    table = np.zeros((len(pos), d))
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table


def sincos_table(
    t: int,
    d: int,
    *,
    base: float = 10000.0,
    split: bool = False,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> jax.Array:
    """The (1, t, d) sin-cos position table (see ``sincos_rows``)."""
    return jnp.asarray(sincos_rows(np.arange(t), d, base, split)[None], dtype)


def sincos_2d_table(
    h: int, w: int, d: int, *, base: float = 10000.0, dtype: jax.typing.DTypeLike = jnp.float32
) -> jax.Array:
    """MAE's and DiT's (1, h*w, d) table: positions row by row, the column encoded in the
    first half of the features and the row in the second."""
    rows, cols = np.divmod(np.arange(h * w), w)
    halves = [sincos_rows(cols, d // 2, base, True), sincos_rows(rows, d // 2, base, True)]
    return jnp.asarray(np.concatenate(halves, axis=1)[None], dtype)


def band_mask(t: int, s: int, *, below: int = 0, above: int = 0) -> jax.Array:
    """(1, t, s) booleans: key j is kept for query i when i - below <= j <= i + above."""
    i, j = np.arange(t)[:, None], np.arange(s)[None, :]
    return jnp.asarray(((j >= i - below) & (j <= i + above))[None])


def relative_index(grid: tuple[int, ...]) -> jax.Array:
    """(1, n, n) int32: the relative position of each pair of the n positions of ``grid``
    (row by row), offsets a - b + g - 1 per axis in mixed radix 2g - 1 (Swin's index)."""
    coords = np.stack(np.unravel_index(np.arange(int(np.prod(grid))), grid), axis=1)
    index = np.zeros((len(coords), len(coords)), np.int64)
    for axis, g in enumerate(grid):
        offset = coords[:, None, axis] - coords[None, :, axis] + g - 1
        index = index * (2 * g - 1) + offset
    return jnp.asarray(index[None], jnp.int32)


def relative_buckets(t: int, s: int, n: int, far: int, *, bidirectional: bool = True) -> jax.Array:
    """(1, t, s) int32: T5's bucket of key j − query i, computed as transformers' T5 computes
    it (in float32, truncated), so that an imported table reads the same rows."""
    rel = np.arange(s)[None, :] - np.arange(t)[:, None]
    bucket = np.zeros((t, s), np.int64)
    if bidirectional:
        n //= 2
        bucket += (rel > 0) * n
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    exact = n // 2
    far_ratio = np.float32(np.log(far / exact))
    # the distances below `exact` keep their own bucket: their logarithm is never read
    ratio = np.log(np.maximum(rel, exact).astype(np.float32) / np.float32(exact)) / far_ratio
    large = exact + (ratio * np.float32(n - exact)).astype(np.int64, copy=False)
    large = np.minimum(large, n - 1)
    bucket += np.where(rel < exact, rel, large)
    return jnp.asarray(bucket[None], jnp.int32)


def alibi_bias(h: int, t: int, s: int, *, dtype: jax.typing.DTypeLike = jnp.float32) -> jax.Array:
    """(1, h, t, s): ALiBi's −m_h·|i − j|, head h's slope from Press et al.'s sequence."""

    def slopes(n: int) -> list[float]:
        if np.log2(n).is_integer():
            return [2 ** (-8 / n * (i + 1)) for i in range(n)]
        below = 2 ** int(np.floor(np.log2(n)))
        return slopes(below) + slopes(2 * below)[0::2][: n - below]

    distance = np.abs(np.arange(t)[:, None] - np.arange(s)[None, :])
    table = -np.asarray(slopes(h))[:, None, None] * distance[None]
    return jnp.asarray(table[None], dtype)

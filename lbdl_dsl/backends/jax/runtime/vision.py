"""Runtime functions of the vision boxes (`core/layers/vision.py`) on channels-last maps
(B, H, W, C): Swin's window attention, space-to-depth, adaptive average pooling."""

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax.runtime.constants import relative_index
from lbdl_dsl.backends.jax.runtime.dense import dense


def window_partition(x: jax.Array, window: int) -> jax.Array:
    """(B, H, W, C) -> (B * nW, w * w, C): windows row by row, tokens row by row in each."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // window, window, w // window, window, c)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)


def window_merge(windows: jax.Array, b: int, h: int, w: int, window: int) -> jax.Array:
    """The inverse of ``window_partition``: (B * nW, w * w, C) -> (B, H, W, C)."""
    c = windows.shape[-1]
    x = windows.reshape(b, h // window, w // window, window, window, c)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)


def shift_mask(h: int, w: int, window: int, shift: int) -> jax.Array:
    """(nW, 1, w*w, w*w) booleans for Swin's shifted windows: after a cyclic shift by
    ``shift``, tokens keep each other only within the same of the 3 x 3 regions it made."""
    labels = np.zeros((h, w), np.int64)
    bands = ((0, -window), (-window, -shift), (-shift, None))
    for i, (r0, r1) in enumerate(bands):
        for j, (c0, c1) in enumerate(bands):
            labels[r0:r1, c0:c1] = 3 * i + j
    grid = labels.reshape(h // window, window, w // window, window).transpose(0, 2, 1, 3)
    cells = grid.reshape(-1, window * window)
    return jnp.asarray((cells[:, :, None] == cells[:, None, :])[:, None])


def window_attention(
    x: jax.Array,
    p: dict[str, jax.Array],
    *,
    heads: int,
    window: int,
    shift: int = 0,
    pad: tuple[int, int] = (0, 0),
) -> jax.Array:
    """Swin's (S)W-MSA on a channels-last map (B, H, W, C): attention within each window,
    with the relative position bias ``p["table"]`` ((2w-1)^2, heads) and, when shifted, the
    map rolled by -shift, the regions the roll brought together masked, and rolled back.

    ``p`` holds wq, wk, wv, wo (C, C), optional bq, bk, bv and bo (C,), and the table. A map
    the window does not divide comes with ``pad``, the rows and columns of zeros added at its
    bottom and right (torchvision's Swin), cropped after.
    """
    rows, cols = x.shape[1], x.shape[2]
    if any(pad):
        x = jnp.pad(x, ((0, 0), (0, pad[0]), (0, pad[1]), (0, 0)))
    b, h, w, c = x.shape
    n, d = window * window, c // heads
    if shift:
        x = jnp.roll(x, (-shift, -shift), axis=(1, 2))
    tokens = window_partition(x, window)

    def heads_of(name: str) -> jax.Array:
        return dense(tokens, p["w" + name], p.get("b" + name)).reshape(-1, n, heads, d)

    index = relative_index((window, window))[0].reshape(-1)
    bias = jnp.take(p["table"], index, axis=0).reshape(n, n, heads).transpose(2, 0, 1)
    mask = None
    if shift:
        mask = jnp.tile(shift_mask(h, w, window, shift), (b, 1, 1, 1))
    out = jax.nn.dot_product_attention(
        heads_of("q"), heads_of("k"), heads_of("v"), bias=bias[None].astype(x.dtype), mask=mask
    )
    out = dense(out.reshape(-1, n, c), p["wo"], p.get("bo"))
    y = window_merge(out, b, h, w, window)
    y = jnp.roll(y, (shift, shift), axis=(1, 2)) if shift else y
    return y[:, :rows, :cols] if any(pad) else y


def space_to_depth(x: jax.Array, f: int, *, swin: bool = False) -> jax.Array:
    """Each f x f cell of a channels-last map into the channels: (B, H/f, W/f, f*f*C), in
    PyTorch's pixel_unshuffle order (channel c*f*f + i*f + j), or Swin's ((j*f + i)*C + c)."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // f, f, w // f, f, c)  # b, y, i, x, j, c
    x = x.transpose(0, 1, 3, 4, 2, 5) if swin else x.transpose(0, 1, 3, 5, 2, 4)
    return x.reshape(b, h // f, w // f, f * f * c)


def adaptive_avg_pool(x: jax.Array, out: tuple[int, ...]) -> jax.Array:
    """PyTorch's adaptive average pooling of a channels-last map (B, *S, C) to sizes ``out``:
    on each axis of n, output i averages positions floor(i*n/o) to ceil((i+1)*n/o) - 1,
    written as a constant matrix that the axis is multiplied by."""
    for axis, o in enumerate(out, start=1):
        n = x.shape[axis]
        if n == o:
            continue
        weights = np.zeros((o, n), np.float32)
        for i in range(o):
            lo, hi = (i * n) // o, -((-(i + 1) * n) // o)
            weights[i, lo:hi] = 1.0 / (hi - lo)
        x = jnp.moveaxis(jnp.tensordot(x, jnp.asarray(weights, x.dtype), ((axis,), (1,))), -1, axis)
    return x

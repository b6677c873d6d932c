"""Three runtime functions written again for the ONNX converter, with the same numbers.

jax2onnx (0.13) mistranslates two primitives our runtime uses, and one of its uses of a third:

- ``reduce_window`` max becomes an ONNX ``MaxPool`` over *every* axis of its operand; on a
  channels-last image (B, H, W, C) that is a 4-D pooling, which onnxruntime refuses
  ("Unsupported pooling size"). Here batch and channels are merged first, (B·C, H, W), so the
  pooling has the spatial axes only (and one of size 1).
- ``conv_general_dilated`` with ``lhs_dilation`` (the transposed convolution) becomes an ONNX
  ``ConvTranspose`` without its strides, so every output is too small. Here the input is
  dilated by reshapes (zeros between the values), and a plain convolution follows.
- ``checkpoint`` (``remat``) or ``jit`` of one traced body called several times, as
  `each_copy` calls its copies, is written inline each time under the same value names, which
  ONNX refuses ("cannot have a producer"). An export converts the forward pass only, where
  neither changes anything: here the copies are called plainly.

Only the ONNX export uses them (`export` swaps them into the executed module); XLA keeps the
runtime's own, which it runs faster. Each takes the arguments of the runtime's function of the
same name (keyword-only after the tensors); the tests check the signatures and the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def max_pool(
    x: jax.Array,
    *,
    window: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int | tuple[int, int], ...],
    dilation: tuple[int, ...] | None = None,
) -> jax.Array:
    """The runtime's ``max_pool`` (channels-last, PyTorch's MaxPool), with batch and channels
    merged into one leading axis so that the window covers the spatial axes alone."""
    kernel, dilation = window, dilation or (1,) * len(window)
    b, c, spatial = x.shape[0], x.shape[-1], x.shape[1:-1]
    y = jnp.moveaxis(x, -1, 1).reshape(-1, *spatial)
    pads = ((0, 0), *((p, p) if isinstance(p, int) else (p[0], p[1]) for p in padding))
    y = jax.lax.reduce_window(
        y,
        -jnp.inf,
        jax.lax.max,
        (1, *kernel),
        (1, *stride),
        pads,
        window_dilation=(1, *dilation),
    )
    return jnp.moveaxis(y.reshape(b, c, *y.shape[1:]), 1, -1)


def _dilate(x: jax.Array, axis: int, factor: int) -> jax.Array:
    """``factor - 1`` zeros between consecutive values along ``axis``, by a stack and a
    reshape (the converter has no interior padding either)."""
    if factor == 1:
        return x
    x = jnp.moveaxis(x, axis, -1)
    n = x.shape[-1]
    zeros = jnp.zeros((*x.shape, factor - 1), x.dtype)
    y = jnp.concatenate([x[..., None], zeros], axis=-1).reshape(*x.shape[:-1], n * factor)
    return jnp.moveaxis(y[..., : (n - 1) * factor + 1], -1, axis)


def conv_transpose(
    x: jax.Array,
    w: jax.Array,
    b: jax.Array | None = None,
    *,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    output_padding: tuple[int, ...] | None = None,
    dilation: tuple[int, ...] | None = None,
    groups: int = 1,
) -> jax.Array:
    """The runtime's ``conv_transpose`` (PyTorch's ConvTranspose, weight (*k, Cin, Cout/g)) as
    a dilated input, its padding, and a stride-1 convolution with the flipped kernel."""
    n = x.ndim - 2
    output_padding, dilation = output_padding or (0,) * n, dilation or (1,) * n
    kernel = w.shape[:n]
    cin, cout_g = w.shape[n], w.shape[n + 1]
    w = w.reshape(*kernel, groups, cin // groups, cout_g)
    w = jnp.moveaxis(w, n, n + 1).reshape(*kernel, cin // groups, groups * cout_g)
    w = jnp.flip(w, axis=tuple(range(n)))
    for axis, s in enumerate(stride):
        x = _dilate(x, axis + 1, s)
    pads = []
    for axis, (k, p, op, d) in enumerate(
        zip(kernel, padding, output_padding, dilation, strict=True)
    ):
        edge = d * (k - 1) - p
        lo, hi = edge, edge + op
        if lo < 0 or hi < 0:  # padding beyond the kernel's reach crops instead
            size = x.shape[axis + 1]
            x = jax.lax.slice_in_dim(x, max(-lo, 0), size - max(-hi, 0), axis=axis + 1)
        pads.append((max(lo, 0), max(hi, 0)))
    spatial = "DHW"[3 - n :]
    y = jax.lax.conv_general_dilated(
        x,
        w,
        window_strides=(1,) * n,
        padding=tuple(pads),
        rhs_dilation=tuple(dilation),
        dimension_numbers=("N" + spatial + "C", spatial + "IO", "N" + spatial + "C"),
        feature_group_count=groups,
    )
    if b is not None:
        y = y + jnp.reshape(b, (1,) * (y.ndim - 1) + b.shape)
    return y


def each_copy(  # noqa: ARG001 - remat_on_cpu: the runtime's signature
    step: Callable[..., tuple[Any, Any]],
    x: Any,
    xs: Any,
    first: int,
    length: int,
    remat_on_cpu: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """The runtime's `each_copy` without its checkpoint or its jitted copy (see the module):
    ``remat_on_cpu`` changes nothing in a forward pass."""
    from lbdl_dsl.backends.jax.runtime.module import copy_of

    news: dict[str, Any] = {}
    for k in range(first, first + length):
        x, news[str(k)] = step(x, copy_of(xs, k, first))
    return x, news


REPLACEMENTS = {"max_pool": max_pool, "conv_transpose": conv_transpose, "each_copy": each_copy}

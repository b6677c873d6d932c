"""Convolutions, pools, patches and upsampling (`core/layers/conv.py`), channels-last.

Parameter layouts: conv N-d ``w`` (k1[, k2], Cin // groups, Cout), ``b`` (Cout,) (WIO / HWIO);
transposed conv N-d ``w`` (k1[, k2], Cin, Cout // groups), ``b`` (Cout,).
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax.runtime.tensor import trailing


def conv_dimension_numbers(n: int) -> tuple[str, str, str]:
    """Channels-last dimension numbers for an n-d convolution (n <= 3): ("NHWC", "HWIO", "NHWC")."""
    spatial = "DHW"[3 - n :]
    return ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")


def same_padding(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """Padding giving "same" output size for stride 1.

    PyTorch's convention: total = dilation * (kernel - 1) is split as
    (total // 2, total - total // 2), i.e. the extra element (odd total) goes at the end.
    """
    pads = []
    for k, d in zip(kernel, dilation, strict=True):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def plain_convolutions() -> bool:
    """Whether `conv` leaves every convolution and its gradients to XLA as they are: off a CPU
    (the module looks this up when it runs: a benchmark may replace it)."""
    return jax.default_backend() != "cpu"


def conv(
    x: jax.Array,
    w: jax.Array,
    b: jax.Array | None = None,
    *,
    stride: tuple[int, ...] | None = None,
    padding: str | tuple[tuple[int, int], ...] | None = None,
    dilation: tuple[int, ...] | None = None,
    groups: int = 1,
) -> jax.Array:
    """N-d channels-last convolution (cross-correlation, as in PyTorch).

    ``x`` is (B, *S, Cin), ``w`` is (*k, Cin // groups, Cout), ``b`` is (Cout,) or None.
    ``padding`` is a tuple of (low, high) pairs per spatial axis (see ``same_padding``) or a
    string understood by ``jax.lax.conv_general_dilated`` ("SAME" / "VALID").
    A PyTorch Conv weight (Cout, Cin // g, *k) converts with ``transpose(2, ..., 1, 0)``.

    On a CPU, a pointwise convolution (1×1 kernel, no padding, one group: two thirds of
    ResNet-50's) is computed as the matrix product it is, which XLA:CPU runs faster than a
    convolution, and the gradients are `conv_input_grad` and `conv_weight_grad`, channels-last
    convolutions like this one: JAX's own transposition rule writes them with permuted
    dimension numbers, which XLA:CPU runs on a slow path inside loops (jax-ml/jax#12868), and
    the body of a ×N group is a loop (``jax.lax.scan``): ResNet-50's training step took ten
    times as long. Both modes of differentiation must work (``jax.jvp`` and ``jax.jacfwd`` as
    well as ``jax.grad``), so the rule is a JVP (`conv_tangent`) rather than a VJP, whose
    tangent JAX transposes into exactly those gradients; vmap and higher orders need nothing
    more. The rule runs under ``jax.checkpoint`` keeping its convolution's output
    (``checkpoint_dots``): what else its gradients read, the kernel flipped with its channels
    swapped and the input laid out with its channels first, is computed from the kernel and the
    input in the backward pass, just before its use, where XLA:CPU would otherwise make these
    copies in the forward pass and hold them until then (the tiny CNN of bench/memory_ratio.py
    on ``data=4``: XLA's total per device 658.2 KiB so against 541.8 KiB; the training step
    keeps the checkpoint's barriers, `backends.jax.xla_options`).

    Off a CPU (`plain_convolutions`) every convolution is one ``conv_general_dilated`` with
    JAX's own rules: on an H200, ResNet-50's training step compiled in 16.2 s that way against
    23.6 s (the Flax peer's: 16.7 s), each in a fresh process, and ran as fast (31.1 ms against
    31.4 ms at batch 128).
    """
    n = x.ndim - 2
    stride, dilation = tuple(stride or (1,) * n), tuple(dilation or (1,) * n)
    padding = ((0, 0),) * n if padding is None else padding
    if isinstance(padding, str):
        window = [d * (k - 1) + 1 for k, d in zip(w.shape[:n], dilation, strict=True)]
        padding = tuple(jax.lax.padtype_to_pads(x.shape[1:-1], window, stride, padding))
    pads = tuple((int(lo), int(hi)) for lo, hi in padding)

    def convolve(x: jax.Array, w: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(
            x,
            w,
            window_strides=stride,
            padding=pads,
            rhs_dilation=dilation,
            dimension_numbers=conv_dimension_numbers(n),
            feature_group_count=groups,
        )

    y: jax.Array
    if plain_convolutions():
        y = convolve(x, w)
    elif pointwise(w.shape, pads, groups):
        y = pointwise_conv(x, w, stride)
    else:

        def tangent(
            primals: tuple[jax.Array, jax.Array], tangents: tuple[Any, Any]
        ) -> tuple[jax.Array, jax.Array]:
            y = convolve(*primals)
            return y, conv_tangent(primals, tangents, y, stride, pads, dilation, groups)

        rule = jax.custom_jvp(convolve)
        rule.defjvp(tangent, symbolic_zeros=True)
        y = jax.checkpoint(rule, policy=jax.checkpoint_policies.checkpoint_dots)(x, w)
    if b is not None:
        y = y + trailing(b, y.ndim)
    return y


def conv_tangent(
    primals: tuple[jax.Array, jax.Array],
    tangents: tuple[Any, Any],
    y: jax.Array,
    stride: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    groups: int,
) -> jax.Array:
    """The tangent of `conv` (without bias), written so that its transpose is our gradients.

    A tangent is linear in ``dx`` and ``dw``; JAX differentiates in reverse by transposing it.
    Each term is therefore computed as the transpose of the gradient function itself
    (``jax.linear_transpose``): transposing it again gives back `conv_input_grad` and
    `conv_weight_grad` op for op, with their plain dimension numbers, since transposing a
    convolution, a flip or a reshape twice gives the same operation. Zero tangents (an input
    that nothing differentiates) come as symbolic zeros and cost nothing.
    """
    x, w = primals
    dx, dw = tangents
    out = jax.ShapeDtypeStruct(y.shape, y.dtype)
    terms: list[jax.Array] = []
    if type(dx) is not jax.custom_derivatives.SymbolicZero:

        def input_grad(g: jax.Array) -> jax.Array:
            return conv_input_grad(g, w, x.shape, stride, pads, dilation, groups).astype(x.dtype)

        terms.append(jax.linear_transpose(input_grad, out)(dx)[0])
    if type(dw) is not jax.custom_derivatives.SymbolicZero:

        def weight_grad(g: jax.Array) -> jax.Array:
            return conv_weight_grad(g, x, w.shape, stride, pads, dilation, groups).astype(w.dtype)

        terms.append(jax.linear_transpose(weight_grad, out)(dw)[0])
    if not terms:
        return jnp.zeros_like(y)
    return terms[0] + terms[1] if len(terms) == 2 else terms[0]


def pointwise_conv(x: jax.Array, w: jax.Array, stride: tuple[int, ...]) -> jax.Array:
    """A 1×1 convolution without padding as the matrix product it is (see `conv`).

    Its tangent is written for the transpose JAX makes of it in reverse mode: the kernel's
    term multiplies the input's rows laid out as (Cin, B·H·W), so that its transpose is the
    product XLA:CPU runs on its fast path, (Cin, B·H·W) by (B·H·W, Cout); JAX's own rule
    transposes the cotangent instead, a third slower inside a ×N group's loop.
    """
    n = x.ndim - 2

    @jax.custom_jvp
    def product(x: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.matmul(strided(x, stride), w.reshape(w.shape[n:]))

    def tangent(
        primals: tuple[jax.Array, jax.Array], tangents: tuple[Any, Any]
    ) -> tuple[jax.Array, jax.Array]:
        x, w = primals
        dx, dw = tangents
        xs = strided(x, stride)
        w2 = w.reshape(w.shape[n:])
        y = jnp.matmul(xs, w2)
        terms: list[jax.Array] = []
        if type(dx) is not jax.custom_derivatives.SymbolicZero:
            terms.append(jnp.matmul(strided(dx, stride), w2))
        if type(dw) is not jax.custom_derivatives.SymbolicZero:
            rows = xs.reshape(-1, xs.shape[-1]).T  # (Cin, B·H·W)
            dy = jax.lax.dot_general(rows, dw.reshape(w2.shape), (((0,), (0,)), ((), ())))
            terms.append(dy.reshape(y.shape))
        if not terms:
            return y, jnp.zeros_like(y)
        return y, terms[0] + terms[1] if len(terms) == 2 else terms[0]

    product.defjvp(tangent, symbolic_zeros=True)
    out: jax.Array = product(x, w)
    return out


def pointwise(w_shape: tuple[int, ...], pads: tuple[tuple[int, int], ...], groups: int) -> bool:
    """Whether a convolution is a matrix product: a 1×1 kernel, no padding, one group."""
    spatial = w_shape[:-2]
    return groups == 1 and all(k == 1 for k in spatial) and all(p == (0, 0) for p in pads)


def strided(x: jax.Array, stride: tuple[int, ...]) -> jax.Array:
    """Every ``stride``-th position of each spatial axis: where a 1×1 kernel lands."""
    return jax.lax.slice(x, (0,) * x.ndim, x.shape, (1, *stride, 1))


def conv_input_grad(
    g: jax.Array,
    w: jax.Array,
    x_shape: tuple[int, ...],
    stride: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    groups: int,
) -> jax.Array:
    """The gradient of `conv` for its input: ``g`` convolved with the flipped kernel.

    The kernel's input and output channels swap places (group by group), the stride becomes a
    dilation of ``g``, and the padding is what puts every input position under the window.
    """
    n = g.ndim - 2
    kernel = w.shape[:n]
    cin_g, cout_g = w.shape[n], w.shape[n + 1] // groups
    wt = w.reshape(*kernel, cin_g, groups, cout_g)
    wt = jnp.moveaxis(wt, n, n + 2)  # (*k, groups, Cout // groups, Cin // groups)
    wt = jnp.moveaxis(wt, n, n + 1).reshape(*kernel, cout_g, groups * cin_g)
    wt = jnp.flip(wt, axis=tuple(range(n)))
    padding = []
    for i in range(n):
        window = dilation[i] * (kernel[i] - 1) + 1
        covered = (g.shape[1 + i] - 1) * stride[i] + 1
        before = window - pads[i][0] - 1
        padding.append((before, x_shape[1 + i] + window - 1 - covered - before))
    return jax.lax.conv_general_dilated(
        g,
        wt,
        window_strides=(1,) * n,
        padding=padding,
        lhs_dilation=stride,
        rhs_dilation=dilation,
        dimension_numbers=conv_dimension_numbers(n),
        feature_group_count=groups,
    )


def conv_weight_grad(
    g: jax.Array,
    x: jax.Array,
    w_shape: tuple[int, ...],
    stride: tuple[int, ...],
    pads: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    groups: int,
) -> jax.Array:
    """The gradient of `conv` for its kernel: ``x`` convolved with ``g`` over the batch.

    The channels of ``x`` play the batch and its batch the channels, ``g`` is the kernel (its
    batch as input channels), the dilation becomes the stride and the stride the dilation.
    """
    n = x.ndim - 2
    xt = jnp.transpose(x, (n + 1, *range(1, n + 1), 0))  # (Cin, *S, B)
    gt = jnp.transpose(g, (*range(1, n + 1), 0, n + 1))  # (*S_out, B, Cout)
    padding = []
    for i in range(n):
        window = dilation[i] * (w_shape[i] - 1) + 1
        covered = (g.shape[1 + i] - 1) * stride[i] + 1
        high = covered - x.shape[1 + i] + window - pads[i][0] - 1
        padding.append((pads[i][0], high))
    dw = jax.lax.conv_general_dilated(
        xt,
        gt,
        window_strides=dilation,
        padding=padding,
        rhs_dilation=stride,
        dimension_numbers=conv_dimension_numbers(n),
        batch_group_count=groups,
    )
    return jnp.transpose(dw, (*range(1, n + 1), 0, n + 1))  # (*k, Cin // groups, Cout)


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
    """N-d channels-last transposed convolution with PyTorch's ConvTranspose semantics.

    Output size per spatial axis: (in - 1) * s - 2 * p + d * (k - 1) + output_padding + 1.

    Weight convention: ``w`` is (*k, Cin, Cout // groups) and
    ``out[o_g, i * s + j * d - p] += x[c, i] * w[j, c, o]`` where input channel ``c`` belongs to
    group ``g = c // (Cin // groups)`` and writes output channel ``g * (Cout // groups) + o``.
    A PyTorch ConvTranspose weight (Cin, Cout // g, *k) therefore converts with
    ``transpose(2, ..., 0, 1)`` (for any ``groups``).

    Implemented as the gradient of a convolution: dilate the input by ``stride``
    (``lhs_dilation``), pad by ``d * (k - 1) - p`` (plus ``output_padding`` at the end) and
    correlate with the spatially flipped kernel.
    """
    n = x.ndim - 2
    output_padding, dilation = output_padding or (0,) * n, dilation or (1,) * n
    kernel = w.shape[:n]
    cin, cout_g = w.shape[n], w.shape[n + 1]
    cin_g = cin // groups
    # (*k, Cin, Cout // g) -> (*k, Cin // g, Cout) with output channels grouped like the input.
    w = w.reshape(*kernel, groups, cin_g, cout_g)
    w = jnp.moveaxis(w, n, n + 1)
    w = w.reshape(*kernel, cin_g, groups * cout_g)
    w = jnp.flip(w, axis=tuple(range(n)))
    pads = []
    for k, p, op, d in zip(kernel, padding, output_padding, dilation, strict=True):
        edge = d * (k - 1) - p
        pads.append((edge, edge + op))
    y = jax.lax.conv_general_dilated(
        x,
        w,
        window_strides=(1,) * n,
        padding=tuple(pads),
        lhs_dilation=tuple(stride),
        rhs_dilation=tuple(dilation),
        dimension_numbers=conv_dimension_numbers(n),
        feature_group_count=groups,
    )
    if b is not None:
        y = y + trailing(b, y.ndim)
    return y


def max_pool(
    x: jax.Array,
    *,
    window: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int | tuple[int, int], ...],
    dilation: tuple[int, ...] | None = None,
) -> jax.Array:
    """Channels-last N-d max pooling; PyTorch's MaxPool semantics (ceil_mode=False).

    ``padding`` is one int per spatial axis (both sides, with -inf) or a (low, high) pair.
    """
    windows = (1, *window, 1)
    strides = (1, *stride, 1)
    pads = ((0, 0), *((p, p) if isinstance(p, int) else (p[0], p[1]) for p in padding), (0, 0))
    dilations = (1, *(dilation or (1,) * len(window)), 1)
    out: jax.Array = jax.lax.reduce_window(
        x, -jnp.inf, jax.lax.max, windows, strides, pads, window_dilation=dilations
    )
    return out


def avg_pool(
    x: jax.Array,
    *,
    window: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int | tuple[int, int], ...],
) -> jax.Array:
    """Channels-last N-d average pooling; PyTorch's AvgPool defaults.

    count_include_pad=True: zero padding counts, every window is divided by prod(kernel).
    ``padding`` is one int per spatial axis (both sides) or a (low, high) pair.
    """
    windows = (1, *window, 1)
    strides = (1, *stride, 1)
    pads = ((0, 0), *((p, p) if isinstance(p, int) else (p[0], p[1]) for p in padding), (0, 0))
    summed: jax.Array = jax.lax.reduce_window(x, 0.0, jax.lax.add, windows, strides, pads)
    return summed / int(np.prod(window))


def global_avg_pool(x: jax.Array) -> jax.Array:
    """Mean over all spatial axes of a channels-last tensor, keeping them: (B, 1, 1, C)."""
    return jnp.mean(x, axis=tuple(range(1, x.ndim - 1)), keepdims=True)


def patches(x: jax.Array, size: int) -> jax.Array:
    """Non-overlapping size x size patches of a channels-last image (B, H, W, C).

    Returns (B, M, C*P*P) with M = (H // P) * (W // P) patches in row-major order; each patch is
    flattened in CHANNELS-FIRST order (C, P, P), so it equals the channels-first computation.
    Rows/columns beyond a multiple of P are dropped (as a stride-P convolution would).
    """
    bsz, h, w, c = x.shape
    nh, nw = h // size, w // size
    x = x[:, : nh * size, : nw * size, :]
    x = x.reshape(bsz, nh, size, nw, size, c)
    x = x.transpose(0, 1, 3, 5, 2, 4)
    return x.reshape(bsz, nh * nw, c * size * size)


def upsample_nearest(x: jax.Array, factor: int) -> jax.Array:
    """Nearest-neighbour upsampling of every spatial axis of a channels-last tensor."""
    for axis in range(1, x.ndim - 1):
        x = jnp.repeat(x, factor, axis=axis)
    return x


def upsample_linear_axis(x: jax.Array, axis: int, factor: int) -> jax.Array:
    """Linear upsampling of one axis, PyTorch's align_corners=False convention.

    Output index o samples source position max((o + 0.5) / factor - 0.5, 0), interpolating
    between floor(src) and min(floor(src) + 1, n - 1). Indices and weights are constants.
    """
    n = x.shape[axis]
    src = np.maximum((np.arange(n * factor) + 0.5) / factor - 0.5, 0.0)
    lo = np.floor(src).astype(np.int32)
    lo = np.minimum(lo, n - 1)
    hi = np.minimum(lo + 1, n - 1)
    frac = src - lo
    shape = [1] * x.ndim
    shape[axis] = n * factor
    weight = jnp.asarray(frac.reshape(shape), dtype=x.dtype)
    a = jnp.take(x, lo, axis=axis)
    b = jnp.take(x, hi, axis=axis)
    return a * (1 - weight) + b * weight


def upsample_bilinear(x: jax.Array, factor: int) -> jax.Array:
    """Bilinear upsampling of a channels-last image (B, H, W, C) by an integer factor.

    Matches PyTorch's ``Upsample(scale_factor=factor, mode="bilinear", align_corners=False)``.
    """
    x = upsample_linear_axis(x, 1, factor)
    return upsample_linear_axis(x, 2, factor)

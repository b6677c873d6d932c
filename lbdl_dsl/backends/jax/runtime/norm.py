"""Normalisations (`core/layers/norm.py`): batch, layer, group and RMS norms over the last
axes, and over one chosen axis of a tensor (ConvNeXt's channel norm on a map kept
channels-first, a layernorm over positions: ``layer_norm_at``, ``rms_norm_at``), with the scale
and shift along that axis.

Parameter layouts: batch norm ``scale``, ``bias``, state ``mean``, ``var``, all (C,); layer
norm ``scale``, ``bias`` of the normalised (trailing) shape; group norm ``scale``, ``bias``
(C,); rms norm ``scale`` (D,).
"""

import jax
import jax.numpy as jnp

from lbdl_dsl.backends.jax.runtime.tensor import trailing


def one_pass_statistics() -> bool:
    """Whether `batch_statistics` reads a batch once for its mean and variance: off a CPU (the
    module looks this up when it runs: a benchmark may replace it)."""
    return jax.default_backend() != "cpu"


def batch_statistics(x: jax.Array, axes: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """A batch's mean and biased variance over ``axes``, per channel.

    A GPU's training step of batch norms is bound by memory, and a second pass over every
    activation for the variance costs more than its arithmetic. On an H200, ResNet-50's step
    took 25.3 ms with one pass (the sums of the values and of their squares, in float32) and
    `batch_norm`'s multiply-add (in bfloat16), against 27.7 with two and the Flax peer's 26.2,
    each side in a process of its own; with this one pass and the former ``(x - mean) *
    factor + bias``, 26.5 ms against the peer's 25.4 in one process (docs/performance-gpu.md).
    On a 2-core CPU the one pass made the step slower (1.75 s against 1.62) and its compile
    too (4.6 s against 4.2), so a CPU keeps two. The one pass sums the values less each
    channel's first value, so that a mean far from zero leaves the variance its digits:
    E[x^2] - E[x]^2 in float32 loses them all at x = 10,000 + noise.
    """
    if not one_pass_statistics():
        mean = jnp.mean(x, axis=axes)
        return mean, jnp.mean(jnp.square(x - trailing(mean, x.ndim)), axis=axes)
    wide = jnp.promote_types(x.dtype, jnp.float32)
    shift = jax.lax.stop_gradient(x[(0,) * len(axes)]).astype(wide)
    d = x.astype(wide) - trailing(shift, x.ndim)
    d_mean = jnp.mean(d, axis=axes)
    var = jnp.maximum(jnp.mean(jnp.square(d), axis=axes) - jnp.square(d_mean), 0.0)
    return shift + d_mean, var


def batch_norm(
    x: jax.Array,
    scale: jax.Array | None,
    bias: jax.Array | None,
    mean: jax.Array,
    var: jax.Array,
    *,
    train: bool,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Batch norm over every axis but the last (channel) one; returns (y, new_mean, new_var).

    PyTorch's convention: in training, normalise with the batch mean and BIASED batch variance,
    and update the running statistics as ``(1 - momentum) * old + momentum * batch`` using the
    UNBIASED batch variance (the update carries no gradient). In eval mode, normalise with the
    running statistics and return them unchanged. ``scale`` / ``bias`` may be None (no affine).
    The mean, the scale and the bias are folded into a per-channel factor and shift, so that
    each value takes one multiply-add: ResNet-50's training step ran in 1.55 s against 1.65 on
    a 2-core CPU, with ``(x - mean) * factor + bias``. The multiply-add is in float32 at least:
    the factor's gradient is then a sum of g·x less the mean times a sum of g, which bfloat16
    products would round to noise where the mean is large against the deviation.
    """
    axes = tuple(range(x.ndim - 1))
    if train:
        batch_mean, batch_var = batch_statistics(x, axes)
        n = x.size // x.shape[-1]
        unbiased_var = batch_var * (n / max(n - 1, 1))
        new_mean = (1.0 - momentum) * mean + momentum * batch_mean
        new_var = (1.0 - momentum) * var + momentum * unbiased_var
        new_mean = jax.lax.stop_gradient(new_mean)
        new_var = jax.lax.stop_gradient(new_var)
        use_mean, use_var = batch_mean, batch_var
    else:
        new_mean, new_var = mean, var
        use_mean, use_var = mean, var
    factor = jax.lax.rsqrt(use_var + eps)
    if scale is not None:
        factor = factor * scale
    shift = -use_mean * factor
    if bias is not None:
        shift = shift + bias
    wide = jnp.promote_types(x.dtype, jnp.float32)
    y = x.astype(wide) * trailing(factor.astype(wide), x.ndim) + trailing(shift, x.ndim)
    # back to the input's type: the running statistics are float32 state, which would promote
    # a bfloat16 input to float32, and the next convolution would refuse the mixed types
    return y.astype(x.dtype), new_mean, new_var


def layer_norm(
    x: jax.Array,
    scale: jax.Array | None,
    bias: jax.Array | None,
    *,
    eps: float = 1e-5,
    axes: int = 1,
) -> jax.Array:
    """Layer norm over the last ``axes`` axes (PyTorch's LayerNorm: biased variance).

    ``scale`` and ``bias`` have the normalised shape ``x.shape[-axes:]``; either may be None.
    """
    y = normalized(x, tuple(range(x.ndim - axes, x.ndim)), eps)
    if scale is not None:
        y = y * trailing(scale, y.ndim)
    if bias is not None:
        y = y + trailing(bias, y.ndim)
    return y


def normalized(x: jax.Array, axes: tuple[int, ...], eps: float, centred: bool = True) -> jax.Array:
    """``x`` over ``axes`` less its mean and divided by its root mean square plus ``eps``: the
    part of every norm that has no parameters (not ``centred``: RMS norm's, no mean taken).

    Its tangent is written out, r·(c − y·mean(c·y)) with r = 1 / sqrt(var + eps) and c the
    tangent less its mean (itself when not centred), where JAX's own rule steps through the
    mean, the variance and ``rsqrt`` and transposes each: GPT-2 small's training step on a
    CPU then has 114 distinct kernels against 117 and 18 % fewer operations in them, and
    compiles 5 % faster at 12 blocks and 11 % at one, for the same step time
    (docs/performance.md). Forward mode, vmap and higher orders go through it as through
    any JAX function.
    """

    def value(x: jax.Array) -> jax.Array:
        return standardised(x, axes, eps, centred)[0]

    def tangent(
        primals: tuple[jax.Array], tangents: tuple[jax.Array]
    ) -> tuple[jax.Array, jax.Array]:
        (x,), (dx,) = primals, tangents
        y, r = standardised(x, axes, eps, centred)
        if centred:
            dx = dx - jnp.mean(dx, axis=axes, keepdims=True)
        return y, r * (dx - y * jnp.mean(dx * y, axis=axes, keepdims=True))

    rule = jax.custom_jvp(value)
    rule.defjvp(tangent)
    return rule(x)


def standardised(
    x: jax.Array, axes: tuple[int, ...], eps: float, centred: bool
) -> tuple[jax.Array, jax.Array]:
    """(`normalized`'s output, the factor r it multiplies by), computed as the norms always
    have: the mean, then the biased variance of what is left, then ``rsqrt``."""
    if centred:
        x = x - jnp.mean(x, axis=axes, keepdims=True)
    r = jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True) + eps)
    return x * r, r


def group_norm(
    x: jax.Array, scale: jax.Array | None, bias: jax.Array | None, *, groups: int, eps: float = 1e-5
) -> jax.Array:
    """Channels-last group norm (B, *S, C); PyTorch's GroupNorm.

    Channels are split into ``groups`` contiguous groups; each (sample, group) is normalised
    over its channels and all spatial positions (biased variance). ``scale``/``bias`` are (C,).
    """
    c = x.shape[-1]
    xg = x.reshape(*x.shape[:-1], groups, c // groups)
    y = normalized(xg, (*range(1, x.ndim - 1), x.ndim), eps).reshape(x.shape)
    if scale is not None:
        y = y * trailing(scale, y.ndim)
    if bias is not None:
        y = y + trailing(bias, y.ndim)
    return y


def rms_norm(x: jax.Array, scale: jax.Array | None, *, eps: float = 1e-6) -> jax.Array:
    """RMS norm over the last axis: x / sqrt(mean(x**2) + eps) * scale (PyTorch's RMSNorm),
    normalised in at least float32 and scaled in x's type, as LLaMA's is under bfloat16."""
    xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))  # at least float32
    y = normalized(xf, (-1,), eps, centred=False).astype(x.dtype)
    if scale is not None:
        y = y * trailing(scale, y.ndim)
    return y


def along(v: jax.Array, axis: int, ndim: int) -> jax.Array:
    """A vector shaped to broadcast along ``axis`` of an ndim array (its callers leave out a
    missing scale or shift themselves)."""
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return jnp.reshape(v, shape)


def layer_norm_at(
    x: jax.Array, scale: jax.Array | None, bias: jax.Array | None, *, axis: int, eps: float = 1e-5
) -> jax.Array:
    """Layer norm of ``x`` over ``axis`` alone (biased variance, as PyTorch's LayerNorm);
    ``scale`` and ``bias`` are vectors along that axis, or None."""
    y = normalized(x, (axis,), eps)
    if scale is not None:
        y = y * along(scale, axis, x.ndim)
    if bias is not None:
        y = y + along(bias, axis, x.ndim)
    return y


def rms_norm_at(
    x: jax.Array, scale: jax.Array | None, *, axis: int, eps: float = 1e-6
) -> jax.Array:
    """RMS norm of ``x`` over ``axis`` alone: x / sqrt(mean(x**2) + eps) * scale."""
    y = normalized(x, (axis,), eps, centred=False)
    if scale is not None:
        y = y * along(scale, axis, x.ndim)
    return y

"""Normalisations over one chosen axis of a tensor (ConvNeXt's channel norm on a map kept
channels-first, a layernorm over positions): what ``layer_norm`` and ``rms_norm`` of the
runtime do on the last axes, on any one axis, with the scale and shift along that axis."""

import jax
import jax.numpy as jnp

from lbdl_dsl.backends.jax.runtime import normalized


def along(v, axis: int, ndim: int):
    """A vector shaped to broadcast along ``axis`` of an ndim array, or None for None."""
    if v is None:
        return None
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return jnp.reshape(v, shape)


def layer_norm_at(x: jax.Array, scale, bias, *, axis: int, eps: float = 1e-5) -> jax.Array:
    """Layer norm of ``x`` over ``axis`` alone (biased variance, as PyTorch's LayerNorm);
    ``scale`` and ``bias`` are vectors along that axis, or None."""
    y = normalized(x, (axis,), eps)
    if scale is not None:
        y = y * along(scale, axis, x.ndim)
    if bias is not None:
        y = y + along(bias, axis, x.ndim)
    return y


def rms_norm_at(x: jax.Array, scale, *, axis: int, eps: float = 1e-6) -> jax.Array:
    """RMS norm of ``x`` over ``axis`` alone: x / sqrt(mean(x**2) + eps) * scale."""
    y = normalized(x, (axis,), eps, centred=False)
    if scale is not None:
        y = y * along(scale, axis, x.ndim)
    return y

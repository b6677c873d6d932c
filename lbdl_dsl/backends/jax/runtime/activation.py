"""Activations and dropout (`core/layers/activation.py`): one function each, on any layout."""

import jax
import jax.numpy as jnp


def relu(x: jax.Array) -> jax.Array:
    """max(x, 0)."""
    return jax.nn.relu(x)


def tanh(x: jax.Array) -> jax.Array:
    """Hyperbolic tangent."""
    return jnp.tanh(x)


def sigmoid(x: jax.Array) -> jax.Array:
    """Logistic sigmoid 1 / (1 + exp(-x))."""
    return jax.nn.sigmoid(x)


def leaky_relu(x: jax.Array, slope: float = 0.01) -> jax.Array:
    """x if x >= 0 else slope * x (PyTorch's negative_slope)."""
    return jnp.where(x >= 0, x, slope * x)


def gelu(x: jax.Array, approximate: bool = False) -> jax.Array:
    """GELU; exact (erf) form unless ``approximate`` (PyTorch's approximate="tanh")."""
    return jax.nn.gelu(x, approximate=approximate)


def silu(x: jax.Array) -> jax.Array:
    """x * sigmoid(x) (a.k.a. swish)."""
    return jax.nn.silu(x)


def softmax(x: jax.Array, axis: int = -1) -> jax.Array:
    """Numerically stable softmax along ``axis``."""
    return jax.nn.softmax(x, axis=axis)


def dropout_mask_apply(
    x: jax.Array, p: float, key: jax.Array | None, mask_shape: tuple[int, ...]
) -> jax.Array:
    """Inverted dropout with a keep-mask of ``mask_shape`` broadcast against ``x``."""
    if key is None:
        raise ValueError("dropout in training mode needs a PRNG key, but key is None")
    if isinstance(p, (int, float)) and p >= 1.0:
        return jnp.zeros_like(x)
    keep = jax.random.bernoulli(key, 1.0 - p, mask_shape)
    return jnp.where(keep, x / (1.0 - p), jnp.zeros_like(x))


def dropout(x: jax.Array, p: float, *, train: bool, key: jax.Array | None) -> jax.Array:
    """Element-wise inverted dropout (PyTorch's Dropout): kept values are scaled by 1/(1-p).

    Identity when not training or p == 0. The same key gives the same mask.
    """
    if not train or (isinstance(p, (int, float)) and p == 0):  # p traced: a copy's rate
        return x
    return dropout_mask_apply(x, p, key, x.shape)


def dropout_weights(weights: jax.Array, p: float, train: bool, key: jax.Array | None) -> jax.Array:
    """Dropout of attention weights (`attention` names its rate ``dropout``)."""
    return dropout(weights, p, train=train, key=key)


def dropout_channels(x: jax.Array, p: float, *, train: bool, key: jax.Array | None) -> jax.Array:
    """Channel dropout (PyTorch's Dropout1d/2d) on a channels-last tensor (B, *S, C).

    One Bernoulli draw per (batch, channel) zeroes whole feature maps; kept ones are scaled
    by 1/(1-p). Identity when not training or p == 0.
    """
    if not train or (isinstance(p, (int, float)) and p == 0):  # p traced: a copy's rate
        return x
    mask_shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
    return dropout_mask_apply(x, p, key, mask_shape)


def identity(x: jax.Array) -> jax.Array:
    """A named junction in a figure; no computation."""
    return x

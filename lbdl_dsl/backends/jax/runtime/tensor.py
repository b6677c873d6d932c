"""Tensor helpers of the runtime and of the tensor boxes (`core/layers/tensor.py`): a vector
shaped to broadcast over the last axes, an L2 normalisation, a VAE's reparameterised sample.
"""

import jax
import jax.numpy as jnp


def trailing(v: jax.Array, ndim: int) -> jax.Array:
    """``v`` with leading axes of size 1, to broadcast over the last axes of an ndim array.

    Written out rather than left to NumPy's implicit rank promotion, which strict JAX refuses.
    """
    return jnp.reshape(v, (1,) * (ndim - v.ndim) + v.shape)


def l2_normalize(x: jax.Array, eps: float = 1e-12) -> jax.Array:
    """Each vector of the last axis divided by its Euclidean norm (CLIP's embeddings)."""
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def reparameterize(
    mean: jax.Array, logvar: jax.Array, *, train: bool, key: jax.Array | None
) -> jax.Array:
    """A VAE's sample mean + exp(logvar / 2)·ε in training; the mean in evaluation."""
    if not train:
        return mean
    if key is None:
        raise ValueError("sampling in training needs a PRNG key: apply(..., train=True, key=k)")
    return mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape, mean.dtype)

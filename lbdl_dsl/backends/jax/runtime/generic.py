"""Runtime functions of the generic primitives: stochastic depth, a scale along one axis, a
gather by whole-number positions, the sinusoidal embedding of a diffusion step."""

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax.runtime.activation import dropout_mask_apply
from lbdl_dsl.backends.jax.runtime.norm import along


def drop_path(x: jax.Array, p: float, *, train: bool, key: jax.Array | None) -> jax.Array:
    """Stochastic depth: in training, each sample's whole tensor is zeroed with probability p
    and the others scaled by 1/(1-p) (one draw per sample); the identity otherwise."""
    if not train or (isinstance(p, (int, float)) and p == 0):  # p traced: a copy's rate
        return x
    return dropout_mask_apply(x, p, key, (x.shape[0],) + (1,) * (x.ndim - 1))


def scale_along(x: jax.Array, v: jax.Array, *, axis: int = -1) -> jax.Array:
    """``x`` times the vector ``v`` along ``axis`` (a layer scale: one factor per channel)."""
    return x * along(v.astype(x.dtype), axis, x.ndim)


def gather(x: jax.Array, index: jax.Array, *, axis: int = 0) -> jax.Array:
    """Values of each sample of ``x`` at the positions ``index`` holds along per-sample axis
    ``axis``; an index with a batch of one (a constant) serves every sample."""
    if index.shape[0] == 1:
        return jnp.take(x, index[0], axis=axis + 1)
    if x.shape[0] == 1:
        x = jnp.broadcast_to(x, (index.shape[0], *x.shape[1:]))
    return jax.vmap(lambda xs, i: jnp.take(xs, i, axis=axis))(x, index)


def timestep_embedding(
    t: jax.Array,
    dim: int,
    *,
    period: float = 10000.0,
    sin_first: bool = False,
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> jax.Array:
    """Each value of ``t`` as ``dim`` features cos(t·w_i), sin(t·w_i), w_i = period^(-i/half)
    (ADM's and DiT's order; sines first with ``sin_first``), a zero column if ``dim`` is odd;
    computed in float32 and given in the model's ``dtype``, so that a bfloat16 model stays so."""
    half = dim // 2
    freqs = np.exp(-np.log(period) * np.arange(half, dtype=np.float64) / half)
    shape = (1,) * t.ndim + (half,)  # against t with a new last axis
    args = t[..., None].astype(jnp.float32) * jnp.asarray(freqs.reshape(shape), jnp.float32)
    parts = [jnp.sin(args), jnp.cos(args)] if sin_first else [jnp.cos(args), jnp.sin(args)]
    if dim % 2:
        parts.append(jnp.zeros_like(args[..., :1]))
    return jnp.concatenate(parts, axis=-1).astype(dtype)


def token_drop(
    ids: jax.Array, p: float, null: int, *, train: bool, key: jax.Array | None
) -> jax.Array:
    """In training, each sample's tokens all become ``null`` with probability p (DiT's label
    dropout for classifier-free guidance); the identity otherwise."""
    if not train or p == 0:
        return ids
    if key is None:
        raise ValueError("token-drop in training needs a PRNG key: apply(..., train=True, key=k)")
    drop = jax.random.bernoulli(key, p, (ids.shape[0],) + (1,) * (ids.ndim - 1))
    return jnp.where(drop, jnp.asarray(null, ids.dtype), ids)

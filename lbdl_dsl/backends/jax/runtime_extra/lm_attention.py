"""Attention of the language models since 2020: rotary positions, grouped-query heads, a band.

`mha_lm` is `mha` with three options that LLaMA, Mistral and their kin need; the lowering calls
it only when one of them is on, so the classic models keep calling `mha`. Parameters are laid
out as `mha`'s except that keys and values have ``kv`` heads: wq (D, H*Dqk), wk (Dkv, KV*Dqk),
wv (Dkv, KV*Dv), wo (H*Dv, Dout); query head i reads key/value head i // (H / KV), the order of
Hugging Face's ``repeat_kv``.
"""

import jax
import jax.numpy as jnp

from lbdl_dsl.backends.jax.runtime import attention, dense, fused_attention


def rope(x: jax.Array, *, theta: float = 10000.0, fraction: float = 1.0) -> jax.Array:
    """Rotary position embedding of (B, H, T, d) in the rotate-half form, position t = 0..T-1.

    The first r = fraction·d features of each head (r even) are rotated: feature i < r/2 pairs
    with feature i + r/2 and turns by the angle t·theta^(-2i/r); the rest pass unchanged (GPT-NeoX's
    rotary_pct). Angles and products are computed in float32, the result has x's type.
    """
    t, d = x.shape[-2], x.shape[-1]
    r = int(d * fraction) // 2 * 2
    half = r // 2
    inv = 1.0 / theta ** (jnp.arange(half, dtype=jnp.float32) * 2.0 / r)
    angles = jnp.arange(t, dtype=jnp.float32)[:, None] * inv[None, :]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1).reshape(1, 1, t, r)
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1).reshape(1, 1, t, r)
    xr = x[..., :r].astype(jnp.float32)
    turned = jnp.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    y = (xr * cos + turned * sin).astype(x.dtype)
    return jnp.concatenate([y, x[..., r:]], axis=-1) if r < d else y


def window_mask(tq: int, tk: int, window: int) -> jax.Array:
    """(Tq, Tk) booleans, true where |i − j| < window: with causality, the W most recent keys
    (the query's own included), Mistral's sliding window."""
    i = jax.lax.broadcasted_iota(jnp.int32, (tq, tk), 0)
    j = jax.lax.broadcasted_iota(jnp.int32, (tq, tk), 1)
    return jnp.abs(i - j) < window  # computed in the program: no T×S constant in it


def attention_nd(
    q, k, v, mask=None, *, causal=False, dropout=0.0, train=False, key=None, bias=None, scale=None
):
    """`attention` on (B, *L, T, D) queries and (B, *L, S, D) keys and values: the leading axes
    L (heads...) flattened into one; a mask is (B, T, S) or (B, *L, T, S), true keeps; an
    additive score bias the same."""
    lead = q.shape[:-2]
    flat = [x.reshape(x.shape[0], -1, *x.shape[-2:]) for x in (q, k, v)]
    if mask is not None:
        mask = mask.reshape(mask.shape[0], -1, *mask.shape[-2:])
    if bias is not None:
        bias = bias.reshape(bias.shape[0], -1, *bias.shape[-2:])
    out = attention(
        *flat, mask, causal=causal, dropout=dropout, train=train, key=key, bias=bias, scale=scale
    )
    return out.reshape(*lead, *out.shape[-2:])


def key_mask(m: jax.Array) -> jax.Array:
    """(B, S) flags of the keys (true keeps) as a mask over (B, H, Tq, S)."""
    return m[:, None, None, :]


def mha_lm(
    x: jax.Array,
    z: jax.Array,
    p: dict,
    *,
    heads: int,
    kv: int,
    causal: bool = False,
    window: int = 0,
    theta: float = 0.0,
    fraction: float = 1.0,
    dropout: float = 0.0,
    train: bool = False,
    key=None,
    mask=None,
    bias=None,
    scale=None,
) -> jax.Array:
    """Multi-head attention with ``kv`` key/value heads (grouped-query; kv = 1: multi-query),
    rotary positions on queries and keys when ``theta`` > 0, and a sliding ``window`` when > 0;
    ``mask`` (optional) is a boolean broadcastable to (B, H, Tq, Tk), True = attend."""
    b, tq, tk = x.shape[0], x.shape[1], z.shape[1]
    q = dense(x, p["wq"], p.get("bq"))
    k = dense(z, p["wk"], p.get("bk"))
    v = dense(z, p["wv"], p.get("bv"))
    dqk = q.shape[-1] // heads
    dv = v.shape[-1] // kv
    q = q.reshape(b, tq, heads, dqk).transpose(0, 2, 1, 3)
    k = k.reshape(b, tk, kv, dqk).transpose(0, 2, 1, 3)
    v = v.reshape(b, tk, kv, dv).transpose(0, 2, 1, 3)
    if theta:
        q = rope(q, theta=theta, fraction=fraction)
        k = rope(k, theta=theta, fraction=fraction)
    if kv != heads:
        k = jnp.repeat(k, heads // kv, axis=1)
        v = jnp.repeat(v, heads // kv, axis=1)
    if window:
        band = window_mask(tq, tk, window).reshape(1, 1, tq, tk)
        mask = band if mask is None else jnp.logical_and(mask, band)
    out = None
    plain = mask is None and bias is None and scale is None
    if plain and not (train and dropout > 0.0):  # as `mha`: cuDNN's kernel on a GPU
        heads_last = [a.transpose(0, 2, 1, 3) for a in (q, k, v)]
        out = fused_attention(*heads_last, causal=causal)
    if out is None:
        out = attention(
            q,
            k,
            v,
            mask,
            causal=causal,
            dropout=dropout,
            train=train,
            key=key,
            bias=bias,
            scale=scale,
        )
        out = out.transpose(0, 2, 1, 3)
    return dense(out.reshape(b, tq, heads * dv), p["wo"], p.get("bo"))

"""Attention (`core/layers/attention.py`): scaled dot-product attention, multi-head attention
(`mha`), and the language models' attention since 2020: rotary positions, grouped-query heads,
a band.

`mha` parameters: ``wq`` (D, H*Dqk), ``wk`` (Dkv, H*Dqk), ``wv`` (Dkv, H*Dv), ``wo`` (H*Dv,
Dout), optional ``bq``, ``bk`` (H*Dqk,), ``bv`` (H*Dv,), ``bo`` (Dout,).

`mha_lm` is `mha` with three options that LLaMA, Mistral and their kin need; the lowering calls
it only when one of them is on, so the classic models keep calling `mha`. Parameters are laid
out as `mha`'s except that keys and values have ``kv`` heads: wq (D, H*Dqk), wk (Dkv, KV*Dqk),
wv (Dkv, KV*Dv), wo (H*Dv, Dout); query head i reads key/value head i // (H / KV), the order of
Hugging Face's ``repeat_kv``.
"""

from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax.runtime.activation import dropout_weights
from lbdl_dsl.backends.jax.runtime.dense import dense
from lbdl_dsl.backends.jax.runtime.norm import layer_norm, rms_norm
from lbdl_dsl.backends.jax.runtime.tensor import trailing


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None = None,
    *,
    causal: bool = False,
    dropout: float = 0.0,
    train: bool = False,
    key: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
    softcap: float = 0.0,
) -> jax.Array:
    """Scaled dot-product attention: q (B, H, Tq, Dqk), k (B, H, Tk, Dqk), v (B, H, Tk, Dv).

    ``bias`` (optional) is added to the scores before the softmax, broadcast from its last
    axes to (B, H, Tq, Tk) (T5's relative positions, ALiBi); ``scale`` replaces 1/sqrt(Dqk)
    (1.0: none, as T5); ``softcap`` c > 0 squashes the scaled scores to c·tanh(s/c) first
    (Gemma 2).

    ``mask`` is a boolean broadcastable to (B, H, Tq, Tk), True = attend (PyTorch's bool
    ``attn_mask`` convention), or None. ``causal`` keeps key j for query i iff j <= i
    (top-left aligned, as PyTorch's ``is_causal``). Scores are scaled by 1/sqrt(Dqk); masked
    scores are replaced by the dtype's most negative finite value, and where a ``mask`` is
    given, weights of masked keys are zeroed after the softmax, so that a fully masked row
    yields zeros instead of a uniform average.
    Dropout is applied to the attention weights in training mode.
    """
    tq, tk = q.shape[-2], k.shape[-2]
    factor = 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * factor
    if softcap:
        scores = softcap * jnp.tanh(scores / softcap)
    if bias is not None:
        scores = scores + jnp.broadcast_to(trailing(bias, 4), scores.shape).astype(scores.dtype)
    keep = None if mask is None else jnp.broadcast_to(trailing(mask, 4), scores.shape)
    if causal:
        tri = jnp.broadcast_to(jnp.tril(jnp.ones((tq, tk), dtype=bool)), scores.shape)
        keep = tri if keep is None else jnp.logical_and(keep, tri)
    if keep is not None:
        scores = jnp.where(keep, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores, axis=-1)
    if mask is not None and keep is not None:  # causality alone never masks a whole row
        weights = jnp.where(keep, weights, jnp.zeros_like(weights))
    weights = dropout_weights(weights, dropout, train, key)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v)


def mha(
    x: jax.Array,
    z: jax.Array,
    p: dict[str, jax.Array],
    *,
    heads: int,
    causal: bool = False,
    dropout: float = 0.0,
    train: bool = False,
    key: jax.Array | None = None,
    mask: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
    softcap: float = 0.0,
) -> jax.Array:
    """Multi-head attention: queries from x (B, Tq, D), keys/values from z (B, Tk, Dkv).

    ``p`` holds wq (D, H*Dqk), wk (Dkv, H*Dqk), wv (Dkv, H*Dv), wo (H*Dv, Dout) and optionally
    bq, bk, bv, bo. Pass ``z = x`` for self-attention. Heads are contiguous slices of the
    projected features (head h uses columns h*Dqk:(h+1)*Dqk), as in PyTorch.
    ``mask`` (optional) is a boolean broadcastable to (B, H, Tq, Tk), True = attend; ``bias``
    and ``scale`` are `attention`'s.
    """
    b, tq, tk = x.shape[0], x.shape[1], z.shape[1]
    q = dense(x, p["wq"], p.get("bq"))
    k = dense(z, p["wk"], p.get("bk"))
    v = dense(z, p["wv"], p.get("bv"))
    dqk = q.shape[-1] // heads
    dv = v.shape[-1] // heads
    q = q.reshape(b, tq, heads, dqk)
    k = k.reshape(b, tk, heads, dqk)
    v = v.reshape(b, tk, heads, dv)
    out = None
    plain = mask is None and bias is None and scale is None and not softcap
    if plain and not (train and dropout > 0.0):
        out = fused_attention(q, k, v, causal=causal)
    if out is None:
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
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
            softcap=softcap,
        )
        out = out.transpose(0, 2, 1, 3)
    return dense(out.reshape(b, tq, heads * dv), p["wo"], p.get("bo"))


def fused_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool,
    implementation: Literal["cudnn", "xla"] = "cudnn",
) -> jax.Array | None:
    """Attention by ``jax.nn.dot_product_attention``'s cuDNN kernel, which never holds the
    T×T scores in memory (flash attention): q (B, Tq, H, Dqk), k (B, Tk, H, Dqk), v (B, Tk, H,
    Dv) in, (B, Tq, H, Dv) out. None where that kernel does not run: off an NVIDIA GPU, in
    float32, or where cuDNN's own checks refuse the head size or lengths; the caller then
    computes ``attention``. On a CPU, XLA's version of the same call compiled slower and ran
    no faster than ``attention``, so it is not used there."""
    half = q.dtype in (jnp.bfloat16, jnp.float16)
    if implementation == "cudnn" and (jax.default_backend() != "gpu" or not half):
        return None
    if v.shape != k.shape or (causal and q.shape[1] != k.shape[1]):
        return None  # the call takes one head size; cuDNN aligns a causal mask its own way
    try:
        return jax.nn.dot_product_attention(
            q, k, v, is_causal=causal, implementation=implementation
        )
    except (NotImplementedError, RuntimeError):  # cuDNN's checks, made while tracing
        return None


def rope_frequencies(r: int, theta: float, scaling: tuple[Any, ...] = ()) -> jax.Array:
    """The r/2 rotary angles per position, theta^(-2i/r), in float32, rescaled for a context
    longer than pretraining's: ``("linear", s)`` divides them all by s; ``("llama3", s, low,
    high, context)`` (LLaMA 3.1) divides by s those whose wavelength 2π/ω exceeds context/low,
    keeps those under context/high, and between them mixes the two by how far it lies;
    ``("yarn", s, low, high, context, gain)`` (YaRN) mixes them linearly along the pairs
    between the one that turns ``high`` times within the context and the one that turns
    ``low`` times (rounded outward to whole pairs, as transformers does)."""
    inv = 1.0 / theta ** (jnp.arange(r // 2, dtype=jnp.float32) * 2.0 / r)
    if scaling and scaling[0] == "linear":
        inv = inv / scaling[1]
    elif scaling and scaling[0] == "yarn":  # the ramp over the pairs' indices, in Python
        s, low, high, context = scaling[1:5]
        turns = np.array([high, low], dtype=np.float64)  # the first pair ramped, the last
        at = r * np.log(context / (turns * 2 * np.pi)) / (2 * np.log(theta))
        first, last = max(int(np.floor(at[0])), 0), min(int(np.ceil(at[1])), r - 1)
        span = (last - first) or 0.001
        kept = 1.0 - jnp.clip((jnp.arange(r // 2, dtype=jnp.float32) - first) / span, 0.0, 1.0)
        inv = (1.0 - kept) * inv / s + kept * inv
    elif scaling:
        s, low, high, context = scaling[1:]
        mix = jnp.clip((context * inv / (2 * jnp.pi) - low) / (high - low), 0.0, 1.0)
        inv = (1.0 - mix) * inv / s + mix * inv
    return inv


def rope(
    x: jax.Array,
    *,
    theta: float = 10000.0,
    fraction: float = 1.0,
    scaling: tuple[Any, ...] = (),
    pos: jax.Array | int = 0,
) -> jax.Array:
    """Rotary position embedding of (B, H, t, d) in the rotate-half form, at positions
    pos..pos+t-1 (a decoding step's are after the cache's).

    The first r = fraction·d features of each head (r even) are rotated: feature i < r/2 pairs
    with feature i + r/2 and turns by the angle p·ω_i at position p (`rope_frequencies`); the
    rest pass unchanged (GPT-NeoX's rotary_pct). Under YaRN the rotated features are also
    multiplied by its factor. Angles and products are computed in float32, the result has x's
    type.
    """
    t, d = x.shape[-2], x.shape[-1]
    r = int(d * fraction) // 2 * 2
    half = r // 2
    inv = rope_frequencies(r, theta, scaling)
    angles = (pos + jnp.arange(t)).astype(jnp.float32)[:, None] * inv[None, :]
    gain = scaling[5] if scaling and scaling[0] == "yarn" else 1.0  # YaRN's, on cos and sin
    cos = gain * jnp.concatenate([jnp.cos(angles)] * 2, axis=-1).reshape(1, 1, t, r)
    sin = gain * jnp.concatenate([jnp.sin(angles)] * 2, axis=-1).reshape(1, 1, t, r)
    xr = x[..., :r].astype(jnp.float32)
    turned = jnp.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    y = (xr * cos + turned * sin).astype(x.dtype)
    return jnp.concatenate([y, x[..., r:]], axis=-1) if r < d else y


def head_norm(
    x: jax.Array, p: dict[str, jax.Array], name: str, qknorm: tuple[Any, ...]
) -> jax.Array:
    """A q/k norm (``qknorm=(kind, eps[, offset])``) of queries or keys (…, d) over a head's
    d features, with the gain ``p[name]`` (d,) that all heads share (plus the offset, Gemma
    3's 1 + w), or of a whole projection (…, heads·d) with a gain of that size (OLMo 2's):
    Qwen3's RMSNorm, normalised in float32 as `rms_norm` is, or a layer norm
    whose bias is ``p[name + "b"]``."""
    kind, eps, *offset = qknorm
    gain = p[name] + offset[0] if offset else p[name]  # Gemma 3's 1 + w
    if kind == "rmsnorm":
        return rms_norm(x, gain, eps=eps)
    return layer_norm(x, gain, p[name + "b"], eps=eps)


def window_mask(tq: int, tk: int, window: int) -> jax.Array:
    """(Tq, Tk) booleans, true where |i − j| < window: with causality, the W most recent keys
    (the query's own included), Mistral's sliding window."""
    i = jax.lax.broadcasted_iota(jnp.int32, (tq, tk), 0)
    j = jax.lax.broadcasted_iota(jnp.int32, (tq, tk), 1)
    return jnp.abs(i - j) < window  # computed in the program: no T×S constant in it


def attention_nd(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None = None,
    *,
    causal: bool = False,
    dropout: float = 0.0,
    train: bool = False,
    key: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
) -> jax.Array:
    """`attention` on (B, *L, T, D) queries and (B, *L, S, D) keys and values: the leading axes
    L (heads...) flattened into one; a mask is (B, T, S) or (B, *L, T, S), true keeps; an
    additive score bias the same."""
    lead = q.shape[:-2]
    fq, fk, fv = (x.reshape(x.shape[0], -1, *x.shape[-2:]) for x in (q, k, v))
    if mask is not None:
        mask = mask.reshape(mask.shape[0], -1, *mask.shape[-2:])
    if bias is not None:
        bias = bias.reshape(bias.shape[0], -1, *bias.shape[-2:])
    out = attention(
        fq,
        fk,
        fv,
        mask,
        causal=causal,
        dropout=dropout,
        train=train,
        key=key,
        bias=bias,
        scale=scale,
    )
    return out.reshape(*lead, *out.shape[-2:])


def key_mask(m: jax.Array) -> jax.Array:
    """(B, S) flags of the keys (true keeps) as a mask over (B, H, Tq, S)."""
    return m[:, None, None, :]


def mha_lm(
    x: jax.Array,
    z: jax.Array,
    p: dict[str, jax.Array],
    *,
    heads: int,
    kv: int,
    causal: bool = False,
    window: int = 0,
    theta: float = 0.0,
    fraction: float = 1.0,
    scaling: tuple[Any, ...] = (),
    dropout: float = 0.0,
    train: bool = False,
    key: jax.Array | None = None,
    mask: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
    qknorm: tuple[Any, ...] = (),
    softcap: float = 0.0,
    qkall: bool = False,
    clip: float = 0.0,
) -> jax.Array:
    """Multi-head attention with ``kv`` key/value heads (grouped-query; kv = 1: multi-query),
    rotary positions on queries and keys when ``theta`` > 0, and a sliding ``window`` when > 0;
    ``mask`` (optional) is a boolean broadcastable to (B, H, Tq, Tk), True = attend;
    ``qknorm`` normalises each head's queries and keys first (`head_norm`), or with ``qkall``
    the whole projections at once (OLMo 2); ``clip`` clamps the three projections to
    [-clip, clip] (OLMo's clip_qkv)."""
    b, tq, tk = x.shape[0], x.shape[1], z.shape[1]
    q = dense(x, p["wq"], p.get("bq"))
    k = dense(z, p["wk"], p.get("bk"))
    v = dense(z, p["wv"], p.get("bv"))
    if clip:
        q, k, v = (jnp.clip(t, -clip, clip) for t in (q, k, v))
    if qknorm and qkall:
        q, k = head_norm(q, p, "qn", qknorm), head_norm(k, p, "kn", qknorm)
    dqk = q.shape[-1] // heads
    dv = v.shape[-1] // kv
    q = q.reshape(b, tq, heads, dqk).transpose(0, 2, 1, 3)
    k = k.reshape(b, tk, kv, dqk).transpose(0, 2, 1, 3)
    v = v.reshape(b, tk, kv, dv).transpose(0, 2, 1, 3)
    if qknorm and not qkall:
        q, k = head_norm(q, p, "qn", qknorm), head_norm(k, p, "kn", qknorm)
    if theta:
        q = rope(q, theta=theta, fraction=fraction, scaling=scaling)
        k = rope(k, theta=theta, fraction=fraction, scaling=scaling)
    if kv != heads:
        k = jnp.repeat(k, heads // kv, axis=1)
        v = jnp.repeat(v, heads // kv, axis=1)
    if window:
        band = window_mask(tq, tk, window).reshape(1, 1, tq, tk)
        mask = band if mask is None else jnp.logical_and(mask, band)
    out = None
    plain = mask is None and bias is None and scale is None and not softcap
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
            softcap=softcap,
        )
        out = out.transpose(0, 2, 1, 3)
    return dense(out.reshape(b, tq, heads * dv), p["wo"], p.get("bo"))

"""Decoding a few tokens at a time: the runtime of a decoding module's boxes (`--emit py` of a
model for `lbdl generate`, `backends/jax/decode.py`).

The module's ``apply`` reads tokens at positions ``pos`` to ``pos + t - 1`` (a prefill: the
prompt, pos = 0; then one token per step) with each box's cache in its state: a causal
attention's keys and values, a recurrent layer's carry. Each function returns its output and
its cache updated, so the prefill and the one-token step are the same function, compiled once
per shape.

An attention's cache is a ring of S slots, (B, KV, S, d): the kv heads only under grouped-query
attention, S = the window under a sliding window, else the context. Position p lives in slot
p mod S; the new tokens attend to the cache (what it held before this step) and to each other,
in one softmax over both; then the last min(t, S) of them are written to their slots.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax.runtime.attention import head_norm, rope
from lbdl_dsl.backends.jax.runtime.dense import dense, sinusoidal_positions
from lbdl_dsl.backends.jax.runtime.tensor import trailing


def dense_rows(x: jax.Array, w: jax.Array, b: jax.Array | None = None) -> jax.Array:
    """x @ w.T (+ b) for a weight stored (Dout, Din), such as an embedding table tied to an
    output layer: the product w · xᵀ over the rows of x (…, Din), transposed back. The same
    sums as `dense` of ``w.T``; XLA:CPU then reads ``w`` where it lies, where for ``x @ w.T``
    of one row it copies the transposed table first (GPT-2 small's step: 154 MB more written
    and read, about a fifth of the step)."""
    rows = x.reshape(-1, x.shape[-1])
    y = jnp.matmul(w, rows.T).T.reshape(*x.shape[:-1], w.shape[0])
    if b is not None:
        y = y + trailing(b, y.ndim)
    return y


def add_positions_at(x: jax.Array, *, pos: jax.Array | int, context: int) -> jax.Array:
    """x (B, t, D) + the sinusoidal encodings of positions pos..pos+t-1: rows of the same
    float64 table `add_positions` uses, made for the ``context`` positions of the cache."""
    table = sinusoidal_positions(context, x.shape[-1], x.dtype)
    return x + jax.lax.dynamic_slice_in_dim(table, pos, x.shape[-2], axis=0)[None]


def add_learned_positions_at(x: jax.Array, table: jax.Array, *, pos: jax.Array | int) -> jax.Array:
    """x (B, t, D) + rows pos..pos+t-1 of a learned table (Tmax, D)."""
    rows = jax.lax.dynamic_slice_in_dim(table, pos, x.shape[-2], axis=0)
    return x + rows[None].astype(x.dtype)


def ring_write(cache: jax.Array, new: jax.Array, pos: jax.Array | int) -> jax.Array:
    """Write the (B, KV, t, d) entries of positions pos..pos+t-1 into a ring (B, KV, S, d):
    position p to slot p mod S, only the last S of them when t > S."""
    s, t = cache.shape[2], new.shape[2]
    m = min(t, s)
    new = new[:, :, t - m :].astype(cache.dtype)
    if m == 1:  # one token: one slot, written in place
        return jax.lax.dynamic_update_slice_in_dim(cache, new, jnp.mod(pos + t - 1, s), axis=2)
    if isinstance(pos, int) and (pos + t - m) % s + m <= s:  # known slots in a row: one block
        return jax.lax.dynamic_update_slice_in_dim(cache, new, (pos + t - m) % s, axis=2)
    slots = jnp.mod(pos + t - m + jnp.arange(m), s)
    return cache.at[:, :, slots].set(new)


def capped(scores: jax.Array, softcap: float) -> jax.Array:
    """The scores squashed to c·tanh(s/c) where a cap c is given (Gemma 2), else as they are."""
    return softcap * jnp.tanh(scores / softcap) if softcap else scores


def scores_among(
    qg: jax.Array, k: jax.Array, scale: float, window: int, softcap: float = 0.0
) -> tuple[jax.Array, jax.Array]:
    """Grouped queries qg (B, KV, G, t, dk) against keys (B, KV, t, dk) at the same t
    positions: the scores (capped by ``softcap``), and which of them a causal attention keeps
    (within the window if any). Only the positions' differences matter, so the first may be
    any."""
    t = qg.shape[-2]
    scores = capped(jnp.einsum("bkgtd,bkud->bkgtu", qg, k) / scale, softcap)
    at = jnp.arange(t)
    keep = at[None, :] <= at[:, None]
    if window:
        keep = keep & (at[:, None] - at[None, :] < window)
    return scores, keep


def causal_attention(
    qg: jax.Array, k: jax.Array, v: jax.Array, scale: float, window: int, softcap: float = 0.0
) -> jax.Array:
    """`cached_attention` with an empty cache: the new positions among themselves."""
    scores, keep = scores_among(qg, k, scale, window, softcap)
    weights = jax.nn.softmax(jnp.where(keep, scores, jnp.finfo(scores.dtype).min), axis=-1)
    return jnp.einsum("bkgtu,bkud->bkgtd", weights, v)


def cached_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    ck: jax.Array,
    cv: jax.Array,
    pos: jax.Array | int,
    *,
    window: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
) -> jax.Array:
    """Queries q (B, H, t, dk) at positions pos.. over the ring (ck, cv) (B, KV, S, d), which
    holds the positions before pos, and over the new keys and values k, v (B, KV, t, d): one
    softmax over both, causal, within the window if any, the scores multiplied by ``scale``
    (default 1/sqrt(dk), as `attention`'s) and capped by ``softcap``. Returns (B, H, t, dv).

    A prefill into a fresh cache (``pos`` the Python int 0, `Decoder.run`) reads the new keys
    alone: the ring holds nothing yet, and reading its S masked slots was two thirds of GPT-2
    small's attention for a 128-token prompt in a cache of 256."""
    b, h, t, dk = q.shape
    kv, s = ck.shape[1], ck.shape[2]
    qg = q.reshape(b, kv, h // kv, t, dk)
    scale = float(np.sqrt(dk)) if scale is None else 1.0 / float(scale)  # now a divisor
    if isinstance(pos, int) and pos == 0:
        return causal_attention(qg, k, v, scale, window, softcap).reshape(b, h, t, -1)
    ck, cv = ck.astype(q.dtype), cv.astype(q.dtype)
    old = capped(jnp.einsum("bkgtd,bksd->bkgts", qg, ck) / scale, softcap)
    new, keep_new = scores_among(qg, k, scale, window, softcap)
    at = pos + jnp.arange(t)  # the queries' positions
    held = pos - 1 - jnp.mod(pos - 1 - jnp.arange(s), s)  # the position in each slot (< 0: none)
    keep_old = jnp.broadcast_to(held[None, :] >= 0, (t, s))
    if window:
        keep_old = keep_old & (at[:, None] - held[None, :] < window)
    scores = jnp.concatenate([old, new], axis=-1)
    keep = jnp.concatenate([keep_old, keep_new], axis=-1)
    scores = jnp.where(keep, scores, jnp.finfo(scores.dtype).min)
    weights = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bkgts,bksd->bkgtd", weights[..., :s], cv)
    out = out + jnp.einsum("bkgtu,bkud->bkgtd", weights[..., s:], v)
    return out.reshape(b, h, t, -1)


def mha_step(
    x: jax.Array,
    p: dict[str, jax.Array],
    ck: jax.Array,
    cv: jax.Array,
    *,
    pos: jax.Array | int,
    heads: int,
    kv: int,
    window: int = 0,
    theta: float = 0.0,
    fraction: float = 1.0,
    scaling: tuple[Any, ...] = (),
    scale: float | None = None,
    qknorm: tuple[Any, ...] = (),
    softcap: float = 0.0,
    qkall: bool = False,
    clip: float = 0.0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Causal self-attention (`mha`, `mha_lm`) of x (B, t, D) at positions pos.., with its
    cache of keys and values; returns (output (B, t, out), keys, values) with the cache
    updated."""
    b, t = x.shape[0], x.shape[1]
    if "wqkv_rows" in p:  # the three projections in one product (`decode_weights`)
        qkv = dense_rows(x, p["wqkv_rows"], p.get("bqkv"))
        d = qkv.shape[-1] // (heads + 2 * kv)  # a head's keys as wide as its values
        q, k = qkv[..., : heads * d], qkv[..., heads * d : (heads + kv) * d]
        v = qkv[..., (heads + kv) * d :]
    else:
        q = dense(x, p["wq"], p.get("bq"))
        k = dense(x, p["wk"], p.get("bk"))
        v = dense(x, p["wv"], p.get("bv"))
    if clip:  # OLMo's clip_qkv
        q, k, v = (jnp.clip(t, -clip, clip) for t in (q, k, v))
    if qknorm and qkall:  # the whole projections (OLMo 2)
        q, k = head_norm(q, p, "qn", qknorm), head_norm(k, p, "kn", qknorm)
    dk = q.shape[-1] // heads
    dv = v.shape[-1] // kv
    q = q.reshape(b, t, heads, dk).transpose(0, 2, 1, 3)
    k = k.reshape(b, t, kv, dk).transpose(0, 2, 1, 3)
    v = v.reshape(b, t, kv, dv).transpose(0, 2, 1, 3)
    if qknorm and not qkall:
        q, k = head_norm(q, p, "qn", qknorm), head_norm(k, p, "kn", qknorm)
    if theta:
        q = rope(q, theta=theta, fraction=fraction, scaling=scaling, pos=pos)
        k = rope(k, theta=theta, fraction=fraction, scaling=scaling, pos=pos)
    out = cached_attention(q, k, v, ck, cv, pos, window=window, scale=scale, softcap=softcap)
    y = dense_step(out.transpose(0, 2, 1, 3).reshape(b, t, heads * dv), p, "wo", "bo")
    return y, ring_write(ck, k, pos), ring_write(cv, v, pos)


def dense_step(x: jax.Array, p: dict[str, jax.Array], w: str = "w", b: str = "b") -> jax.Array:
    """`dense` of weight ``p[w]`` in a decoding module, by rows where `Decoder.split` laid it
    out so (``p[w + "_rows"]``, (Dout, Din): `decode_weights`)."""
    if w + "_rows" in p:
        return dense_rows(x, p[w + "_rows"], p.get(b))
    return dense(x, p[w], p.get(b))


def recurrent_from(
    x: jax.Array, p: dict[str, jax.Array], carry: tuple[jax.Array, ...], *, kind: str
) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """`rnn`, `lstm` or `gru` (``kind``) of x (B, t, D) from the carry a previous step left
    ((h,) or, for an LSTM, (h, c)); returns (all hidden states (B, t, Hd), the new carry)."""
    w_hh, b_hh = p["w_hh"], p.get("b_hh")
    xs = jnp.swapaxes(dense(x, p["w_ih"], p.get("b_ih")), 0, 1)

    def step(
        carry: tuple[jax.Array, ...], xi: jax.Array
    ) -> tuple[tuple[jax.Array, ...], jax.Array]:
        h = carry[0]
        hh = dense(h, w_hh, b_hh)
        if kind == "rnn":
            h = jnp.tanh(xi + hh)
            return (h,), h
        if kind == "lstm":
            i, f, g, o = jnp.split(xi + hh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * carry[1] + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        xr, xz, xn = jnp.split(xi, 3, axis=-1)
        hr, hz, hn = jnp.split(hh, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        h = (1 - z) * jnp.tanh(xn + r * hn) + z * h
        return (h,), h

    carry = tuple(c.astype(xs.dtype) for c in carry)
    carry, hs = jax.lax.scan(step, carry, xs)
    return jnp.swapaxes(hs, 0, 1), carry


def each_layer(
    step: Callable[[jax.Array, Any], tuple[jax.Array, Any]], x: jax.Array, xs: Any, length: int
) -> tuple[jax.Array, Any]:
    """`unrolled` for a decoding module, whose caller split each stacked weight and each
    stacked cache into a list of its layers (`Decoder.split`, `Decoder.init_cache`): the step
    reads layer i's arrays as they are, where a slice of the stack is a copy on XLA:CPU, and
    each layer's new cache is returned in a list again, where stacking them would copy every
    layer's cache at every step (GPT-2 small: 19 MB a token, and XLA:CPU copied the stack
    before slicing it too). An array still stacked is sliced, and its new states stacked."""
    is_list: Callable[[Any], bool] = lambda a: isinstance(a, list)  # noqa: E731
    ys: list[Any] = []
    for i in range(length):
        pick = jax.tree.map(lambda a, i=i: a[i], xs, is_leaf=is_list)
        x, y = step(x, pick)
        ys.append(y)
    if not ys or ys[0] is None:
        return x, None
    shape = jax.tree.structure(ys[0])
    # the input the new states come from (the state part of xs): lists stay lists
    like = [c for c in (xs if isinstance(xs, tuple) else (xs,)) if _same(c, shape, is_list)]
    if like:
        return x, jax.tree.map(
            lambda t, *a: list(a) if is_list(t) else jnp.stack(a), like[0], *ys, is_leaf=is_list
        )
    return x, jax.tree.map(lambda *a: jnp.stack(a), *ys)


def _same(tree: Any, shape: Any, is_leaf: Callable[[Any], bool]) -> bool:
    """Whether ``tree``, lists as leaves, has the structure ``shape``."""
    return bool(jax.tree.structure(tree, is_leaf=is_leaf) == shape)

"""Dense, embedding and recurrent layers (`core/layers/dense.py`): a matrix product, token and
position embeddings, ViT's class token, Elman RNN, LSTM and GRU in PyTorch's gate order.

Parameter layouts: dense ``w`` (Din, Dout), ``b`` (Dout,); embed ``table`` (N, D); learned
positions ``table`` (Tmax, D); gated feed-forward (ffw act=swiglu) ``gate/w``, ``up/w`` (D, F),
``down/w`` (F, D); rnn / lstm / gru ``w_ih`` (D, G*Hd), ``w_hh`` (Hd, G*Hd), ``b_ih``, ``b_hh``
(G*Hd,) with G = 1, 4 (gates i, f, g, o) or 3 (gates r, z, n).
"""

import jax
import jax.numpy as jnp
import numpy as np

from lbdl_dsl.backends.jax.runtime.tensor import trailing


def dense(x: jax.Array, w: jax.Array, b: jax.Array | None = None) -> jax.Array:
    """x @ w (+ b) over the last axis; ``w`` is (Din, Dout), i.e. PyTorch's weight transposed."""
    y = jnp.matmul(x, w)
    if b is not None:
        y = y + trailing(b, y.ndim)
    return y


def embed(ids: jax.Array, table: jax.Array) -> jax.Array:
    """Look up rows of ``table`` (N, D) for integer ``ids`` of any shape -> (*ids.shape, D)."""
    return jnp.take(table, ids, axis=0)


def sinusoidal_positions(T: int, D: int, dtype: jax.typing.DTypeLike) -> jax.Array:
    """Transformer sinusoidal encodings (T, D), computed once as a constant.

    PE[t, 2i] = sin(t / 10000^(2i/D)), PE[t, 2i+1] = cos(t / 10000^(2i/D)).
    """
    pos = np.arange(T, dtype=np.float64)[:, None]
    even = np.arange(0, D, 2, dtype=np.float64)
    angle = pos / np.power(10000.0, even / D)
    pe = np.zeros((T, D), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : D // 2])
    return jnp.asarray(pe, dtype=dtype)


def add_positions(x: jax.Array) -> jax.Array:
    """x (B, T, D) + sinusoidal encodings (T, D)."""
    return x + sinusoidal_positions(x.shape[-2], x.shape[-1], x.dtype)[None]


def add_learned_positions(x: jax.Array, table: jax.Array) -> jax.Array:
    """x (B, T, D) + table[:T], where ``table`` is (Tmax, D) with Tmax >= T."""
    return x + table[None, : x.shape[-2]].astype(x.dtype)


def rnn_inputs(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """Input projections for all time steps, time-major: (T, B, G*Hd) = x @ w_ih + b_ih."""
    xi = dense(x, p["w_ih"], p.get("b_ih"))
    return jnp.swapaxes(xi, 0, 1)


def rnn(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """Elman RNN (PyTorch's nn.RNN, tanh): h_t = tanh(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh).

    x (B, T, D) -> all hidden states (B, T, Hd); the initial state is zero.
    """
    w_hh, b_hh = p["w_hh"], p.get("b_hh")
    hd = w_hh.shape[0]

    def step(h: jax.Array, xi: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jnp.tanh(xi + dense(h, w_hh, b_hh))
        return h, h

    xs = rnn_inputs(x, p)
    h0 = jnp.zeros((x.shape[0], hd), dtype=jnp.result_type(xs, w_hh))
    _, hs = jax.lax.scan(step, h0, xs)
    return jnp.swapaxes(hs, 0, 1)


def lstm(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """LSTM (PyTorch's nn.LSTM, gate order i, f, g, o).

    i, f, o = sigmoid(...), g = tanh(...), c_t = f * c_{t-1} + i * g, h_t = o * tanh(c_t).
    x (B, T, D) -> all hidden states (B, T, Hd); initial h and c are zero.
    """
    w_hh, b_hh = p["w_hh"], p.get("b_hh")
    hd = w_hh.shape[0]

    def step(
        carry: tuple[jax.Array, jax.Array], xi: jax.Array
    ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
        h, c = carry
        gates = xi + dense(h, w_hh, b_hh)
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    xs = rnn_inputs(x, p)
    zeros = jnp.zeros((x.shape[0], hd), dtype=jnp.result_type(xs, w_hh))
    _, hs = jax.lax.scan(step, (zeros, zeros), xs)
    return jnp.swapaxes(hs, 0, 1)


def gru(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """GRU (PyTorch's nn.GRU, gate order r, z, n).

    r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z likewise,
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h_t = (1 - z) * n + z * h_{t-1}.
    x (B, T, D) -> all hidden states (B, T, Hd); the initial state is zero.
    """
    w_hh, b_hh = p["w_hh"], p.get("b_hh")
    hd = w_hh.shape[0]

    def step(h: jax.Array, xi: jax.Array) -> tuple[jax.Array, jax.Array]:
        hh = dense(h, w_hh, b_hh)
        xr, xz, xn = jnp.split(xi, 3, axis=-1)
        hr, hz, hn = jnp.split(hh, 3, axis=-1)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        return h, h

    xs = rnn_inputs(x, p)
    h0 = jnp.zeros((x.shape[0], hd), dtype=jnp.result_type(xs, w_hh))
    _, hs = jax.lax.scan(step, h0, xs)
    return jnp.swapaxes(hs, 0, 1)


def prepend_token(x: jax.Array, e0: jax.Array) -> jax.Array:
    """ViT's class token: one trainable vector concatenated in front of each sequence."""
    token = jnp.broadcast_to(e0.astype(x.dtype), (x.shape[0], 1, x.shape[-1]))
    return jnp.concatenate([token, x], axis=1)

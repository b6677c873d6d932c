"""Linear recurrences and Mamba's selective state space (`core/layers/ssm.py`).

A first-order linear recurrence h_t = a_t ⊙ h_{t−1} + b_t is associative in the pairs (a, b),
so it is computed by ``jax.lax.associative_scan`` in O(log T) steps of parallel work, what
Mamba's hardware-aware scan does on a GPU; ``sequential=True`` runs the same recurrence one
position at a time with ``jax.lax.scan``, the reference the tests compare with.
"""

import jax
import jax.numpy as jnp

from lbdl_dsl.backends.jax.runtime.activation import silu
from lbdl_dsl.backends.jax.runtime.dense import dense
from lbdl_dsl.backends.jax.runtime.tensor import trailing


def linear_recurrence(
    a: jax.Array, b: jax.Array, *, axis: int = 1, sequential: bool = False
) -> jax.Array:
    """h_t = a_t * h_{t-1} + b_t along ``axis`` (h_{-1} = 0), for a and b of one shape."""
    if sequential:
        a_t, b_t = jnp.moveaxis(a, axis, 0), jnp.moveaxis(b, axis, 0)

        def step(h: jax.Array, ab: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            h = ab[0] * h + ab[1]
            return h, h

        _, hs = jax.lax.scan(step, jnp.zeros_like(b_t[0]), (a_t, b_t))
        return jnp.moveaxis(hs, 0, axis)

    def combine(
        first: tuple[jax.Array, jax.Array], second: tuple[jax.Array, jax.Array]
    ) -> tuple[jax.Array, jax.Array]:
        return first[0] * second[0], second[0] * first[1] + second[1]

    h: jax.Array = jax.lax.associative_scan(combine, (a, b), axis=axis)[1]
    return h


def causal_depthwise_conv(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    """Each channel of x (B, T, E) convolved along T with its own k taps w (k, E), padded on
    the left only, so position t sees t-k+1..t (Mamba's conv1d, groups=E)."""
    k, t = w.shape[0], x.shape[1]
    padded = jnp.pad(x, ((0, 0), (k - 1, 0), (0, 0)))
    out = sum(padded[:, i : i + t] * trailing(w[i], 3) for i in range(k))
    return out + trailing(b, 3)


def selective_scan(
    x: jax.Array,
    dt: jax.Array,
    a: jax.Array,
    bm: jax.Array,
    cm: jax.Array,
    d: jax.Array,
    *,
    sequential: bool = False,
) -> jax.Array:
    """Mamba's S6: x, dt (B, T, E); a (E, N); bm, cm (B, T, N); d (E). The state of channel e
    evolves as h_t = exp(dt_t·a) ⊙ h_{t-1} + dt_t·B_t·x_t, and y_t = C_t·h_t + d·x_t."""
    decay = jnp.exp(dt[..., None] * trailing(a, 4))  # (B, T, E, N)
    drive = (dt * x)[..., None] * bm[:, :, None, :]
    h = linear_recurrence(decay, drive, axis=1, sequential=sequential)
    return jnp.einsum("bten,btn->bte", h, cm) + x * trailing(d, 3)


def mamba_mixer(
    x: jax.Array, p: dict[str, jax.Array], *, state: int, rank: int, sequential: bool = False
) -> jax.Array:
    """Mamba's block (Gu & Dao 2023, Fig. 3) on x (B, T, D): in_proj to x and the gate z, the
    causal depthwise conv and silu on x, Δ, B and C projected from x (Δ through dt_proj and
    softplus), the selective scan with A = −exp(A_log), the output gated by silu(z), out_proj."""
    xz = dense(x, p["in_proj"])
    xs, z = jnp.split(xz, 2, axis=-1)
    xs = silu(causal_depthwise_conv(xs, p["conv"], p["conv_bias"]))
    dbc = dense(xs, p["x_proj"])
    dt, bm, cm = jnp.split(dbc, [rank, rank + state], axis=-1)
    dt = jax.nn.softplus(dense(dt, p["dt_proj"], p["dt_bias"]))
    y = selective_scan(xs, dt, -jnp.exp(p["A_log"]), bm, cm, p["D"], sequential=sequential)
    return dense(y * silu(z), p["out_proj"])

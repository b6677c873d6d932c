"""Mixture of experts: top-k routing with a capacity per expert (GShard, Switch Transformer).

Tokens are dispatched to expert buffers (E, G·C, D), C rows per expert for each group (a
sample's tokens), by a scatter, and come back by a gather, so the memory is linear in the
tokens. A spec that asks for a capacity factor bounds C in training, so each expert runs on C
tokens of a group rather than on all of them, and a token beyond an expert's capacity in its
group is dropped by that expert (its other choices still count); without one, and always in
evaluation, C holds every token of the group and none is dropped. Buffers fill by choice rank
first (every token's first choice before any second choice), then in token order, as GShard
does. `moe_dispatch` and `moe_combine` are the two halves around the experts: the `moe` box runs its
gated feed-forward experts between them, an ``experts:`` group its own body under ``jax.vmap``.
"""

import jax
import jax.numpy as jnp

from lbdl_dsl.backends.jax.runtime.activation import gelu, silu
from lbdl_dsl.backends.jax.runtime.dense import dense


def moe_dispatch(
    x: jax.Array,
    router: jax.Array,
    *,
    k: int,
    capacity: float | None = None,
    train: bool = False,
    renorm: bool = True,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array], jax.Array]:
    """Route the tokens of x (B, ..., T, D) to E expert buffers; returns (buffers (E, G·C, D),
    the routes (G, T, k) into them, their gates (G, T, k), the load-balancing loss).

    Each sample's T tokens are a group (GShard's local groups; one group when x is (T, D)).
    With a ``capacity`` factor, in training, expert e holds at most C = ceil(capacity·k·T/E)
    tokens of each group; otherwise C = T, so none is dropped and one sample's output never
    depends on the rest of its batch (evaluation, and a spec that asks for no capacity, compute
    what Mixtral's reference computes). Either way what a token meets
    does not depend on the batch or on how it is split over devices, and every buffer grows
    with the tokens, never with their square. A token is written into its slot by a scatter
    and read back by a gather (no one-hot dispatch tensor of (tokens, k, E, C)); a dropped
    choice points at a slot past the buffers, which is thrown away. The gates are the softmax
    of the router's logits renormalised over the k chosen experts (Mixtral), or with ``renorm``
    false the softmax's own values (Qwen3-MoE's default). The auxiliary
    loss is Switch's E·Σ_e f_e·P_e, with f_e the fraction of the k·tokens choices that went
    to expert e and P_e its mean router probability.
    """
    d = x.shape[-1]
    e = router.shape[-1]
    tokens = x.reshape(-1, x.shape[-2], d) if x.ndim >= 3 else x.reshape(1, -1, d)
    g, n = tokens.shape[0], tokens.shape[1]
    probs = jax.nn.softmax(dense(tokens, router).astype(jnp.float32), axis=-1)  # (G, T, E)
    top, chosen = jax.lax.top_k(probs, k)  # (G, T, k)
    gates = (top / jnp.sum(top, axis=-1, keepdims=True) if renorm else top).astype(x.dtype)
    if capacity is None or not train:
        c = n  # a token picks an expert at most once: T slots never overflow
    else:
        num, den = float(capacity).as_integer_ratio()
        c = (num * k * n + den * e - 1) // (den * e)  # whole-number ceiling: n may be symbolic
    slots = jax.vmap(lambda ch: _slots(ch, e, c))(chosen)  # (G, T, k) into E·C (+1: dropped)
    buffers = jax.vmap(lambda t, s: _scatter(t, s, e * c))(tokens, slots)  # (G, E·C, D)
    buffers = buffers.reshape(g, e, c, d).transpose(1, 0, 2, 3).reshape(e, g * c, d)
    onehot = jax.nn.one_hot(chosen, e, dtype=jnp.float32)  # (G, T, k, E): linear in tokens
    share = jnp.mean(onehot, axis=(0, 1, 2))
    aux = e * jnp.sum(share * jnp.mean(probs, axis=(0, 1)))
    return buffers, (slots, gates), aux


def _slots(chosen: jax.Array, e: int, c: int) -> jax.Array:
    """Each choice's row in one group's (E·C) buffer rows, E·C for a dropped one. Buffers fill
    by choice rank first (every token's first choice before any second), then in token
    order, as GShard does: the rank of a choice among those for its expert is a running
    count over the (k, T) choices sorted by expert."""
    n, k = chosen.shape
    flat = chosen.T.reshape(-1)  # choice rank first, then token
    order = jnp.argsort(flat, stable=True)  # by expert, keeping rank-then-token order
    sorted_experts = flat[order]
    starts = jnp.searchsorted(sorted_experts, jnp.arange(e), side="left")
    rank_sorted = jnp.arange(flat.shape[0]) - starts[sorted_experts]
    rank = jnp.zeros_like(flat).at[order].set(rank_sorted)
    slot = jnp.where(rank < c, flat * c + rank, e * c)
    return slot.reshape(k, n).T


def _scatter(tokens: jax.Array, slots: jax.Array, rows: int) -> jax.Array:
    """One group's buffer rows: token i copied into the rows its choices point at."""
    n, k = slots.shape
    src = jnp.broadcast_to(tokens[:, None, :], (n, k, tokens.shape[-1]))
    out = jnp.zeros((rows + 1, tokens.shape[-1]), tokens.dtype)
    return out.at[slots.reshape(-1)].add(src.reshape(n * k, -1))[:rows]


def moe_combine(
    ys: jax.Array, routes: tuple[jax.Array, jax.Array], lead: tuple[int, ...]
) -> jax.Array:
    """The experts' outputs ys (E, G·C, D') gathered back into their tokens and summed with
    the gates of `moe_dispatch`; ``lead`` is the input's shape before its last axis."""
    slots, gates = routes
    e, g = ys.shape[0], slots.shape[0]
    per = ys.reshape(e, g, -1, ys.shape[-1]).transpose(1, 0, 2, 3)  # (G, E, C, D')
    rows = per.reshape(g, -1, ys.shape[-1])  # (G, E·C, D')
    rows = jnp.concatenate([rows, jnp.zeros_like(rows[:, :1])], axis=1)  # the dropped row
    picked = jax.vmap(lambda r, s: r[s])(rows, slots)  # (G, T, k, D')
    y = jnp.einsum("gtkd,gtk->gtd", picked, gates.astype(picked.dtype))
    return y.reshape(*lead, ys.shape[-1])


def moe(
    x: jax.Array,
    p: dict[str, jax.Array],
    *,
    k: int,
    act: str,
    capacity: float | None = None,
    train: bool = False,
    stats: bool = False,
    renorm: bool = True,
) -> tuple[jax.Array, ...]:
    """Sparse mixture of gated experts on x (B, T, D); returns (y, load-balancing loss), and
    with ``stats`` each expert's load (k times its share of the choices) and mean probability,
    which `pooled_balance_loss` pools across layers.

    ``p``: router (D, E); gate, up (E, D, F); down (E, F, D).
    """
    buffers, routes, aux = moe_dispatch(
        x, p["router"], k=k, capacity=capacity, train=train, renorm=renorm
    )
    if stats:
        load, prob = routing_stats(x, p["router"], k=k)
    g = jnp.einsum("ecd,edf->ecf", buffers, p["gate"])
    g = silu(g) if act == "silu" else gelu(g, approximate=act == "gelu-tanh")
    h = g * jnp.einsum("ecd,edf->ecf", buffers, p["up"])
    ys = jnp.einsum("ecf,efd->ecd", h, p["down"])
    if stats:
        return moe_combine(ys, routes, x.shape[:-1]), aux, load, prob
    return moe_combine(ys, routes, x.shape[:-1]), aux


def routing_stats(x: jax.Array, router: jax.Array, *, k: int) -> tuple[jax.Array, jax.Array]:
    """Per expert: the number of times it is among a token's top k, per token (k times its
    share of the choices), and its mean router probability, over the tokens of x."""
    tokens = x.reshape(-1, x.shape[-1])
    probs = jax.nn.softmax(dense(tokens, router).astype(jnp.float32), axis=-1)
    _, chosen = jax.lax.top_k(probs, k)
    load = jnp.mean(jnp.sum(jax.nn.one_hot(chosen, router.shape[-1]), axis=1), axis=0)
    return load, jnp.mean(probs, axis=0)


def pooled_balance_loss(state: dict[str, object]) -> jax.Array:
    """The load-balancing loss pooled across layers, as transformers' Mixtral computes it
    (``load_balancing_loss_func``): E·Σ_e load_e·prob_e with each expert's load and mean
    probability averaged over every `moe` layer of ``state`` (each layer's `load` and `prob`,
    kept with ``pool=true``; a stacked ×N group holds one row per layer) before multiplying,
    rather than a mean of the layers' own losses."""
    loads, probs = [], []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "load" in node and "prob" in node:
                loads.append(node["load"].reshape(-1, node["load"].shape[-1]))
                probs.append(node["prob"].reshape(-1, node["prob"].shape[-1]))
            for value in node.values():
                walk(value)

    walk(state)
    load = jnp.mean(jnp.concatenate(loads), axis=0)
    prob = jnp.mean(jnp.concatenate(probs), axis=0)
    return load.shape[-1] * jnp.sum(load * prob)

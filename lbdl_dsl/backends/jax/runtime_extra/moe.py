"""Mixture of experts: top-k routing with a capacity per expert (GShard, Switch Transformer).

Tokens are dispatched to expert buffers (E, C, D) by one-hot dispatch tensors. A spec that asks
for a capacity factor bounds C in training, so each expert runs on C tokens rather than on all
of them, and a token beyond an expert's capacity is dropped by that expert (its other choices
still count); without one, and always in evaluation, C holds every token and none is dropped.
Buffers fill by choice rank first (every token's first choice before any second choice), then
in token order, as GShard does.
`moe_dispatch` and `moe_combine` are the two halves around the experts: the `moe` box runs its
gated feed-forward experts between them, an ``experts:`` group its own body under ``jax.vmap``.
"""

import jax
import jax.numpy as jnp

from lbdl_dsl.backends.jax.runtime import dense, gelu, silu


def moe_dispatch(
    x: jax.Array,
    router: jax.Array,
    *,
    k: int,
    capacity: float | None = None,
    train: bool = False,
) -> tuple:
    """Route the tokens of x (B, ..., D) to E expert buffers; returns (buffers (E, C, D), the
    combining weights (tokens, E, C), the load-balancing loss).

    The gates are the softmax of the router's logits renormalised over the k chosen experts
    (Mixtral). With a ``capacity`` factor, in training, each expert holds
    C = ceil(capacity·k·tokens/E) tokens; otherwise C is every token, so none is dropped and one
    sample's output never depends on the rest of its batch (evaluation, and a spec that asks for
    no capacity, compute what Mixtral's reference computes). The auxiliary loss is
    Switch's E·Σ_e f_e·P_e, with f_e the fraction of the k·tokens choices that went to expert e
    and P_e its mean router probability.
    """
    d = x.shape[-1]
    e = router.shape[-1]
    tokens = x.reshape(-1, d)
    n = tokens.shape[0]
    probs = jax.nn.softmax(dense(tokens, router).astype(jnp.float32), axis=-1)
    top, chosen = jax.lax.top_k(probs, k)
    gates = (top / jnp.sum(top, axis=-1, keepdims=True)).astype(x.dtype)
    onehot = jax.nn.one_hot(chosen, e, dtype=jnp.int32)  # (n, k, E)
    ranked = onehot.transpose(1, 0, 2).reshape(k * n, e)  # choice rank first, then token
    slot = (jnp.cumsum(ranked, axis=0) - 1).reshape(k, n, e).transpose(1, 0, 2)
    if capacity is None or not train:
        c = n  # a token picks an expert at most once: n slots never overflow
    else:
        num, den = float(capacity).as_integer_ratio()
        c = (num * k * n + den * e - 1) // (den * e)  # whole-number ceiling: n may be symbolic
    kept = (onehot > 0) & (slot < c)
    where = jax.nn.one_hot(jnp.where(kept, slot, c), c, dtype=x.dtype)  # (n, k, E, C)
    buffers = jnp.einsum("nec,nd->ecd", jnp.sum(where, axis=1), tokens)
    weights = jnp.einsum("nkec,nk->nec", where, gates)
    share = jnp.mean(onehot.astype(jnp.float32), axis=(0, 1))
    aux = e * jnp.sum(share * jnp.mean(probs, axis=0))
    return buffers, weights, aux


def moe_combine(ys: jax.Array, weights: jax.Array, lead: tuple) -> jax.Array:
    """The experts' outputs ys (E, C, D') summed back into their tokens with the gates of
    `moe_dispatch`; ``lead`` is the input's shape before its last axis."""
    y = jnp.einsum("nec,ecd->nd", weights, ys)
    return y.reshape(*lead, ys.shape[-1])


def moe(
    x: jax.Array,
    p: dict,
    *,
    k: int,
    act: str,
    capacity: float | None = None,
    train: bool = False,
    stats: bool = False,
) -> tuple:
    """Sparse mixture of gated experts on x (B, T, D); returns (y, load-balancing loss), and
    with ``stats`` each expert's load (k times its share of the choices) and mean probability,
    which `pooled_balance_loss` pools across layers.

    ``p``: router (D, E); gate, up (E, D, F); down (E, F, D).
    """
    buffers, weights, aux = moe_dispatch(x, p["router"], k=k, capacity=capacity, train=train)
    if stats:
        load, prob = routing_stats(x, p["router"], k=k)
    g = jnp.einsum("ecd,edf->ecf", buffers, p["gate"])
    g = silu(g) if act == "silu" else gelu(g, approximate=act == "gelu-tanh")
    h = g * jnp.einsum("ecd,edf->ecf", buffers, p["up"])
    ys = jnp.einsum("ecf,efd->ecd", h, p["down"])
    if stats:
        return moe_combine(ys, weights, x.shape[:-1]), aux, load, prob
    return moe_combine(ys, weights, x.shape[:-1]), aux


def routing_stats(x: jax.Array, router: jax.Array, *, k: int) -> tuple:
    """Per expert: the number of times it is among a token's top k, per token (k times its
    share of the choices), and its mean router probability, over the tokens of x."""
    tokens = x.reshape(-1, x.shape[-1])
    probs = jax.nn.softmax(dense(tokens, router).astype(jnp.float32), axis=-1)
    _, chosen = jax.lax.top_k(probs, k)
    load = jnp.mean(jnp.sum(jax.nn.one_hot(chosen, router.shape[-1]), axis=1), axis=0)
    return load, jnp.mean(probs, axis=0)


def pooled_balance_loss(state) -> jax.Array:
    """The load-balancing loss pooled across layers, as transformers' Mixtral computes it
    (``load_balancing_loss_func``): E·Σ_e load_e·prob_e with each expert's load and mean
    probability averaged over every `moe` layer of ``state`` (each layer's `load` and `prob`,
    kept with ``pool=true``; a stacked ×N group holds one row per layer) before multiplying,
    rather than a mean of the layers' own losses."""
    loads, probs = [], []

    def walk(node) -> None:
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

"""Mixture of experts (Shazeer et al. 2017; GShard; Switch; Mixtral): a router picks k of E
gated feed-forward experts per token.

The box counts every expert's parameters but only the k active experts' multiply-accumulates
(plus the router's), as the papers quote "active" compute. Its lowering dispatches tokens to
expert buffers of a fixed capacity (backends/jax/runtime/moe.py) and reports the load-balancing loss
as the state entry `aux`: training code reads it from the new state that `apply` returns and
adds it, scaled (Mixtral: 0.02), to the task loss; under a ×N frame it is one value per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.activation import gelu_ref
from lbdl_dsl.core.layers.base import (
    HP,
    TOKEN,
    ZEROS,
    Attrs,
    Ctx,
    FanIn,
    Layer,
    PSpec,
    Weights,
    numpy,
)
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class MoeAttrs(Attrs):
    experts: int
    k: int
    hidden: Expr
    capacity: float | None  # bounds each expert's buffer in training; None: drops none
    act: str  # the gate's activation: silu (SwiGLU experts), gelu or gelu-tanh (GeGLU)
    pool: bool = False  # keep the routing statistics (`load`, `prob`) to pool across layers
    renorm: bool = True  # the k chosen gates renormalised to sum to one (Mixtral's)

    def items(self) -> tuple[tuple[str, Any], ...]:
        """The record, less a renormalisation that is on (every mixture's but Qwen3-MoE's
        default), so that the records of the models before it read as they did."""
        return tuple((k, v) for k, v in super().items() if k != "renorm" or not v)


_ACTS = {"swiglu": "silu", "geglu": "gelu", "geglu-tanh": "gelu-tanh"}
_BOX = {"silu": "silu", "gelu": "gelu", "gelu-tanh": "gelu approximate=true"}


def _attrs(c: Ctx) -> MoeAttrs:
    c.rank(2, what="T×D sequence")
    e, k = c.const("e"), c.const("k")
    if e < 1:
        c.fail("a mixture needs at least one expert", hparam="e")
    if not 1 <= k <= e:
        c.fail(f"k={k} experts per token must be between 1 and e={e}", hparam="k")
    if c.hp["cap"] is not None and c.hp["cap"] <= 0:
        c.fail(f"the capacity factor must be positive, got {c.hp['cap']}", hparam="cap")
    hidden = c.hp.get("hidden")
    return MoeAttrs(
        e,
        k,
        hidden if hidden is not None else 4 * c.x[1],
        c.hp["cap"],
        _ACTS[c.hp["act"]],
        c.hp["pool"],
        c.hp["renorm"],
    )


def _state(c: Ctx) -> dict[str, PSpec]:
    """The layer's load-balancing loss; with `pool=true` also what it is made of, per expert:
    the share of the k·tokens choices it got (`load`, times k) and its mean probability
    (`prob`), which `pooled_balance_loss` averages over the layers before multiplying."""
    out = {"aux": PSpec((), ZEROS, ())}
    if c.a.pool:
        e = c.a.experts
        out |= {"load": PSpec((e,), ZEROS, ("experts",)), "prob": PSpec((e,), ZEROS, ("experts",))}
    return out


def _params(c: Ctx) -> dict[str, PSpec]:
    d, f, e = c.x[1], c.a.hidden, c.a.experts
    return {
        "router": PSpec((d, e), FanIn(d), ("embed", "experts")),
        "gate": PSpec((e, d, f), FanIn(d), ("experts", "embed", "mlp")),
        "up": PSpec((e, d, f), FanIn(d), ("experts", "embed", "mlp")),
        "down": PSpec((e, f, d), FanIn(f), ("experts", "mlp", "embed")),
    }


def _macs(c: Ctx) -> Expr:
    t, d, a = Expr.lift(c.x[0]), c.x[1], c.a
    router: Expr = t * d * a.experts
    experts: Expr = a.k * t * 3 * d * a.hidden
    return router + experts  # the router, k active experts


def moe_routes(
    tokens: Any, router: Any, k: int, capacity: float | None = None, renorm: bool = True
) -> list[tuple[int, int, float]]:
    """(token, expert, gate) of every kept choice, as a dense loop finds them: tokens (rows of
    ``tokens``, batch-major) ranked by choice then position; with a capacity, expert e keeps its
    first C (training); without, every choice (evaluation); the gate is the softmax
    renormalised over the token's k choices, or with ``renorm`` false the softmax's own."""
    np = numpy()
    n, e = tokens.shape[0], router.shape[-1]
    logits = tokens @ router
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    chosen = np.argsort(-probs, axis=-1)[:, :k]
    cap = n if capacity is None else math.ceil(capacity * k * n / e)
    out = []
    for expert in range(e):
        taken = 0
        for rank in range(k):
            for i in range(n):
                if chosen[i, rank] != expert or taken == cap:
                    continue
                taken += 1
                total = probs[i, chosen[i]].sum() if renorm else 1.0
                out.append((i, expert, float(probs[i, expert] / total)))
    return out


def _kept(a: MoeAttrs, xs: tuple[tuple[Expr, ...], ...], looped: bool) -> Expr:
    """What the backward pass keeps inside the box per sample, besides its output: the router's
    probabilities (T·E), the experts' buffers (E·C rows of D: cap·k·T with a capacity, else
    E·T, every token's slot in every expert), their gate, up and product (3 × rows × hidden),
    and the k gathered outputs of each token (T·k·D)."""
    return _kept_whole(a, xs, looped) + _rows(a, xs) * a.hidden * 3


def _rows(a: MoeAttrs, xs: tuple[tuple[Expr, ...], ...]) -> Expr:
    """The experts' buffers' rows per sample: E·C, cap·k·T with a capacity, else E·T."""
    t = Expr.lift(xs[0][0])
    if a.capacity is None:
        return t * a.experts
    num, den = float(a.capacity).as_integer_ratio()
    return t * (a.k * num) / den


def _kept_whole(a: MoeAttrs, xs: tuple[tuple[Expr, ...], ...], looped: bool) -> Expr:
    """What `_kept` counts along no hidden width (tensor parallelism splits the rest): the
    router's probabilities, the experts' buffers and the k gathered outputs of each token."""
    t, d = Expr.lift(xs[0][0]), Expr.lift(xs[0][1])
    return t * a.experts + _rows(a, xs) * d + t * a.k * d


def moe_groups(x: Any) -> Any:
    """The groups a capacity counts over (GShard's local groups): each sample's tokens, the
    rows of (..., T, D); a single group for (T, D)."""
    return x.reshape(-1, x.shape[-2], x.shape[-1]) if x.ndim >= 3 else x.reshape(1, -1, x.shape[-1])


def moe_ref(x: Any, p: Weights, a: Any, train: bool = False) -> Any:
    """A dense loop over the routes of `moe_routes`, group by group (`moe_groups`): each kept
    token adds gate · expert(token). Evaluation (the registry's reference) routes every token,
    as Mixtral's reference does."""
    np = numpy()
    groups = moe_groups(np.asarray(x, np.float64))
    out = np.zeros_like(groups)
    capacity = a.capacity if train else None
    for tokens, into in zip(groups, out, strict=True):
        for i, expert, gate in moe_routes(tokens, p["router"], a.k, capacity, a.renorm):
            g = tokens[i] @ p["gate"][expert]
            g = g / (1 + np.exp(-g)) if a.act == "silu" else gelu_ref(g, a.act == "gelu-tanh")
            h = g * (tokens[i] @ p["up"][expert])
            into[i] += gate * (h @ p["down"][expert])
    return out.reshape(x.shape)


def _expert(a: MoeAttrs, d: Expr) -> str:
    """One gated expert (Shazeer 2020): act(x·W_gate) ⊙ (x·W_up), then W_down, no biases."""
    return (
        "block expert on X: D:\n"
        f"  fc out={a.hidden} bias=false -> up\n"
        "  from X\n"
        f"  fc out={a.hidden} bias=false -> gate\n"
        f"  {_BOX[a.act]}\n"
        "  mul(up)\n"
        f"  fc out={d} bias=false -> down\n"
    )


MOE = Layer(
    name="moe",
    aliases=("mixture-of-experts",),
    category="Transformer",
    doc="A sparse mixture of E gated feed-forward experts (Mixtral's SwiGLU experts by default): "
    "a router (fc D→E) scores the experts, each token goes to its top k, weighted by the "
    "softmax renormalised over those k (`renorm=false`: the softmax's own values). The MACs "
    "are the router's and k experts' (the active "
    "compute); the parameters are all E experts'. No token is dropped unless the spec asks for "
    "a capacity: with `cap=1.25`, in training each expert takes at most ⌈cap·k·T/E⌉ of each "
    "sample's T tokens (GShard/Switch capacity over local groups: a token's fate does not "
    "depend on the rest of the batch; overflow is dropped by that expert); in evaluation every "
    "token is routed. The memory of the dispatch grows with the tokens, never their square. The "
    "load-balancing loss E·Σ f_e·P_e is the state entry `aux` of the new state "
    "`apply` returns: add it, scaled, to the training loss. Parameters: router (D, E), gate and "
    "up (E, D, hidden), down (E, hidden, D).",
    hparams=(
        HP("e", "size", doc="number of experts", shown=True, word="experts"),
        HP("k", "size", 2, "experts per token", shown=True),
        HP("hidden", "size", None, "each expert's hidden dimension (default 4D)"),
        HP("act", "choice", "swiglu", "each expert's gated activation", tuple(_ACTS)),
        HP(
            "renorm",
            "bool",
            True,
            "the k chosen gates renormalised to sum to one (Mixtral; Qwen3-MoE's "
            "norm_topk_prob); false: the router's softmax values as they are",
        ),
        HP(
            "pool",
            "bool",
            False,
            "keep each layer's routing statistics (state `load`, `prob`) for a loss pooled "
            "across layers (`pooled_balance_loss`, transformers' Mixtral's)",
        ),
        HP(
            "cap",
            "float",
            None,
            "capacity factor in training: expert buffers hold cap·k·tokens/E tokens "
            "(default: none, no token dropped)",
        ),
    ),
    resolve=_attrs,
    shape=lambda c: c.x,
    params=_params,
    state=_state,
    macs=_macs,
    example=("6×8", "moe e=4 k=2 hidden=12"),
    step=lambda c: TOKEN,
    cases=(
        ("8×8", "moe e=4 k=1 hidden=6 cap=0.5 act=geglu"),
        ("7×8", "moe e=3 k=2 hidden=5 cap=4.0"),
        ("6×8", "moe e=3 k=2 hidden=5 act=geglu-tanh"),
        ("6×8", "moe e=4 k=2 hidden=5 pool=true"),
        ("6×8", "moe e=4 k=3 hidden=5 renorm=false"),
    ),
    reference=lambda xs, p, s, a: moe_ref(xs[0], p, a),
    expert=_expert,
    kept=_kept,
    kept_whole=_kept_whole,
)

LAYERS = (MOE,)

"""Mixture of experts (Shazeer et al. 2017; GShard; Switch; Mixtral): a router picks k of E
gated feed-forward experts per token.

The box counts every expert's parameters but only the k active experts' multiply-accumulates
(plus the router's), as the papers quote "active" compute. Its lowering dispatches tokens to
expert buffers of a fixed capacity (runtime_extra/moe.py) and reports the load-balancing loss
as the state entry `aux`: training code reads it from the new state that `apply` returns and
adds it, scaled (Mixtral: 0.02), to the task loss; under a ×N frame it is one value per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.activation import gelu_ref
from lbdl_dsl.core.layers.base import HP, ZEROS, Attrs, Ctx, FanIn, Layer, PSpec, Weights, numpy
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class MoeAttrs(Attrs):
    experts: int
    k: int
    hidden: Expr
    capacity: float
    act: str  # the gate's activation: silu (SwiGLU experts) or gelu (GeGLU)


_ACTS = {"swiglu": "silu", "geglu": "gelu"}


def _attrs(c: Ctx) -> MoeAttrs:
    c.rank(2, what="T×D sequence")
    e, k = c.const("e"), c.const("k")
    if e < 1:
        c.fail("a mixture needs at least one expert", hparam="e")
    if not 1 <= k <= e:
        c.fail(f"k={k} experts per token must be between 1 and e={e}", hparam="k")
    if c.hp["cap"] <= 0:
        c.fail(f"the capacity factor must be positive, got {c.hp['cap']}", hparam="cap")
    hidden = c.hp.get("hidden")
    return MoeAttrs(
        e, k, hidden if hidden is not None else 4 * c.x[1], c.hp["cap"], _ACTS[c.hp["act"]]
    )


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


def moe_routes(tokens: Any, router: Any, k: int, capacity: float) -> list[tuple[int, int, float]]:
    """(token, expert, gate) of every kept choice, as a dense loop finds them: tokens (rows of
    ``tokens``, batch-major) ranked by choice then position; expert e keeps its first C; the
    gate is the softmax renormalised over the token's k choices."""
    np = numpy()
    n, e = tokens.shape[0], router.shape[-1]
    logits = tokens @ router
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    chosen = np.argsort(-probs, axis=-1)[:, :k]
    cap = math.ceil(capacity * k * n / e)
    out = []
    for expert in range(e):
        taken = 0
        for rank in range(k):
            for i in range(n):
                if chosen[i, rank] != expert or taken == cap:
                    continue
                taken += 1
                out.append((i, expert, float(probs[i, expert] / probs[i, chosen[i]].sum())))
    return out


def _kept(a: MoeAttrs, x: tuple[Expr, ...]) -> Expr:
    """What the backward pass keeps inside the box per sample, besides its output: the router's
    probabilities (T·E), the experts' buffers (E·C ≈ cap·k·T rows of D), their gate, up and
    product (3 × rows × hidden), and the k gathered outputs of each token (T·k·D)."""
    t, d = Expr.lift(x[0]), Expr.lift(x[1])
    num, den = float(a.capacity).as_integer_ratio()
    rows = t * (a.k * num) / den
    return t * a.experts + rows * d + rows * a.hidden * 3 + t * a.k * d


def moe_groups(x: Any) -> Any:
    """The groups a capacity counts over (GShard's local groups): each sample's tokens, the
    rows of (..., T, D); a single group for (T, D)."""
    return x.reshape(-1, x.shape[-2], x.shape[-1]) if x.ndim >= 3 else x.reshape(1, -1, x.shape[-1])


def moe_ref(x: Any, p: Weights, a: Any) -> Any:
    """A dense loop over the routes of `moe_routes`, group by group (`moe_groups`): each kept
    token adds gate · expert(token)."""
    np = numpy()
    groups = moe_groups(np.asarray(x, np.float64))
    out = np.zeros_like(groups)
    for tokens, into in zip(groups, out, strict=True):
        for i, expert, gate in moe_routes(tokens, p["router"], a.k, a.capacity):
            g = tokens[i] @ p["gate"][expert]
            g = g / (1 + np.exp(-g)) if a.act == "silu" else gelu_ref(g, False)
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
        f"  {a.act}\n"
        "  mul(up)\n"
        f"  fc out={d} bias=false -> down\n"
    )


MOE = Layer(
    name="moe",
    aliases=("mixture-of-experts",),
    category="Transformer",
    doc="A sparse mixture of E gated feed-forward experts (Mixtral's SwiGLU experts by default): "
    "a router (fc D→E) scores the experts, each token goes to its top k, weighted by the "
    "softmax renormalised over those k. The MACs are the router's and k experts' (the active "
    "compute); the parameters are all E experts'. Each expert takes at most "
    "⌈cap·k·T/E⌉ of each sample's T tokens (GShard/Switch capacity over local groups: the "
    "memory grows with the tokens, and a token's fate does not depend on the rest of the "
    "batch; overflow is dropped by that expert). The load-balancing loss E·Σ f_e·P_e is the "
    "state entry `aux` of the new state `apply` returns: add it, scaled, to the training "
    "loss. Parameters: router (D, E), gate and up (E, D, hidden), down (E, hidden, D).",
    hparams=(
        HP("e", "size", doc="number of experts"),
        HP("k", "size", 2, "experts per token"),
        HP("hidden", "size", None, "each expert's hidden dimension (default 4D)"),
        HP("act", "choice", "swiglu", "each expert's gated activation", tuple(_ACTS)),
        HP(
            "cap",
            "float",
            1.25,
            "capacity factor: an expert holds cap·k·T/E of a sample's T tokens",
        ),
    ),
    resolve=_attrs,
    shape=lambda c: c.x,
    params=_params,
    state=lambda c: {"aux": PSpec((), ZEROS, ())},
    macs=_macs,
    example=("6×8", "moe e=4 k=2 hidden=12"),
    cases=(
        ("8×8", "moe e=4 k=1 hidden=6 cap=0.5 act=geglu"),
        ("7×8", "moe e=3 k=2 hidden=5 cap=4.0"),
    ),
    reference=lambda xs, p, s, a: moe_ref(xs[0], p, a),
    expert=_expert,
    kept=_kept,
)

LAYERS = (MOE,)

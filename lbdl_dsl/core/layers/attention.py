"""Attention (§ 4.8) and the transformer's three blocks of Fig. 5.6.

`self-att`, `cross-att` and `ffw` are declared as composite layers rather than spec-level blocks
so that the diagram draws them as the book does (one tall box) and their parameters have short,
stable names; their inside is the book's: pre-norm, the operator, the residual sum.
"""

from __future__ import annotations

from lbdl_dsl.core.layers.base import HP, ONES, ZEROS, Ctx, Emit, FanIn, Layer, PSpec, numel
from lbdl_dsl.core.symbolic import Expr


def _heads(c: Ctx, d: Expr) -> tuple[int, Expr, Expr]:
    h = c.const("h")
    if h < 1:
        c.fail("the number of heads must be at least 1", hparam="h")
    dqk, dv = c.hp.get("dqk"), c.hp.get("dv")
    if dqk is None or dv is None:
        v = d.as_int()
        if v is not None and v % h:
            c.fail(f"{h} heads do not divide the dimension {d}", "give dqk= and dv=", "h")
    return h, (dqk if dqk is not None else d / h), (dv if dv is not None else d / h)


def _mha_specs(c: Ctx, d: Expr, dz: Expr, out: Expr, prefix: str = "") -> dict[str, PSpec]:
    h, dqk, dv = _heads(c, d)
    specs = {
        "wq": PSpec((d, h * dqk), FanIn(d), ("embed", "heads")),
        "wk": PSpec((dz, h * dqk), FanIn(dz), ("embed", "heads")),
        "wv": PSpec((dz, h * dv), FanIn(dz), ("embed", "heads")),
        "wo": PSpec((h * dv, out), FanIn(h * dv), ("heads", "embed")),
    }
    if c.hp.get("bias"):
        specs |= {
            "bq": PSpec((h * dqk,), ZEROS, ("heads",)),
            "bk": PSpec((h * dqk,), ZEROS, ("heads",)),
            "bv": PSpec((h * dv,), ZEROS, ("heads",)),
            "bo": PSpec((out,), ZEROS, ("embed",)),
        }
        if not c.hp.get("kbias", True):  # Whisper: every projection but the keys'
            del specs["bk"]
    return {prefix + k: v for k, v in specs.items()}


def _mha_macs(c: Ctx, t: Expr, d: Expr, s: Expr, dz: Expr, out: Expr) -> Expr:
    h, dqk, dv = _heads(c, d)
    projections = t * d * h * dqk + s * dz * h * (dqk + dv) + t * h * dv * out
    return projections + h * t * s * (dqk + dv)  # Q·Kᵀ and A·V


def _mha_kept(c: Ctx, t: Expr, d: Expr, s: Expr) -> Expr:
    """Q, K and V, which training keeps for the backward pass (memory per device)."""
    h, dqk, dv = _heads(c, d)
    return t * h * dqk + s * h * (dqk + dv)


def _mha_call(e: Emit, q_in: str, kv_in: str, causal: bool) -> str:
    names = ["wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"]
    p = ", ".join(f'"{n}": {e.param(n)}' for n in names if e.has_param(n))
    return e.call("mha", q_in, kv_in, "{" + p + "}", e.hp["h"], causal, e.hp["p"], e.train, e.key())


_ATT_HP = (
    HP("h", "size", doc="number of heads"),
    HP("dqk", "size", None, "query and key dimension per head (default D/h)"),
    HP("dv", "size", None, "value dimension per head (default D/h)"),
    HP("bias", "bool", False, "biases on the projections (the book's have none; GPT-2's do)"),
    HP(
        "kbias",
        "bool",
        True,
        "with bias=true, a bias on the keys' projection too (Whisper's has none)",
    ),
    HP("p", "float", 0.0, "dropout on the attention weights"),
)


def _mha_shape(c: Ctx) -> tuple:
    x = c.rank(2, what="T×D sequence")
    z = c.rank(2, what="S×D sequence", i=1) if len(c.ins) > 1 else x
    _heads(c, x[1])
    del z
    out = c.hp.get("out")
    if out is None:
        out = c.hp["out"] = x[1]
    return (x[0], out)


def _mha_z(c: Ctx) -> tuple:
    return c.ins[1] if len(c.ins) > 1 else c.x


MHA = Layer(
    name="mha",
    aliases=("multi-head-attention",),
    category="Attention",
    doc="Multi-head attention (§ 4.8): queries from the first input, keys and values from the "
    "second (or the first again), H heads, scores scaled by 1/√dqk, softargmax, the "
    "concatenated heads projected by W^O. `causal=true` masks the future.",
    hparams=(
        *_ATT_HP,
        HP("causal", "bool", False, "mask attention to later positions"),
        HP("out", "size", None, "output dimension (default D)"),
    ),
    arity=(1, 2),
    shape=_mha_shape,
    params=lambda c: _mha_specs(c, c.x[1], _mha_z(c)[1], c.out[1]),
    macs=lambda c: _mha_macs(c, c.x[0], c.x[1], _mha_z(c)[0], _mha_z(c)[1], c.out[1]),
    kept=lambda c: _mha_kept(c, c.x[0], c.x[1], _mha_z(c)[0]),
    lower=lambda e: _mha_call(e, e.x[0], e.x[1] if len(e.x) > 1 else e.x[0], e.hp["causal"]),
    from_annotation=(("out", -1),),
    example=("16×64", "mha h=4"),
)


def _att_shape(c: Ctx) -> tuple:
    q = c.rank(2, what="T×D queries")
    k = c.rank(2, what="S×D keys", i=1)
    v = c.rank(2, what="S×D values", i=2)
    if q[1] != k[1]:
        c.fail(f"queries ({q[1]}) and keys ({k[1]}) must have the same dimension")
    if k[0] != v[0]:
        c.fail(f"keys ({k[0]}) and values ({v[0]}) must have the same length")
    if len(c.ins) > 3 and c.ins[3] != (q[0], k[0]):
        c.fail(f"the mask must be {q[0]}×{k[0]}, got {'×'.join(map(str, c.ins[3]))}")
    return (q[0], v[1])


def _att_lower(e: Emit) -> str:
    q, k, v = (f"{x}[:, None]" for x in e.x[:3])
    mask = f"{e.x[3]}[:, None]" if len(e.x) > 3 else None
    out = e.call("attention", q, k, v, mask, e.hp["causal"], e.hp["p"], e.train, e.key())
    return f"{out}[:, 0]"


ATTENTION = Layer(
    name="attention",
    aliases=("att",),
    category="Attention",
    doc="The attention operator of § 4.8 on queries Q (T×D), keys K (S×D), values V (S×D'), "
    "and an optional Boolean T×S mask M (true keeps): softargmax(QKᵀ/√D)·V. Masked and, with "
    "`causal=true`, future scores are set to −∞ before the softargmax.",
    hparams=(
        HP("causal", "bool", False, "mask attention to later positions"),
        HP("p", "float", 0.0, "dropout on the attention weights"),
    ),
    arity=(3, 4),
    shape=_att_shape,
    macs=lambda c: c.x[0] * c.ins[1][0] * (c.x[1] + c.ins[2][1]),
    lower=_att_lower,
    example=("16×64", "attention(K, V)"),
)


def _ln_specs(d: Expr) -> dict[str, PSpec]:
    return {"ln_scale": PSpec((d,), ONES, ("norm",)), "ln_bias": PSpec((d,), ZEROS, ("norm",))}


def _block_shape(c: Ctx) -> tuple:
    x = c.rank(2, what="T×D sequence")
    if len(c.ins) > 1:
        c.rank(2, what="S×D sequence", i=1)
    _heads(c, x[1])
    return x


def _self_att_lower(e: Emit, cross: bool) -> str:
    x = e.x[0]
    h = e.bind(e.call("layer_norm", x, e.param("ln_scale"), e.param("ln_bias"), e.hp["eps"], 1))
    kv = e.x[1] if cross else h
    y = e.bind(_mha_call(e, h, kv, e.hp.get("causal", False)))
    return f"{x} + {y}"


SELF_ATT = Layer(
    name="self-att",
    aliases=("self-attention",),
    category="Transformer",
    doc="The self-attention block of Fig. 5.6: layernorm, multi-head attention with Q, K and V "
    "from that one sequence, and the residual sum. `causal=true` masks the future.",
    hparams=(
        *_ATT_HP,
        HP("causal", "bool", False, "mask attention to later positions"),
        HP("eps", "float", 1e-5, "layernorm's epsilon"),
    ),
    shape=_block_shape,
    params=lambda c: _ln_specs(c.x[1]) | _mha_specs(c, c.x[1], c.x[1], c.x[1]),
    macs=lambda c: _mha_macs(c, c.x[0], c.x[1], c.x[0], c.x[1], c.x[1]),
    kept=lambda c: _mha_kept(c, c.x[0], c.x[1], c.x[0]),
    lower=lambda e: _self_att_lower(e, cross=False),
    composite=True,
    example=("16×64", "self-att h=4 causal=true"),
)

CROSS_ATT = Layer(
    name="cross-att",
    aliases=("cross-attention",),
    category="Transformer",
    doc="The cross-attention block of Fig. 5.6: layernorm on X for the queries, keys and values "
    "from a second sequence Z (the encoder's output, given in parentheses), multi-head "
    "attention, and the residual sum with X.",
    hparams=(*_ATT_HP, HP("eps", "float", 1e-5, "layernorm's epsilon")),
    arity=(2, 2),
    shape=_block_shape,
    params=lambda c: _ln_specs(c.x[1]) | _mha_specs(c, c.x[1], c.ins[1][1], c.x[1]),
    macs=lambda c: _mha_macs(c, c.x[0], c.x[1], c.ins[1][0], c.ins[1][1], c.x[1]),
    kept=lambda c: _mha_kept(c, c.x[0], c.x[1], c.ins[1][0]),
    lower=lambda e: _self_att_lower(e, cross=True),
    composite=True,
    example=("16×64", "cross-att(Z) h=4"),
)


def _ffw_hidden(c: Ctx) -> Expr:
    hidden = c.hp.get("hidden")
    return hidden if hidden is not None else 4 * c.x[-1]


def _ffw_params(c: Ctx) -> dict[str, PSpec]:
    d, hidden = c.x[-1], _ffw_hidden(c)
    out = _ln_specs(d) | {"w1": PSpec((d, hidden), FanIn(d), ("embed", "mlp"))}
    if c.hp["bias"]:
        out["b1"] = PSpec((hidden,), ZEROS, ("mlp",))
    out["w2"] = PSpec((hidden, d), FanIn(hidden), ("mlp", "embed"))
    if c.hp["bias"]:
        out["b2"] = PSpec((d,), ZEROS, ("embed",))
    return out


def _ffw_lower(e: Emit) -> str:
    x = e.x[0]
    h = e.bind(e.call("layer_norm", x, e.param("ln_scale"), e.param("ln_bias"), e.hp["eps"], 1))
    b1 = e.param("b1") if e.has_param("b1") else None
    b2 = e.param("b2") if e.has_param("b2") else None
    h = e.bind(e.call("dense", h, e.param("w1"), b1))
    if e.hp["act"] == "relu":
        act = e.call("relu", h)
    else:
        act = e.call("gelu", h, e.hp["act"] == "gelu-tanh")
    h = e.bind(e.call("dense", act, e.param("w2"), b2))
    h = e.bind(e.call("dropout", h, e.hp["p"], e.train, e.key()))
    return f"{x} + {h}"


FFW = Layer(
    name="ffw",
    aliases=("feed-forward", "mlp-block"),
    category="Transformer",
    doc="The feed-forward block of Fig. 5.6: layernorm, fc to a hidden dimension (4D by "
    "default), gelu, fc back to D, dropout, and the residual sum.",
    hparams=(
        HP("hidden", "size", None, "hidden dimension (default 4D)"),
        HP("p", "float", 0.1, "dropout after the second fc (PyTorch's transformer default)"),
        HP("bias", "bool", True, "biases on the two fc layers"),
        HP(
            "act",
            "choice",
            "gelu",
            "the activation (gelu-tanh: GPT-2's approximation)",
            ("gelu", "gelu-tanh", "relu"),
        ),
        HP("eps", "float", 1e-5, "layernorm's epsilon"),
    ),
    shape=lambda c: c.rank(1, 2, 3),
    params=_ffw_params,
    macs=lambda c: 2 * numel(c.x[:-1]) * c.x[-1] * _ffw_hidden(c),
    kept=lambda c: numel(c.x[:-1]) * _ffw_hidden(c),
    lower=_ffw_lower,
    composite=True,
    stochastic=True,
    example=("16×64", "ffw hidden=256"),
)

LAYERS = (ATTENTION, MHA, SELF_ATT, CROSS_ATT, FFW)

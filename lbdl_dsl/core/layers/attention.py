"""Attention (§ 4.8) and the transformer's three blocks of Fig. 5.6.

`self-att`, `cross-att` and `ffw` are declared as composite layers rather than spec-level blocks
so that the diagram draws them as the book does (one tall box) and their parameters have short,
stable names; their inside is the book's: pre-norm, the operator, the residual sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.activation import gelu_ref
from lbdl_dsl.core.layers.base import (
    HP,
    ZEROS,
    Arrays,
    Attrs,
    Ctx,
    FanIn,
    Layer,
    PSpec,
    Shape,
    Weights,
    numpy,
)
from lbdl_dsl.core.layers.dense import dense_ref
from lbdl_dsl.core.layers.norm import layernorm_ref
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class HeadsAttrs(Attrs):
    """Multi-head attention resolved: heads, per-head sizes, output size, switches."""

    heads: int
    dqk: Expr
    dv: Expr
    out: Expr
    causal: bool
    dropout: float
    bias: bool
    kbias: bool
    eps: float | None  # the pre-norm's, for self-att and cross-att


@dataclass(frozen=True)
class FfwAttrs(Attrs):
    hidden: Expr
    dropout: float
    bias: bool
    act: str
    eps: float


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
    if c.a.bias:
        specs |= {
            "bq": PSpec((h * dqk,), ZEROS, ("heads",)),
            "bk": PSpec((h * dqk,), ZEROS, ("heads",)),
            "bv": PSpec((h * dv,), ZEROS, ("heads",)),
            "bo": PSpec((out,), ZEROS, ("embed",)),
        }
        if not c.a.kbias:  # Whisper: every projection but the keys'
            del specs["bk"]
    return {prefix + k: v for k, v in specs.items()}


def _mha_macs(c: Ctx, t: Expr, d: Expr, s: Expr, dz: Expr, out: Expr) -> Expr:
    h, dqk, dv = _heads(c, d)
    projections = t * d * h * dqk + s * dz * h * (dqk + dv) + t * h * dv * out
    return projections + h * t * s * (dqk + dv)  # Q·Kᵀ and A·V


def _heads_attrs(c: Ctx, out: Expr | None = None) -> HeadsAttrs:
    """Resolve the heads of `mha`, `self-att` and `cross-att` against the query input."""
    x = c.rank(2, what="T×D sequence")
    if len(c.ins) > 1:
        c.rank(2, what="S×D sequence", i=1)
    h, dqk, dv = _heads(c, x[1])
    return HeadsAttrs(
        h,
        dqk,
        dv,
        out if out is not None else x[1],
        bool(c.hp.get("causal", False)),
        c.hp["p"],
        c.hp["bias"],
        c.hp["kbias"],
        c.hp.get("eps"),
    )


def attention_ref(q: Any, k: Any, v: Any, mask: Any = None, causal: bool = False) -> Any:
    """softargmax(QKᵀ/√d)·V over (B, H, T, d) arrays, position by position; a query whose keys
    are all masked gives zeros."""
    np = numpy()
    b, h, tq, d = q.shape
    keep = np.ones((b, h, tq, k.shape[2]), bool)
    if mask is not None:
        keep &= np.broadcast_to(mask, keep.shape)
    if causal:
        keep &= np.tri(tq, k.shape[2], dtype=bool)
    scores = np.where(keep, q @ k.swapaxes(-1, -2) / math.sqrt(d), -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    e = np.where(keep, np.exp(scores - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(-1, keepdims=True)
    return (e / np.where(total > 0, total, 1.0)) @ v


def mha_ref(x: Any, z: Any, p: Weights, a: HeadsAttrs, prefix: str = "") -> Any:
    """Multi-head attention with separate projections; heads split on the last axis."""
    np = numpy()

    def proj(v: Any, name: str) -> Any:
        return dense_ref(v, p[prefix + "w" + name], p.get(prefix + "b" + name))

    q, k, v = proj(x, "q"), proj(z, "k"), proj(z, "v")

    def heads(t: Any) -> Any:
        return t.reshape(*t.shape[:2], a.heads, -1).transpose(0, 2, 1, 3)

    o = attention_ref(heads(q), heads(k), heads(v), None, a.causal)
    o = o.transpose(0, 2, 1, 3).reshape(*x.shape[:2], -1)
    return np.asarray(proj(o, "o"))


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


def _mha_shape(c: Ctx) -> Shape:
    return (c.x[0], c.a.out)


def _mha_z(c: Ctx) -> Shape:
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
    resolve=lambda c: _heads_attrs(c, c.hp.get("out")),
    shape=_mha_shape,
    params=lambda c: _mha_specs(c, c.x[1], _mha_z(c)[1], c.y[1]),
    macs=lambda c: _mha_macs(c, c.x[0], c.x[1], _mha_z(c)[0], _mha_z(c)[1], c.y[1]),
    from_annotation=(("out", -1),),
    example=("16×64", "mha h=4"),
    cases=(("5×8", "mha h=2 bias=true causal=true"),),
    reference=lambda xs, p, s, a: mha_ref(xs[0], xs[-1], p, a),
)


def _att_shape(c: Ctx) -> Shape:
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


def _att_ref(xs: Arrays, p: Weights, s: Weights, a: Any) -> Any:
    q, k, v = (x[:, None] for x in xs[:3])
    mask = xs[3][:, None] if len(xs) > 3 else None
    return attention_ref(q, k, v, mask, a.causal)[:, 0]


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
    example=("16×64", "attention(K, V)"),
    reference=_att_ref,
)


def _given(hp: Mapping[str, Any], names: tuple[str, ...]) -> list[str]:
    """The hyper-parameters a composite passes on to a box of its inside: those it has."""
    return [n for n in names if hp.get(n) is not None]


_MHA_PASSED = ("h", "dqk", "dv", "bias", "kbias", "p", "causal")


def _att_inside(cross: bool) -> Callable[[Mapping[str, Any], tuple[int, ...]], str]:
    def inside(hp: Mapping[str, Any], ranks: tuple[int, ...]) -> str:
        passed = _given(hp, _MHA_PASSED)
        args = "".join(f" {n}={n}" for n in passed)
        on = "X: T×D, Z: S×E" if cross else "X: T×D"
        return (
            f"block inside({', '.join([*passed, 'eps'])}) on {on}:\n"
            "  layernorm eps=eps -> ln\n"
            f"  mha{'(Z)' if cross else ''}{args} -> att\n"
            "  +(X)\n"
        )

    return inside


def _pre_norm_ref(xs: Arrays, p: Weights, a: HeadsAttrs) -> Any:
    assert a.eps is not None, "self-att and cross-att declare `eps`; only a bare mha has none"
    h = layernorm_ref(xs[0], p["ln"]["scale"], p["ln"]["bias"], a.eps, 1)
    return xs[0] + mha_ref(h, xs[1] if len(xs) > 1 else h, p["att"], a)


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
    resolve=_heads_attrs,
    inside=_att_inside(cross=False),
    example=("16×64", "self-att h=4 causal=true"),
    cases=(("5×8", "self-att h=2 bias=true kbias=false"),),
    reference=lambda xs, p, s, a: _pre_norm_ref(xs, p, a),
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
    resolve=_heads_attrs,
    inside=_att_inside(cross=True),
    example=("16×64", "cross-att(Z) h=4"),
    reference=lambda xs, p, s, a: _pre_norm_ref(xs, p, a),
)


def _ffw_attrs(c: Ctx) -> FfwAttrs:
    c.rank(1, 2, 3)
    hidden = c.hp.get("hidden")
    hidden = hidden if hidden is not None else 4 * c.x[-1]
    return FfwAttrs(hidden, c.hp["p"], c.hp["bias"], c.hp["act"], c.hp["eps"])


_ACT = {"gelu": "gelu", "gelu-tanh": "gelu approximate=true", "relu": "relu"}


def _ffw_inside(hp: Mapping[str, Any], ranks: tuple[int, ...]) -> str:
    pattern = "×".join(["A", "B"][: ranks[0] - 1] + ["D"])
    hidden = "hidden" if hp.get("hidden") is not None else "4D"
    params = ["hidden"] if hp.get("hidden") is not None else []
    return (
        f"block inside({', '.join([*params, 'bias', 'p', 'eps'])}) on X: {pattern}:\n"
        "  layernorm eps=eps -> ln\n"
        f"  fc out={hidden} bias=bias -> fc1\n"
        f"  {_ACT[hp['act']]}\n"
        "  fc out=D bias=bias -> fc2\n"
        "  dropout p=p\n"
        "  +(X)\n"
    )


def _ffw_ref(xs: Arrays, p: Weights, s: Weights, a: FfwAttrs) -> Any:
    np = numpy()
    h = layernorm_ref(xs[0], p["ln"]["scale"], p["ln"]["bias"], a.eps, 1)
    h = dense_ref(h, p["fc1"]["w"], p["fc1"].get("b"))
    h = np.maximum(h, 0.0) if a.act == "relu" else gelu_ref(h, a.act == "gelu-tanh")
    return xs[0] + dense_ref(h, p["fc2"]["w"], p["fc2"].get("b"))


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
    resolve=_ffw_attrs,
    inside=_ffw_inside,
    stochastic=True,
    example=("16×64", "ffw hidden=256"),
    cases=(("6×8", "ffw act=gelu-tanh bias=false"), ("6×8", "ffw act=relu hidden=5")),
    reference=_ffw_ref,
)

LAYERS = (ATTENTION, MHA, SELF_ATT, CROSS_ATT, FFW)

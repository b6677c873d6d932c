"""Layers on the last axis and on tokens: fc, embed, positional encodings, the CLS token."""

from __future__ import annotations

from lbdl_dsl.core.layers.base import HP, ZEROS, Ctx, Emit, FanIn, Layer, PSpec, Std, numel
from lbdl_dsl.core.symbolic import Expr


def _fc_shape(c: Ctx) -> tuple:
    c.rank(*range(1, 9), what="at least 1-axis")
    return (*c.x[:-1], c.hp["out"])


def _fc_params(c: Ctx) -> dict[str, PSpec]:
    d_in, d_out = c.x[-1], c.hp["out"]
    out = {"w": PSpec((d_in, d_out), FanIn(d_in), ("in", "out"))}
    if c.hp["bias"]:
        out["b"] = PSpec((d_out,), ZEROS, ("out",))
    return out


def _fc_lower(e: Emit) -> str:
    bias = e.param("b") if e.has_param("b") else None
    return e.call("dense", e.x[0], e.param("w"), bias)


FC = Layer(
    name="fc",
    aliases=("linear", "dense"),
    category="Dense",
    doc="Fully connected layer on the last axis: y = x·W + b, any leading axes kept. The output "
    "size is usually written only at the right of the box, as in the book.",
    hparams=(
        HP("out", "size", doc="output size (taken from the annotation when left out)"),
        HP("bias", "bool", True, "add a trainable bias"),
    ),
    shape=_fc_shape,
    params=_fc_params,
    macs=lambda c: numel(c.x[:-1]) * c.x[-1] * c.hp["out"],
    lower=_fc_lower,
    from_annotation=(("out", -1),),
    ties=(("embed", {"w": ("table", True)}),),
    example=("50", "fc  25"),
)


def _embed_shape(c: Ctx) -> tuple:
    if c.dtypes and c.dtypes[0] != "int":
        c.fail(
            "`embed` needs token input (integers), got a float tensor",
            "declare `input X: T int<V>`",
        )
    return (*c.x, c.hp["d"])


def _embed_n(c: Ctx) -> Expr:
    n = c.hp.get("n")
    if n is None:
        n = c.vocab[0] if c.vocab else None
    if n is None:
        c.fail("`embed` needs the number of tokens", "write `n=V`, or declare the input `int<V>`")
    return n


def _embed_params(c: Ctx) -> dict[str, PSpec]:
    return {"table": PSpec((_embed_n(c), c.hp["d"]), Std(0.02), ("vocab", "embed"))}


EMBED = Layer(
    name="embed",
    category="Dense",
    doc="Token embedding: each integer in [0, n) picks a trainable row of dimension d. n "
    "defaults to the range declared on the token input (`int<V>`).",
    hparams=(
        HP("d", "size", doc="embedding dimension (taken from the annotation when left out)"),
        HP("n", "size", None, "number of tokens (default: the input's range)"),
    ),
    shape=_embed_shape,
    params=_embed_params,
    lower=lambda e: e.call("embed", e.x[0], e.param("table")),
    from_annotation=(("d", -1),),
    example=("T int<100>", "embed  T×64"),
)


POS_ENC = Layer(
    name="pos-enc",
    aliases=("posenc",),
    category="Dense",
    doc="Sinusoidal positional encoding of § 4.10, added to a T×D sequence: sin on even "
    "features, cos on odd ones, period base T=10⁴. No parameters.",
    shape=lambda c: c.rank(2, what="T×D sequence"),
    lower=lambda e: e.call("add_positions", e.x[0]),
    example=("T×64", "pos-enc"),
)


def _pos_embed_params(c: Ctx) -> dict[str, PSpec]:
    length = c.hp.get("len") or c.x[0]
    return {"table": PSpec((length, c.x[1]), Std(0.02), ("positions", "embed"))}


POS_EMBED = Layer(
    name="pos-embed",
    aliases=("learned-pos",),
    category="Dense",
    doc="Learned positional embedding (GPT-2, ViT): a trainable len×D table whose first T rows "
    "are added to the T×D input. len defaults to the input's T.",
    hparams=(HP("len", "size", None, "the longest sequence (default: the input's T)"),),
    shape=lambda c: c.rank(2, what="T×D sequence"),
    params=_pos_embed_params,
    lower=lambda e: e.call("add_learned_positions", e.x[0], e.param("table")),
    example=("T×64", "pos-embed len=128"),
)


CLS_TOKEN = Layer(
    name="cls-token",
    aliases=("cls",),
    category="Dense",
    doc="One trainable vector E0 concatenated in front of a T×D sequence (ViT's class token).",
    shape=lambda c: (c.rank(2, what="T×D sequence")[0] + 1, c.x[1]),
    params=lambda c: {"e0": PSpec((c.x[1],), Std(0.02), ("embed",))},
    lower=lambda e: e.call("prepend_token", e.x[0], e.param("e0")),
    example=("16×64", "cls-token  17×64"),
)

LAYERS = (FC, EMBED, POS_ENC, POS_EMBED, CLS_TOKEN)

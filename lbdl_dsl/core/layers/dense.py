"""Layers on the last axis and on tokens: fc, embed, positional encodings, the CLS token, a
trainable scale, and the recurrent layers (Elman RNN, LSTM, GRU), whose lowering and runtime
share the family's files."""

from __future__ import annotations

import math
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    TOKEN,
    ZEROS,
    Ctx,
    FanIn,
    Layer,
    PSpec,
    Shape,
    Std,
    Step,
    Weights,
    numel,
    numpy,
    per_token_axis,
)
from lbdl_dsl.core.layers.inits import INIT_HPS, weight_init


def _fc_shape(c: Ctx) -> Shape:
    c.rank(*range(1, 9), what="at least 1-axis")
    return (*c.x[:-1], c.a.out)


def _fc_params(c: Ctx) -> dict[str, PSpec]:
    d_in, d_out = c.x[-1], c.a.out
    out = {"w": PSpec((d_in, d_out), weight_init(c, d_in, d_out), ("in", "out"))}
    if c.a.bias:
        out["b"] = PSpec((d_out,), ZEROS, ("out",))
    return out


def dense_ref(x: Any, w: Any, b: Any = None) -> Any:
    """y[..., o] = Σ_i x[..., i]·w[i, o] + b[o], in float64."""
    np = numpy()
    y = np.einsum("...i,io->...o", np.asarray(x, np.float64), np.asarray(w, np.float64))
    return y if b is None else y + b


FC = Layer(
    name="fc",
    aliases=("linear", "dense"),
    category="Dense",
    doc="Fully connected layer on the last axis: y = x·W + b, any leading axes kept. The output "
    "size is usually written only at the right of the box, as in the book.",
    hparams=(
        HP("out", "size", doc="output size (taken from the annotation when left out)"),
        HP("bias", "bool", True, "add a trainable bias"),
        *INIT_HPS,
    ),
    shape=_fc_shape,
    params=_fc_params,
    macs=lambda c: numel(c.x[:-1]) * c.x[-1] * c.a.out,
    from_annotation=(("out", -1),),
    ties=(("embed", {"w": ("table", True)}),),
    example=("50", "fc  25"),
    step=lambda c: per_token_axis(c, len(c.x) - 1),
    cases=(
        ("6×8", "fc bias=false  6×5"),
        ("6×8", "fc init=xavier  6×5"),
        ("6×8", "fc std=0.5  6×5"),
        ("6×8", "fc init=zeros  6×5"),
    ),
    reference=lambda xs, p, s, a: dense_ref(xs[0], p["w"], p.get("b")),
)


def _embed_shape(c: Ctx) -> Shape:
    if c.dtypes and c.dtypes[0] != "int":
        c.fail(
            "`embed` needs token input (integers), got a float tensor",
            "declare `input X: T int<V>`",
        )
    return (*c.x, c.a.d)


def _embed_n(c: Ctx) -> Any:
    n = c.hp.get("n")
    if n is None:
        n = c.vocab[0] if c.vocab else None
    if n is None:
        c.fail("`embed` needs the number of tokens", "write `n=V`, or declare the input `int<V>`")
    return n


def _embed_params(c: Ctx) -> dict[str, PSpec]:
    return {"table": PSpec((_embed_n(c), c.a.d), Std(0.02), ("vocab", "embed"))}


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
    from_annotation=(("d", -1),),
    example=("T int<100>", "embed  T×64"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: numpy().asarray(p["table"], numpy().float64)[xs[0]],
)


def sinusoidal_ref(t: int, d: int) -> Any:
    """PE[t, 2i] = sin(t / 10⁴^(2i/D)), PE[t, 2i+1] = cos(t / 10⁴^(2i/D)) (§ 4.10)."""
    np = numpy()
    pe = np.zeros((t, d))
    for pos in range(t):
        for j in range(d):
            angle = pos / 10000 ** ((j - j % 2) / d)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


POS_ENC = Layer(
    name="pos-enc",
    aliases=("posenc",),
    category="Dense",
    doc="Sinusoidal positional encoding of § 4.10, added to a T×D sequence: sin on even "
    "features, cos on odd ones, period base T=10⁴. No parameters.",
    shape=lambda c: c.rank(2, what="T×D sequence"),
    example=("T×64", "pos-enc"),
    step=lambda c: Step("offset"),
    reference=lambda xs, p, s, a: xs[0] + sinusoidal_ref(*xs[0].shape[1:])[None],
)


def _pos_embed_params(c: Ctx) -> dict[str, PSpec]:
    length = c.a.len if c.a.len is not None else c.x[0]
    return {"table": PSpec((length, c.x[1]), Std(0.02), ("positions", "embed"))}


def _pos_embed_shape(c: Ctx) -> Shape:
    x = c.rank(2, what="T×D sequence")
    longest = c.hp.get("len")
    beyond = None if longest is None else (x[0] - longest).as_int()
    if beyond is not None and beyond > 0:
        c.fail(
            f"the sequence has {x[0]} positions, more than the table's len={longest}",
            f"give `len` at least {x[0]}, or leave it out to size the table by the input",
            hparam="len",
        )
    return x


POS_EMBED = Layer(
    name="pos-embed",
    aliases=("learned-pos",),
    category="Dense",
    doc="Learned positional embedding (GPT-2, ViT): a trainable len×D table whose first T rows "
    "are added to the T×D input. len defaults to the input's T.",
    hparams=(HP("len", "size", None, "the longest sequence (default: the input's T)"),),
    shape=_pos_embed_shape,
    params=_pos_embed_params,
    example=("T×64", "pos-embed len=128"),
    step=lambda c: Step("offset", limit=c.a.len if c.a.len is not None else c.x[0]),
    reference=lambda xs, p, s, a: xs[0] + p["table"][None, : xs[0].shape[1]],
)


CLS_TOKEN = Layer(
    name="cls-token",
    aliases=("cls",),
    category="Dense",
    doc="One trainable vector E0 concatenated in front of a T×D sequence (ViT's class token).",
    shape=lambda c: (c.rank(2, what="T×D sequence")[0] + 1, c.x[1]),
    params=lambda c: {"e0": PSpec((c.x[1],), Std(0.02), ("embed",))},
    example=("16×64", "cls-token  17×64"),
    reference=lambda xs, p, s, a: numpy().concatenate(
        [numpy().broadcast_to(p["e0"], (xs[0].shape[0], 1, xs[0].shape[2])), xs[0]], axis=1
    ),
)

# `scale` multiplies by one trainable scalar kept as its logarithm, CLIP's temperature on the
# similarity of its two embeddings (Radford et al. 2021).
SCALE = Layer(
    name="scale",
    aliases=("logit-scale",),
    category="Dense",
    doc="Multiplies every value by exp(s), s one trainable scalar (CLIP's learned temperature "
    "on its similarity matrix). s starts at 0 (a scale of 1): CLIP's log(1/0.07) is not an "
    "initialiser the registry has.",
    params=lambda c: {"log_s": PSpec((), ZEROS, ())},
    layout="any",
    rf=True,
    example=("8×8", "scale"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: xs[0] * numpy().exp(p["log_s"]),
)


# Recurrent layers over a T×D sequence: Elman RNN, LSTM and GRU (PyTorch's equations).


def _rnn(name: str, gates: int, doc: str) -> Layer:
    def params(c: Ctx) -> dict[str, PSpec]:
        d, h = c.x[1], c.a.h
        return {
            "w_ih": PSpec((d, gates * h), FanIn(d), ("in", "hidden")),
            "w_hh": PSpec((h, gates * h), FanIn(h), ("hidden", "hidden")),
            "b_ih": PSpec((gates * h,), ZEROS, ("hidden",)),
            "b_hh": PSpec((gates * h,), ZEROS, ("hidden",)),
        }

    def carry(c: Ctx) -> dict[str, PSpec]:
        """The state a step hands the next: h, and an LSTM's cell c."""
        names = ("h", "c") if name == "lstm" else ("h",)
        return {n: PSpec((c.a.h,), ZEROS, ("hidden",)) for n in names}

    return Layer(
        name=name,
        category="Recurrent",
        doc=doc,
        hparams=(HP("h", "size", doc="hidden size (taken from the annotation when left out)"),),
        shape=lambda c: (c.rank(2, what="T×D sequence")[0], c.a.h),
        params=params,
        macs=lambda c: c.x[0] * (c.x[1] + c.a.h) * gates * c.a.h,
        from_annotation=(("h", -1),),
        example=("16×32", f"{name}  16×64"),
        step=lambda c: Step("cache", cache=lambda s: carry(c)),
        reference=lambda xs, p, s, a: recurrent_ref(xs[0], p, name),
    )


def recurrent_ref(x: Any, p: Weights, kind: str) -> Any:
    """PyTorch's equations, step by step from a zero state; gates in PyTorch's order."""
    np = numpy()
    hd = p["w_hh"].shape[0]

    def gate(xt: Any, h: Any, g: int) -> tuple[Any, Any]:
        cols = slice(g * hd, (g + 1) * hd)
        return xt @ p["w_ih"][:, cols] + p["b_ih"][cols], h @ p["w_hh"][:, cols] + p["b_hh"][cols]

    def sig(v: Any) -> Any:
        return 1 / (1 + np.exp(-v))

    h = c = np.zeros((x.shape[0], hd))
    out = []
    for t in range(x.shape[1]):
        xt = x[:, t]
        if kind == "rnn":
            h = np.tanh(sum(gate(xt, h, 0)))
        elif kind == "lstm":
            i, f, o = (sig(sum(gate(xt, h, g))) for g in (0, 1, 3))
            c = f * c + i * np.tanh(sum(gate(xt, h, 2)))
            h = o * np.tanh(c)
        else:
            r, z = (sig(sum(gate(xt, h, g))) for g in (0, 1))
            xn, hn = gate(xt, h, 2)
            h = (1 - z) * np.tanh(xn + r * hn) + z * h
        out.append(h)
    return np.stack(out, axis=1)


RNN = _rnn(
    "rnn",
    1,
    "Elman recurrent layer: h_t = tanh(W_ih x_t + W_hh h_(t−1) + b); the "
    "output is the sequence of hidden states.",
)
LSTM = _rnn(
    "lstm",
    4,
    "Long short-term memory (Hochreiter & Schmidhuber 1997), gates i, f, g, o "
    "as PyTorch orders them; the output is the sequence of hidden states.",
)
GRU = _rnn(
    "gru",
    3,
    "Gated recurrent unit (Cho et al. 2014), gates r, z, n as PyTorch defines "
    "them; the output is the sequence of hidden states.",
)


LAYERS = (FC, EMBED, POS_ENC, POS_EMBED, CLS_TOKEN, SCALE, RNN, LSTM, GRU)

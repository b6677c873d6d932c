"""Recurrent layers over a T×D sequence: Elman RNN, LSTM and GRU (PyTorch's equations)."""

from __future__ import annotations

from lbdl_dsl.core.layers.base import HP, ZEROS, Ctx, Emit, FanIn, Layer, PSpec


def _rnn(name: str, gates: int, doc: str) -> Layer:
    def params(c: Ctx) -> dict[str, PSpec]:
        d, h = c.x[1], c.hp["h"]
        return {
            "w_ih": PSpec((d, gates * h), FanIn(d), ("in", "hidden")),
            "w_hh": PSpec((h, gates * h), FanIn(h), ("hidden", "hidden")),
            "b_ih": PSpec((gates * h,), ZEROS, ("hidden",)),
            "b_hh": PSpec((gates * h,), ZEROS, ("hidden",)),
        }

    def lower(e: Emit) -> str:
        p = ", ".join(f'"{n}": {e.param(n)}' for n in ("w_ih", "w_hh", "b_ih", "b_hh"))
        return e.call(name, e.x[0], "{" + p + "}")

    return Layer(
        name=name,
        category="Recurrent",
        doc=doc,
        hparams=(HP("h", "size", doc="hidden size (taken from the annotation when left out)"),),
        shape=lambda c: (c.rank(2, what="T×D sequence")[0], c.hp["h"]),
        params=params,
        macs=lambda c: c.x[0] * (c.x[1] + c.hp["h"]) * gates * c.hp["h"],
        lower=lower,
        from_annotation=(("h", -1),),
        example=("16×32", f"{name}  16×64"),
    )


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

LAYERS = (RNN, LSTM, GRU)

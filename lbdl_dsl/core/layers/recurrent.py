"""Recurrent layers over a T×D sequence: Elman RNN, LSTM and GRU (PyTorch's equations)."""

from __future__ import annotations

from typing import Any

from lbdl_dsl.core.layers.base import HP, ZEROS, Ctx, FanIn, Layer, PSpec, Step, Weights, numpy


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

LAYERS = (RNN, LSTM, GRU)

"""Activations and dropout: shape-preserving, parameter-free, light boxes in the diagrams."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    TOKEN,
    AxisAttrs,
    Ctx,
    Layer,
    Shape,
    numpy,
    per_token_axis,
    resolve_axis,
)


def _unary(
    name: str,
    doc: str,
    reference: Callable[..., Any],
    aliases: tuple[str, ...] = (),
    hps: tuple[HP, ...] = (),
    cases: tuple[tuple[str, str], ...] = (),
) -> Layer:
    return Layer(
        name=name,
        aliases=aliases,
        category="Activation",
        doc=doc,
        hparams=hps,
        layout="any",
        rf=True,
        example=("32×8×8", name if not hps else f"{name} {hps[0].name}={hps[0].default}"),
        cases=cases,
        reference=reference,
        step=lambda c: TOKEN,
    )


def sigmoid_ref(x: Any) -> Any:
    return 1.0 / (1.0 + numpy().exp(-x))


def gelu_ref(x: Any, approximate: bool) -> Any:
    """Exact: ½x(1 + erf(x/√2)); approximate: PyTorch's tanh formula (GPT-2's)."""
    np = numpy()
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


RELU = _unary(
    "relu", "Rectified linear unit, max(0, x).", lambda xs, p, s, a: numpy().maximum(xs[0], 0.0)
)
TANH = _unary("tanh", "Hyperbolic tangent.", lambda xs, p, s, a: numpy().tanh(xs[0]))
SIGMOID = _unary(
    "sigmoid", "Logistic sigmoid, 1/(1 + e⁻ˣ).", lambda xs, p, s, a: sigmoid_ref(xs[0])
)
LEAKY = _unary(
    "leaky-relu",
    "Leaky ReLU: x for x ≥ 0, a·x otherwise (PyTorch's a=0.01 by default).",
    lambda xs, p, s, a: numpy().where(xs[0] >= 0, xs[0], a.a * xs[0]),
    aliases=("leaky relu", "leakyrelu"),
    hps=(HP("a", "float", 0.01, "slope for negative inputs"),),
)
GELU = _unary(
    "gelu",
    "Gaussian error linear unit, exact by default; `approximate=true` is GPT-2's tanh form.",
    lambda xs, p, s, a: gelu_ref(xs[0], a.approximate),
    hps=(HP("approximate", "bool", False, "use the tanh approximation"),),
    cases=(("6×8", "gelu approximate=true"),),
)
SILU = _unary(
    "silu",
    "Sigmoid linear unit x·σ(x) (swish).",
    lambda xs, p, s, a: xs[0] * sigmoid_ref(xs[0]),
    aliases=("swish",),
)


def softcap_ref(x: Any, c: float) -> Any:
    """c·tanh(x/c): near x for |x| ≪ c, never beyond ±c."""
    return c * numpy().tanh(x / c)


def _softcap_shape(c: Ctx) -> Shape:
    if not c.hp["c"] > 0:
        c.fail(f"the cap must be positive, got {c.hp['c']}", hparam="c")
    return c.x


SOFTCAP = Layer(
    name="softcap",
    aliases=("soft-cap",),
    category="Activation",
    doc="Soft capping, c·tanh(x/c): values squashed smoothly into (−c, c), near x when small "
    "(Gemma 2's final logits, c = 30; its attention scores are `mha softcap=`).",
    hparams=(HP("c", "float", doc="the cap"),),
    shape=_softcap_shape,
    layout="any",
    rf=True,
    example=("16×10", "softcap c=30.0"),
    cases=(("6×8", "softcap c=0.5"),),
    reference=lambda xs, p, s, a: softcap_ref(xs[0], a.c),
    step=lambda c: TOKEN,
)
IDENTITY = _unary(
    "identity", "Passes its input through (a named junction).", lambda xs, p, s, a: xs[0]
)


def softmax_ref(x: Any, axis: int) -> Any:
    e = numpy().exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


SOFTARGMAX = Layer(
    name="softargmax",
    aliases=("softmax",),
    category="Activation",
    doc="Softargmax (the book's name for softmax) along an axis, the last by default.",
    hparams=(HP("axis", "axis", -1, "the axis that sums to 1"),),
    resolve=lambda c: AxisAttrs(resolve_axis(c)),
    example=("16×10", "softargmax"),
    step=lambda c: per_token_axis(c, c.a.axis),
    cases=(("6×8", "softargmax axis=0"),),
    reference=lambda xs, p, s, a: softmax_ref(xs[0], a.axis + 1),
)


def _dropout(name: str, doc: str, layout: str, aliases: tuple[str, ...] = ()) -> Layer:
    def shape(c: Ctx) -> Shape:
        if not 0.0 <= c.hp["p"] < 1.0:
            c.fail(f"the dropout probability must be in [0, 1), got {c.hp['p']}", hparam="p")
        if layout == "cl":
            c.rank(2, 3, what="C×T or C×H×W")
        return c.x

    return Layer(
        name=name,
        aliases=aliases,
        category="Activation",
        doc=doc,
        hparams=(HP("p", "float", 0.5, "probability of zeroing"),),
        shape=shape,
        layout=layout,
        rf=True,
        stochastic=True,
        step=(lambda c: TOKEN) if layout == "any" else lambda c: per_token_axis(c, 0),
        example=("32×8×8", f"{name} p=0.2"),
        reference=lambda xs, p, s, a: xs[0],  # evaluation: the identity
    )


DROPOUT = _dropout(
    "dropout",
    "Zeroes each value with probability p in training and scales the rest by 1/(1−p); the "
    "identity in evaluation (PyTorch's p=0.5 by default).",
    "any",
)
DROPOUT2D = _dropout(
    "dropout-2d",
    "2-D dropout: zeroes whole channels of a C×H×W map (or C×T) with probability p.",
    "cl",
    aliases=("dropout2d", "2d-dropout"),
)

# ReLU6 is MobileNetV2's activation (Sandler et al. 2018).
RELU6 = Layer(
    name="relu6",
    category="Activation",
    doc="ReLU clipped at 6, min(max(0, x), 6) (MobileNetV2, PyTorch's ReLU6).",
    layout="any",
    rf=True,
    example=("32×8×8", "relu6"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: numpy().clip(xs[0], 0.0, 6.0),
)


LAYERS = (
    RELU,
    TANH,
    SIGMOID,
    LEAKY,
    GELU,
    SILU,
    SOFTCAP,
    IDENTITY,
    SOFTARGMAX,
    DROPOUT,
    DROPOUT2D,
    RELU6,
)

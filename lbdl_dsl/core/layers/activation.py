"""Activations and dropout: shape-preserving, parameter-free, light boxes in the diagrams."""

from __future__ import annotations

from lbdl_dsl.core.layers.base import HP, Ctx, Emit, Layer


def _unary(name: str, fn: str, doc: str, aliases: tuple[str, ...] = (), hps=(), args=()) -> Layer:
    def lower(e: Emit) -> str:
        return e.call(fn, e.x[0], *(e.hp[a] for a in args))

    return Layer(
        name=name,
        aliases=aliases,
        category="Activation",
        doc=doc,
        hparams=tuple(hps),
        lower=lower,
        layout="any",
        example=("32×8×8", name if not hps else f"{name} {hps[0].name}={hps[0].default}"),
    )


RELU = _unary("relu", "relu", "Rectified linear unit, max(0, x).")
TANH = _unary("tanh", "tanh", "Hyperbolic tangent.")
SIGMOID = _unary("sigmoid", "sigmoid", "Logistic sigmoid, 1/(1 + e⁻ˣ).")
LEAKY = _unary(
    "leaky-relu",
    "leaky_relu",
    "Leaky ReLU: x for x ≥ 0, a·x otherwise (PyTorch's a=0.01 by default).",
    aliases=("leaky relu", "leakyrelu"),
    hps=(HP("a", "float", 0.01, "slope for negative inputs"),),
    args=("a",),
)
GELU = _unary(
    "gelu",
    "gelu",
    "Gaussian error linear unit, exact by default; `approximate=true` is GPT-2's tanh form.",
    hps=(HP("approximate", "bool", False, "use the tanh approximation"),),
    args=("approximate",),
)
SILU = _unary("silu", "silu", "Sigmoid linear unit x·σ(x) (swish).", aliases=("swish",))
IDENTITY = _unary("identity", "identity", "Passes its input through (a named junction).")


def _axis(c: Ctx) -> tuple:
    a = c.hp["axis"]
    if not -len(c.x) <= a < len(c.x):
        c.fail(f"axis {a} is out of range for {len(c.x)} axes", hparam="axis")
    return c.x


def _softmax_lower(e: Emit) -> str:
    return e.call("softmax", e.x[0], e.hp["axis"] if e.hp["axis"] < 0 else e.hp["axis"] + 1)


SOFTARGMAX = Layer(
    name="softargmax",
    aliases=("softmax",),
    category="Activation",
    doc="Softargmax (the book's name for softmax) along an axis, the last by default.",
    hparams=(HP("axis", "axis", -1, "the axis that sums to 1"),),
    shape=_axis,
    lower=_softmax_lower,
    example=("16×10", "softargmax"),
)


def _dropout(name: str, fn: str, doc: str, layout: str, aliases=()) -> Layer:
    def lower(e: Emit) -> str:
        return e.call(fn, e.x[0], e.hp["p"], e.train, e.key())

    def shape(c: Ctx) -> tuple:
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
        lower=lower,
        layout=layout,
        stochastic=True,
        example=("32×8×8", f"{name} p=0.2"),
    )


DROPOUT = _dropout(
    "dropout",
    "dropout",
    "Zeroes each value with probability p in training and scales the rest by 1/(1−p); the "
    "identity in evaluation (PyTorch's p=0.5 by default).",
    "any",
)
DROPOUT2D = _dropout(
    "dropout-2d",
    "dropout_channels",
    "2-D dropout: zeroes whole channels of a C×H×W map (or C×T) with probability p.",
    "cl",
    aliases=("dropout2d", "2d-dropout"),
)

LAYERS = (RELU, TANH, SIGMOID, LEAKY, GELU, SILU, IDENTITY, SOFTARGMAX, DROPOUT, DROPOUT2D)

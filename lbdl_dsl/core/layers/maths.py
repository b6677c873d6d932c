"""Elementwise maths: exp, log, abs, softplus, sqrt, rsqrt, clamp, pow.

What recurrences and state spaces compute between their boxes (Mamba's Δ = softplus(·),
A = −exp(A_log)), and what a norm or a distance written out by hand needs. Each keeps its
input's shape, counts no parameters and no multiply-accumulates (as the other activations), and
refuses a Boolean tensor (`cast` first). The domains are the functions' own: `log` and `sqrt`
of a negative value are NaN, as in NumPy and JAX; `clamp` first where that matters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.base import HP, Attrs, Ctx, Layer, Shape, numpy
from lbdl_dsl.core.layers.tensor import refuse_bool


def _numeric(c: Ctx) -> Shape:
    refuse_bool(c)
    return c.x


def _elementwise(
    name: str,
    doc: str,
    reference: Callable[..., Any],
    hps: tuple[HP, ...] = (),
    resolve: Callable[[Ctx], Attrs] | None = None,
    example: str | None = None,
    cases: tuple[tuple[str, str], ...] = (),
    aliases: tuple[str, ...] = (),
    positive: bool = False,
) -> Layer:
    return Layer(
        name=name,
        aliases=aliases,
        category="Maths",
        doc=doc,
        hparams=hps,
        resolve=resolve,
        shape=_numeric,
        layout="any",
        rf=True,
        example=("6×8", example or name),
        cases=cases,
        positive=positive,
        reference=reference,
    )


def softplus_ref(x: Any, beta: float = 1.0) -> Any:
    """log(1 + e^(βx))/β, computed without overflow."""
    np = numpy()
    z = beta * np.asarray(x, np.float64)
    return (np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))) / beta


@dataclass(frozen=True)
class ClampAttrs(Attrs):
    lo: float | None
    hi: float | None


def _clamp_attrs(c: Ctx) -> ClampAttrs:
    lo, hi = c.hp["min"], c.hp["max"]
    if lo is None and hi is None:
        c.fail("`clamp` needs a bound: min=, max= or both", "e.g. `clamp min=1e-6`")
    if lo is not None and hi is not None and lo > hi:
        c.fail(f"min={lo} is above max={hi}", hparam="min")
    return ClampAttrs(lo, hi)


def clamp_ref(x: Any, lo: float | None, hi: float | None) -> Any:
    np = numpy()
    return np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi)


EXP = _elementwise(
    "exp", "The exponential eˣ of every value.", lambda xs, p, s, a: numpy().exp(xs[0])
)
LOG = _elementwise(
    "log",
    "The natural logarithm of every value (NaN below 0, −∞ at 0: `clamp min=` first where the "
    "input may reach them).",
    lambda xs, p, s, a: numpy().log(xs[0]),
    positive=True,
)
ABS = _elementwise("abs", "The absolute value |x| of every value.", lambda xs, p, s, a: abs(xs[0]))
SOFTPLUS = _elementwise(
    "softplus",
    "Softplus, log(1 + e^(βx))/β (PyTorch's, β=1 by default): a smooth ReLU that stays "
    "positive (Mamba's step size Δ).",
    lambda xs, p, s, a: softplus_ref(xs[0], a.beta),
    hps=(HP("beta", "float", 1.0, "the sharpness β"),),
    cases=(("6×8", "softplus beta=2.0"),),
)
SQRT = _elementwise(
    "sqrt",
    "The square root of every value (NaN below 0).",
    lambda xs, p, s, a: numpy().sqrt(xs[0]),
    positive=True,
)
RSQRT = _elementwise(
    "rsqrt",
    "The reciprocal square root 1/√x of every value (a norm written out by hand).",
    lambda xs, p, s, a: 1.0 / numpy().sqrt(xs[0]),
    positive=True,
)
CLAMP = _elementwise(
    "clamp",
    "Limits every value to [min, max]; either bound may be left out.",
    lambda xs, p, s, a: clamp_ref(xs[0], a.lo, a.hi),
    hps=(
        HP("min", "float", None, "the lower bound (default: none)"),
        HP("max", "float", None, "the upper bound (default: none)"),
    ),
    resolve=_clamp_attrs,
    example="clamp min=-1.0 max=1.0",
    cases=(("6×8", "clamp min=0.5"), ("6×8", "clamp max=0.0")),
    aliases=("clip",),
)
POW = _elementwise(
    "pow",
    "Every value to the power p: `pow p=2` squares (a non-whole p of a negative value is NaN).",
    lambda xs, p, s, a: numpy().power(xs[0], a.p),
    hps=(HP("p", "float", 2.0, "the exponent"),),
    example="pow p=3.0",
    cases=(("6×8", "pow p=2.0"), ("6×8", "pow p=0.5")),
    positive=True,
    aliases=("power",),
)

LAYERS = (EXP, LOG, ABS, SOFTPLUS, SQRT, RSQRT, CLAMP, POW)

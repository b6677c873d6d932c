"""Generic primitives the architectures after the book need: fixed multipliers, sin and cos,
stochastic depth, layer scale, a gather, timestep embeddings.

`times` multiplies by a constant known when the spec is checked (√D for an embedding, 1/√d for
attention scores, quick-GELU's 1.702), `neg` negates; `sin` and `cos` apply to any value;
`drop-path` drops whole samples of a residual branch in training (stochastic depth, Huang et
al. 2016; as ConvNeXt, Swin and EfficientNet use it); `layer-scale` multiplies each channel by a
trainable factor that starts small (CaiT, ConvNeXt: 1e-6); `gather(idx)` picks values at the
whole-number positions of another tensor (a constant index, such as Swin's relative positions);
`timestep-embed` is the sinusoidal embedding of a diffusion step (DDPM, ADM, DiT); `token-drop`
is DiT's label dropout for classifier-free guidance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    TOKEN,
    Attrs,
    Const,
    Ctx,
    Layer,
    PSpec,
    Shape,
    fmt_shape,
    numpy,
    resolve_axis,
)
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class TimesAttrs(Attrs):
    """The factor, a number once the sizes under the root have their values."""

    factor: float


def _times_attrs(c: Ctx) -> TimesAttrs:
    factor = float(c.hp["a"])
    for name, power in (("sqrt", 0.5), ("rsqrt", -0.5)):
        if c.hp.get(name) is not None:
            n = c.const(name)
            if n < 1:
                c.fail(f"`{name}={n}`: the root of a size must be of a size ≥ 1", hparam=name)
            factor *= n**power
    return TimesAttrs(factor)


TIMES = Layer(
    name="times",
    aliases=("mul-const", "scale-by"),
    category="Activation",
    doc="Multiplies every value by a constant: `a=1.702` (quick-GELU's), `sqrt=D` (√D, an "
    "embedding's scale), `rsqrt=d` (1/√d, attention scores), or their product. No "
    "parameters; the factor is fixed when the spec is checked.",
    hparams=(
        HP("a", "float", 1.0, "the factor"),
        HP("sqrt", "size", None, "multiply also by the square root of this size"),
        HP("rsqrt", "size", None, "divide also by the square root of this size"),
    ),
    resolve=_times_attrs,
    layout="any",
    rf=True,
    example=("16×64", "times rsqrt=64"),
    step=lambda c: TOKEN,
    cases=(("6×8", "times a=1.702"), ("6×8", "times a=-0.5 sqrt=8")),
    reference=lambda xs, p, s, a: xs[0] * a.factor,
)

NEG = Layer(
    name="neg",
    aliases=("negate",),
    category="Activation",
    doc="Negation, −x.",
    layout="any",
    rf=True,
    example=("32×8×8", "neg"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: -xs[0],
)

SIN = Layer(
    name="sin",
    category="Activation",
    doc="Sine of every value (a sinusoidal embedding of a computed value, SIREN).",
    layout="any",
    rf=True,
    example=("16×64", "sin"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: numpy().sin(xs[0]),
)

COS = Layer(
    name="cos",
    category="Activation",
    doc="Cosine of every value.",
    layout="any",
    rf=True,
    example=("16×64", "cos"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: numpy().cos(xs[0]),
)


def _drop_path_shape(c: Ctx) -> Shape:
    if not 0.0 <= c.hp["p"] < 1.0:
        c.fail(f"the drop probability must be in [0, 1), got {c.hp['p']}", hparam="p")
    return c.x


DROP_PATH = Layer(
    name="drop-path",
    aliases=("stochastic-depth", "droppath"),
    category="Activation",
    doc="Stochastic depth (Huang et al. 2016), as ConvNeXt, Swin and EfficientNet put it at the "
    "end of a residual branch: in training, each sample's whole tensor is zeroed with "
    "probability p and the others scaled by 1/(1−p), so that the branch is skipped for that "
    "sample; the identity in evaluation.",
    hparams=(HP("p", "float", 0.1, "probability of dropping a sample's branch"),),
    shape=_drop_path_shape,
    layout="any",
    rf=True,
    stochastic=True,
    example=("32×8×8", "drop-path p=0.2"),
    reference=lambda xs, p, s, a: xs[0],  # evaluation: the identity
)


@dataclass(frozen=True)
class LayerScaleAttrs(Attrs):
    """The axis scaled, the starting value, and where the code keeps the input (``cl`` when
    it is the channels of a map, so that they are last in the code)."""

    axis: int
    init: float
    layout: str
    last: bool


def _layer_scale_attrs(c: Ctx) -> LayerScaleAttrs:
    x = c.rank(1, 2, 3, 4)
    channels = 0 if len(x) == 3 else len(x) - 1  # a C×H×W map's, or the last
    axis = channels if c.hp.get("axis") is None else resolve_axis(c)
    layout = "cl" if axis == 0 and len(x) >= 2 else "cf"
    return LayerScaleAttrs(axis, c.hp["init"], layout, layout == "cl" or axis == len(x) - 1)


def along_ref(v: Any, axis: int, ndim: int) -> Any:
    """A vector shaped to broadcast along per-sample ``axis`` of a batch of ndim axes."""
    shape = [1] * ndim
    shape[axis + 1] = len(v)
    return numpy().reshape(v, shape)


LAYER_SCALE = Layer(
    name="layer-scale",
    aliases=("layerscale",),
    category="Normalisation",
    doc="Multiplies each channel by a trainable factor that starts at `init` (Touvron et al. "
    "2021's LayerScale; ConvNeXt's γ, 1e-6). The channels are the first axis of a C×H×W map "
    "and the last of anything else, or the `axis` given.",
    hparams=(
        HP("init", "float", 1e-6, "the factors' starting value"),
        HP("axis", "axis", None, "the axis of the factors (default: the channels)"),
    ),
    resolve=_layer_scale_attrs,
    params=lambda c: {"gamma": PSpec((c.x[c.a.axis],), Const(c.a.init), ("norm",))},
    layout="attrs",
    rf=True,
    example=("96×8×8", "layer-scale"),
    cases=(("6×8", "layer-scale init=0.1"), ("4×6×8", "layer-scale init=0.5 axis=1")),
    reference=lambda xs, p, s, a: xs[0] * along_ref(p["gamma"], a.axis, xs[0].ndim),
)


@dataclass(frozen=True)
class GatherAttrs(Attrs):
    axis: int


def _gather_attrs(c: Ctx) -> GatherAttrs:
    if len(c.ins) < 2:
        c.fail("`gather` reads the indices in parentheses: `gather(idx)`")
    return GatherAttrs(resolve_axis(c))


def _gather_shape(c: Ctx) -> Shape:
    a, index = c.a.axis, c.ins[1]
    if c.dtypes and c.dtypes[1] != "int":
        c.fail(
            f"`gather` needs whole-number indices, got a {c.dtypes[1]} tensor",
            "make the index with `rel-index`, or declare it `int<N>`",
        )
    n, vocab = c.x[a].as_int(), c.vocab[1] if len(c.vocab) > 1 else None
    top = vocab.as_int() if isinstance(vocab, Expr) else None
    if n is not None and top is not None and top > n:
        c.fail(
            f"the indices reach {top - 1}, past the {n} positions of axis {a} of {fmt_shape(c.x)}",
        )
    return (*c.x[:a], *index, *c.x[a + 1 :])


def gather_ref(x: Any, index: Any, axis: int) -> Any:
    np = numpy()
    index = np.broadcast_to(index, (x.shape[0], *index.shape[1:]))
    return np.stack([np.take(x[b], index[b], axis=axis) for b in range(x.shape[0])])


GATHER = Layer(
    name="gather",
    aliases=("take-along", "index"),
    category="Combine",
    doc="Values of the flowing tensor at the whole-number positions held by the tensor in "
    "parentheses, along one axis: `gather(idx)` on an N×H table with an M×M index gives "
    "M×M×H (Swin's relative position bias, with a `rel-index` constant). The indices must "
    "stay within the axis.",
    hparams=(HP("axis", "axis", 0, "the axis the indices count along"),),
    arity=(2, 2),
    resolve=_gather_attrs,
    shape=_gather_shape,
    keeps_dtype=True,
    example=("5×3; I: 4 int<5>", "gather(I)  4×3"),
    cases=(("6×5; J: 2×3 int<5>", "gather(J) axis=1  6×2×3"),),
    reference=lambda xs, p, s, a: gather_ref(xs[0], xs[1], a.axis),
)


@dataclass(frozen=True)
class TimestepAttrs(Attrs):
    """The embedding's size, the longest period, and whether sines come first."""

    d: Expr
    period: float
    sin_first: bool


def _timestep_attrs(c: Ctx) -> TimestepAttrs:
    c.rank(1, 2, what="N or N×M")
    d = c.const("d")
    if d < 2:
        c.fail(f"the embedding needs at least 2 features, got d={d}", hparam="d")
    if not c.hp["period"] > 1:
        c.fail(f"the period must be more than 1, got {c.hp['period']}", hparam="period")
    return TimestepAttrs(Expr.lift(d), c.hp["period"], c.hp["order"] == "sin-cos")


def timestep_ref(t: Any, d: int, period: float, sin_first: bool) -> Any:
    """cos(t·ωᵢ) then sin(t·ωᵢ), ωᵢ = period^(−i/half), i < half = ⌊d/2⌋; a zero if d is odd."""
    np = numpy()
    half = d // 2
    freqs = np.exp(-math.log(period) * np.arange(half) / half)
    args = np.asarray(t, np.float64)[..., None] * freqs
    parts = [np.sin(args), np.cos(args)] if sin_first else [np.cos(args), np.sin(args)]
    if d % 2:
        parts.append(np.zeros((*args.shape[:-1], 1)))
    return np.concatenate(parts, axis=-1)


TIMESTEP_EMBED = Layer(
    name="timestep-embed",
    aliases=("time-embed", "t-embed"),
    category="Dense",
    doc="The sinusoidal embedding of a diffusion step (or any number) t, each value becoming d "
    "features: cos(t·ωᵢ) and sin(t·ωᵢ) with ωᵢ = period^(−i/(d/2)), cosines first as in ADM "
    "and DiT (`order=sin-cos` for DDPM's order). N → N×d. No parameters.",
    hparams=(
        HP("d", "size", doc="the number of features (from the annotation when left out)"),
        HP("period", "float", 10_000.0, "the longest period"),
        HP("order", "choice", "cos-sin", "which half comes first", ("cos-sin", "sin-cos")),
    ),
    resolve=_timestep_attrs,
    shape=lambda c: (*c.x, c.a.d),
    from_annotation=(("d", -1),),
    example=("1", "timestep-embed  1×256"),
    cases=(("3", "timestep-embed d=9 order=sin-cos period=100"),),
    reference=lambda xs, p, s, a: timestep_ref(xs[0], a.d, a.period, a.sin_first),
)


def _token_drop_type(c: Ctx) -> tuple[str, Expr | None]:
    null, vocab = Expr.lift(c.hp["null"]), c.vocab[0] if c.vocab else None
    if vocab is None:
        return "int", None
    top = (vocab - null - 1).as_int()
    return "int", vocab if top is not None and top >= 0 else null + 1


def _token_drop_shape(c: Ctx) -> Shape:
    if c.dtypes and c.dtypes[0] != "int":
        c.fail("`token-drop` replaces tokens (integers), got a float tensor")
    if not 0.0 <= c.hp["p"] < 1.0:
        c.fail(f"the drop probability must be in [0, 1), got {c.hp['p']}", hparam="p")
    c.const("null")
    return c.x


TOKEN_DROP = Layer(
    name="token-drop",
    aliases=("label-drop",),
    category="Dense",
    doc="In training, replaces all the tokens of a sample, with probability p, by the token "
    "`null` (DiT's label dropout for classifier-free guidance: the class becomes the extra "
    '"no class" label, 1000 of 1001); the identity in evaluation. The range of the tokens '
    "grows to include `null`, so that an `embed` after it has the row.",
    hparams=(
        HP("p", "float", 0.1, "probability of replacing a sample's tokens"),
        HP("null", "size", doc="the token that replaces them"),
    ),
    shape=_token_drop_shape,
    out_type=_token_drop_type,
    stochastic=True,
    example=("1 int<10>", "token-drop null=10"),
    reference=lambda xs, p, s, a: xs[0],  # evaluation: the identity
)

LAYERS = (TIMES, NEG, SIN, COS, DROP_PATH, LAYER_SCALE, GATHER, TIMESTEP_EMBED, TOKEN_DROP)

"""Normalisation layers: batchnorm, layernorm, group norm, RMS norm (book § 4.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    ONES,
    ZEROS,
    Attrs,
    Ctx,
    Layer,
    PSpec,
    Shape,
    Weights,
    numpy,
)


def _bn_params(c: Ctx) -> dict[str, PSpec]:
    return {"scale": PSpec((c.x[0],), ONES, ("norm",)), "bias": PSpec((c.x[0],), ZEROS, ("norm",))}


def _bn_state(c: Ctx) -> dict[str, PSpec]:
    return {"mean": PSpec((c.x[0],), ZEROS, ("norm",)), "var": PSpec((c.x[0],), ONES, ("norm",))}


def _channel_shape(x: Any) -> tuple[int, ...]:
    """(1, C, 1, 1...): a per-channel vector against a channels-first batch."""
    shape: tuple[int, ...] = (1, x.shape[1]) + (1,) * (x.ndim - 2)  # x: a NumPy array
    return shape


def batchnorm_ref(x: Any, p: Weights, s: Weights, eps: float) -> Any:
    """Evaluation mode: the running averages, then the per-channel scale and shift."""
    np = numpy()
    shape = _channel_shape(x)
    y = (x - np.reshape(s["mean"], shape)) / np.sqrt(np.reshape(s["var"], shape) + eps)
    return y * np.reshape(p["scale"], shape) + np.reshape(p["bias"], shape)


BATCHNORM = Layer(
    name="batchnorm",
    aliases=("batch-norm", "bn"),
    category="Normalisation",
    doc="Batch normalisation over the batch and every axis but the channels (the first axis of "
    "C, C×T or C×H×W): batch statistics and running averages in training, the running "
    "averages in evaluation. Trainable scale and shift, running mean and variance as state.",
    hparams=(
        HP("eps", "float", 1e-5, "added to the variance"),
        HP("momentum", "float", 0.1, "weight of the new batch in the running averages"),
    ),
    shape=lambda c: c.rank(1, 2, 3, what="C, C×T or C×H×W"),
    params=_bn_params,
    state=_bn_state,
    layout="cl",
    rf=True,
    example=("32×24×24", "batchnorm"),
    reference=lambda xs, p, s, a: batchnorm_ref(xs[0], p, s, a.eps),
)


@dataclass(frozen=True)
class LayerNormAttrs(Attrs):
    """How many trailing axes one normalisation covers, and its epsilon."""

    n_axes: int
    eps: float


def _ln_attrs(c: Ctx) -> LayerNormAttrs:
    c.rank(1, 2, 3, 4)
    n = c.hp.get("axes")
    if n is None:
        n = len(c.x) if len(c.x) == 3 else 1
    else:
        n = c.const("axes")
        if not 1 <= n <= len(c.x):
            c.fail(f"`axes={n}` must be between 1 and the input's {len(c.x)} axes", hparam="axes")
    return LayerNormAttrs(n, c.hp["eps"])


def _ln_params(c: Ctx) -> dict[str, PSpec]:
    shape = c.x[len(c.x) - c.a.n_axes :]
    roles = ("norm",) * len(shape)
    return {"scale": PSpec(shape, ONES, roles), "bias": PSpec(shape, ZEROS, roles)}


def layernorm_ref(x: Any, scale: Any, bias: Any, eps: float, n_axes: int) -> Any:
    """PyTorch's LayerNorm over the last ``n_axes`` axes (biased variance)."""
    np = numpy()
    flat = x.reshape(*x.shape[: x.ndim - n_axes], -1)
    mu = flat.mean(axis=-1, keepdims=True)
    var = ((flat - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((flat - mu) / np.sqrt(var + eps)).reshape(x.shape)
    y = y if scale is None else y * scale
    return y if bias is None else y + bias


LAYERNORM = Layer(
    name="layernorm",
    aliases=("layer-norm", "ln"),
    category="Normalisation",
    doc="Layer normalisation of each sample over its feature axes: the last axis of a T×D "
    "sequence (one normalisation per position) and all of C×H×W for an image (Fig. 4.9), with "
    "scale and shift of the normalised shape. `axes=n` normalises the last n axes instead.",
    hparams=(
        HP("eps", "float", 1e-5, "added to the variance"),
        HP("axes", "size", None, "how many trailing axes to normalise"),
    ),
    resolve=_ln_attrs,
    params=_ln_params,
    example=("16×64", "layernorm"),
    cases=(("2×3×3", "layernorm"), ("4×6×8", "layernorm axes=2")),
    reference=lambda xs, p, s, a: layernorm_ref(xs[0], p["scale"], p["bias"], a.eps, a.n_axes),
)


def _gn_shape(c: Ctx) -> Shape:
    x = c.rank(2, 3, what="C×T or C×H×W")
    g, ch = c.const("g"), x[0].as_int()
    if g < 1 or (ch is not None and ch % g):
        c.fail(f"`g={g}` groups must divide the {x[0]} channels", hparam="g")
    return x


def groupnorm_ref(x: Any, scale: Any, bias: Any, groups: int, eps: float) -> Any:
    """PyTorch's GroupNorm: each sample's channels in groups, each group over its positions."""
    np = numpy()
    b, c = x.shape[:2]
    g = x.reshape(b, groups, -1)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    shape = _channel_shape(x)
    return y.reshape(x.shape) * np.reshape(scale, shape) + np.reshape(bias, shape)


GROUPNORM = Layer(
    name="groupnorm",
    aliases=("group-norm", "gn"),
    category="Normalisation",
    doc="Group normalisation (Wu & He 2018): channels split into g groups, each normalised over "
    "its channels and positions; scale and shift per channel.",
    hparams=(
        HP("g", "size", 32, "number of groups"),
        HP("eps", "float", 1e-5, "added to the variance"),
    ),
    shape=_gn_shape,
    params=_bn_params,
    layout="cl",
    rf=True,
    example=("64×8×8", "groupnorm g=8"),
    reference=lambda xs, p, s, a: groupnorm_ref(xs[0], p["scale"], p["bias"], a.g, a.eps),
)


def rmsnorm_ref(x: Any, scale: Any, eps: float) -> Any:
    """x / √(mean(x²) + ε) · scale over the last axis, in float64."""
    np = numpy()
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * scale


RMSNORM = Layer(
    name="rmsnorm",
    aliases=("rms-norm",),
    category="Normalisation",
    doc="Root-mean-square normalisation of the last axis with a trainable scale (no shift, no "
    "centring).",
    hparams=(HP("eps", "float", 1e-6, "added to the mean square"),),
    shape=lambda c: c.rank(1, 2, 3),
    params=lambda c: {"scale": PSpec((c.x[-1],), ONES, ("norm",))},
    example=("16×64", "rmsnorm"),
    reference=lambda xs, p, s, a: rmsnorm_ref(xs[0], p["scale"], a.eps),
)

LAYERS = (BATCHNORM, LAYERNORM, GROUPNORM, RMSNORM)

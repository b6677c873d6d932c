"""Normalisation layers: batchnorm, layernorm, group norm, RMS norm (book § 4.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    ONES,
    ZEROS,
    Arrays,
    Attrs,
    Const,
    Ctx,
    Layer,
    PSpec,
    Shape,
    Step,
    Weights,
    numpy,
    per_token_axis,
    resolve_axis,
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
    """What one normalisation covers: the last ``n_axes`` axes, or the one ``axis`` chosen
    (axis 0 of a C×H×W map: each position over its channels, ConvNeXt's and Swin's norm);
    whether it has a trainable scale and shift; and where the code keeps the input (``cl``
    when the chosen axis is the channels of a map, so that they are last in the code, as
    after the convolution before them). The record prints only what differs from the book's
    layernorm, so that existing specs read as before."""

    n_axes: int
    eps: float
    axis: int | None = None
    affine: bool = True
    layout: str = "cf"
    last: bool = True  # what is normalised is the last axes in the code (the common case)
    offset: float = 0.0  # the gain is offset + scale (Gemma's 1 + w)

    def items(self) -> tuple[tuple[str, Any], ...]:
        out: list[tuple[str, Any]] = [("n_axes", self.n_axes), ("eps", self.eps)]
        if self.axis is not None:
            out = [("axis", self.axis), ("eps", self.eps)]
        if not self.affine:
            out.append(("affine", False))
        if self.offset:
            out.append(("offset", self.offset))
        return tuple(out)


def _chosen_axis(c: Ctx) -> tuple[int, str]:
    """The `axis` hyper-parameter from 0, and the layout the code should keep the input in."""
    a = resolve_axis(c)
    return a, "cl" if a == 0 and len(c.x) >= 2 else "cf"


def _ln_attrs(c: Ctx) -> LayerNormAttrs:
    c.rank(1, 2, 3, 4)
    affine = c.hp.get("affine", True)
    if c.hp.get("axis") is not None:
        if c.hp.get("axes") is not None:
            c.fail("give either `axes=` (the last n axes) or `axis=` (one axis), not both")
        axis, layout = _chosen_axis(c)
        last = layout == "cl" or axis == len(c.x) - 1
        return LayerNormAttrs(1, c.hp["eps"], axis, affine, layout, last, _offset(c))
    n = c.hp.get("axes")
    if n is None:
        n = len(c.x) if len(c.x) == 3 else 1
    else:
        n = c.const("axes")
        if not 1 <= n <= len(c.x):
            c.fail(f"`axes={n}` must be between 1 and the input's {len(c.x)} axes", hparam="axes")
    return LayerNormAttrs(n, c.hp["eps"], None, affine, offset=_offset(c))


def _offset(c: Ctx) -> float:
    """`offset=1`: the gain is 1 + w, w starting at 0 (Gemma's norms), so weights trained so
    import as they are."""
    off = float(c.hp.get("offset", 0.0))
    if off and not c.hp.get("affine", True):
        c.fail("`offset=` shifts the trainable gain, which `affine=false` leaves out")
    return off


_OFFSET = HP("offset", "float", 0.0, "the gain is offset + w (1: Gemma's 1 + w, w from 0)")


def _ln_step(c: Ctx) -> Step:
    """Each position alone when the sequence's axis 0 is not among those normalised."""
    if c.a.axis is not None:
        return per_token_axis(c, c.a.axis)
    return per_token_axis(c, 0 if c.a.n_axes >= len(c.x) else len(c.x) - 1)


def _normalised(c: Ctx) -> Shape:
    """The shape the scale and shift have: the chosen axis, or the last ``n_axes`` axes."""
    if c.a.axis is not None:
        return (c.x[c.a.axis],)
    return c.x[len(c.x) - c.a.n_axes :]


def _ln_params(c: Ctx) -> dict[str, PSpec]:
    if not c.a.affine:
        return {}
    shape = _normalised(c)
    roles = ("norm",) * len(shape)
    scale = Const(1.0 - c.a.offset)  # the gain starts at 1 whatever the offset
    return {"scale": PSpec(shape, scale, roles), "bias": PSpec(shape, ZEROS, roles)}


def layernorm_ref(x: Any, scale: Any, bias: Any, eps: float, n_axes: int) -> Any:
    """PyTorch's LayerNorm over the last ``n_axes`` axes (biased variance)."""
    np = numpy()
    flat = x.reshape(*x.shape[: x.ndim - n_axes], -1)
    mu = flat.mean(axis=-1, keepdims=True)
    var = ((flat - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((flat - mu) / np.sqrt(var + eps)).reshape(x.shape)
    y = y if scale is None else y * scale
    return y if bias is None else y + bias


def _at_axis(x: Any, axis: int, fn: Any, *vectors: Any) -> Any:
    """``fn`` applied with the batch's axis ``axis`` (counted per sample) moved last, and back."""
    np = numpy()
    moved = np.moveaxis(x, axis + 1, -1)
    return np.moveaxis(fn(moved, *vectors), -1, axis + 1)


def _ln_ref(xs: Arrays, p: Weights, s: Weights, a: Any) -> Any:
    scale, bias = p.get("scale"), p.get("bias")
    scale = None if scale is None else scale + a.offset
    if a.axis is None:
        return layernorm_ref(xs[0], scale, bias, a.eps, a.n_axes)
    return _at_axis(xs[0], a.axis, lambda m: layernorm_ref(m, scale, bias, a.eps, 1))


LAYERNORM = Layer(
    name="layernorm",
    aliases=("layer-norm", "ln"),
    category="Normalisation",
    doc="Layer normalisation of each sample over its feature axes: the last axis of a T×D "
    "sequence (one normalisation per position) and all of C×H×W for an image (Fig. 4.9), with "
    "scale and shift of the normalised shape. `axes=n` normalises the last n axes instead; "
    "`axis=a` one chosen axis, so that `axis=0` normalises each position of a C×H×W map over "
    "its channels (ConvNeXt's and Swin's norm, with no transposes). `affine=false` leaves out "
    "the scale and shift (DiT's adaptive norm, whose scale and shift are computed).",
    hparams=(
        HP("eps", "float", 1e-5, "added to the variance"),
        HP("axes", "size", None, "how many trailing axes to normalise"),
        HP("axis", "axis", None, "normalise this one axis instead (0: the channels of a map)"),
        HP("affine", "bool", True, "a trainable scale and shift"),
        _OFFSET,
    ),
    resolve=_ln_attrs,
    params=_ln_params,
    layout="attrs",
    example=("16×64", "layernorm"),
    step=_ln_step,
    cases=(
        ("2×3×3", "layernorm"),
        ("4×6×8", "layernorm axes=2"),
        ("8×5×6", "layernorm axis=0 eps=1e-6"),
        ("4×6×8", "layernorm axis=1"),
        ("6×8", "layernorm offset=1.0"),
        ("6×8", "layernorm affine=false"),
        ("8×5×6", "layernorm axis=0 affine=false"),
    ),
    reference=_ln_ref,
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


@dataclass(frozen=True)
class RmsNormAttrs(Attrs):
    """The axis normalised (the last by default), whether it is scaled, where the code keeps
    the input (see `LayerNormAttrs`)."""

    eps: float
    axis: int
    affine: bool = True
    layout: str = "cf"
    last: bool = True  # the axis is the last one in the code (the common case)
    offset: float = 0.0  # the gain is offset + scale (Gemma's 1 + w)

    def items(self) -> tuple[tuple[str, Any], ...]:
        out: list[tuple[str, Any]] = [("eps", self.eps)]
        if not self.last or self.layout == "cl":
            out.append(("axis", self.axis))
        if not self.affine:
            out.append(("affine", False))
        if self.offset:
            out.append(("offset", self.offset))
        return tuple(out)


def _rms_attrs(c: Ctx) -> RmsNormAttrs:
    c.rank(1, 2, 3, 4)
    axis, layout = _chosen_axis(c)
    last = layout == "cl" or axis == len(c.x) - 1
    return RmsNormAttrs(c.hp["eps"], axis, c.hp["affine"], layout, last, _offset(c))


def rmsnorm_ref(x: Any, scale: Any, eps: float) -> Any:
    """x / √(mean(x²) + eps) over the last axis, in float64, times the scale (PyTorch's
    RMSNorm)."""
    np = numpy()
    x = np.asarray(x, np.float64)
    y = x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    return y if scale is None else y * scale


RMSNORM = Layer(
    name="rmsnorm",
    aliases=("rms-norm",),
    category="Normalisation",
    doc="Root-mean-square normalisation of the last axis with a trainable scale (no shift, no "
    "centring). `axis=0` normalises each position of a C×H×W map over its channels; "
    "`affine=false` leaves out the scale.",
    hparams=(
        HP("eps", "float", 1e-6, "added to the mean square"),
        HP("axis", "axis", -1, "the axis normalised (0: the channels of a map)"),
        HP("affine", "bool", True, "a trainable scale"),
        _OFFSET,
    ),
    resolve=_rms_attrs,
    params=lambda c: (
        {"scale": PSpec((c.x[c.a.axis],), Const(1.0 - c.a.offset), ("norm",))} if c.a.affine else {}
    ),
    layout="attrs",
    example=("16×64", "rmsnorm"),
    step=lambda c: per_token_axis(c, c.a.axis),
    cases=(
        ("8×5×6", "rmsnorm axis=0"),
        ("4×6×8", "rmsnorm axis=1 affine=false"),
        ("6×8", "rmsnorm offset=1.0"),
    ),
    reference=lambda xs, p, s, a: _at_axis(
        xs[0],
        a.axis,
        lambda m: rmsnorm_ref(m, None if "scale" not in p else p["scale"] + a.offset, a.eps),
    ),
)

LAYERS = (BATCHNORM, LAYERNORM, GROUPNORM, RMSNORM)

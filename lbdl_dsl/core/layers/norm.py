"""Normalisation layers: batchnorm, layernorm, group norm, RMS norm (book § 4.6)."""

from __future__ import annotations

from lbdl_dsl.core.layers.base import HP, ONES, ZEROS, Ctx, Emit, Layer, PSpec


def _bn_params(c: Ctx) -> dict[str, PSpec]:
    return {"scale": PSpec((c.x[0],), ONES, ("norm",)), "bias": PSpec((c.x[0],), ZEROS, ("norm",))}


def _bn_state(c: Ctx) -> dict[str, PSpec]:
    return {"mean": PSpec((c.x[0],), ZEROS, ("norm",)), "var": PSpec((c.x[0],), ONES, ("norm",))}


def _bn_lower(e: Emit) -> str:
    y = e.bind(
        e.call(
            "batch_norm",
            e.x[0],
            e.param("scale"),
            e.param("bias"),
            e.state("mean"),
            e.state("var"),
            e.train,
            e.hp["momentum"],
            e.hp["eps"],
        )
    )
    e.set_state("mean", f"{y}[1]")
    e.set_state("var", f"{y}[2]")
    return f"{y}[0]"


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
    lower=_bn_lower,
    layout="cl",
    example=("32×24×24", "batchnorm"),
)


def _ln_axes(c: Ctx) -> int:
    n = c.hp.get("axes")
    if n is None:
        return len(c.x) if len(c.x) == 3 else 1
    if not 1 <= n <= len(c.x):
        c.fail(f"`axes={n}` must be between 1 and the input's {len(c.x)} axes", hparam="axes")
    return n


def _ln_params(c: Ctx) -> dict[str, PSpec]:
    shape = c.x[len(c.x) - _ln_axes(c) :]
    return {
        "scale": PSpec(shape, ONES, ("norm",) * len(shape)),
        "bias": PSpec(shape, ZEROS, ("norm",) * len(shape)),
    }


def _ln_shape(c: Ctx) -> tuple:
    c.rank(1, 2, 3, 4)
    c.hp["n_axes"] = _ln_axes(c)
    return c.x


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
    shape=_ln_shape,
    params=_ln_params,
    lower=lambda e: e.call(
        "layer_norm", e.x[0], e.param("scale"), e.param("bias"), e.hp["eps"], e.hp["n_axes"]
    ),
    example=("16×64", "layernorm"),
)


def _gn_shape(c: Ctx) -> tuple:
    x = c.rank(2, 3, what="C×T or C×H×W")
    g, ch = c.const("g"), x[0].as_int()
    if g < 1 or (ch is not None and ch % g):
        c.fail(f"`g={g}` groups must divide the {x[0]} channels", hparam="g")
    return x


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
    lower=lambda e: e.call(
        "group_norm", e.x[0], e.param("scale"), e.param("bias"), e.hp["g"], e.hp["eps"]
    ),
    layout="cl",
    example=("64×8×8", "groupnorm g=8"),
)

RMSNORM = Layer(
    name="rmsnorm",
    aliases=("rms-norm",),
    category="Normalisation",
    doc="Root-mean-square normalisation of the last axis with a trainable scale (no shift, no "
    "centring).",
    hparams=(HP("eps", "float", 1e-6, "added to the mean square"),),
    shape=lambda c: c.rank(1, 2, 3),
    params=lambda c: {"scale": PSpec((c.x[-1],), ONES, ("norm",))},
    lower=lambda e: e.call("rms_norm", e.x[0], e.param("scale"), e.hp["eps"]),
    example=("16×64", "rmsnorm"),
)

LAYERS = (BATCHNORM, LAYERNORM, GROUPNORM, RMSNORM)

"""ONNX lowerings of the normalisations: ``BatchNormalization`` (or folded into the
convolution before it), ``LayerNormalization``, ``GroupNormalization``, ``RMSNormalization``."""

from __future__ import annotations

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering, known


def _channels(e: Emit) -> int:
    return e.shape()[0]


def batchnorm(e: Emit) -> str:
    """Evaluation mode: the running averages. With ``fold``, a batchnorm that is the only
    reader of a convolution becomes that convolution's weights and bias (one node less)."""
    c, eps = _channels(e), float(e.a.eps)
    scale = e.array("scale") if e.has_param("scale") else np.ones(c, np.float32)
    bias = e.array("bias") if e.has_param("bias") else np.zeros(c, np.float32)
    conv = e.producer(0, "Conv") if e.fold else None
    if conv is not None and "w" in conv.weights:
        factor = scale / np.sqrt(e.array("var").astype(np.float64) + eps)
        weights = e.scope.weights
        e.scope.folded |= set(conv.weights.values())
        w = weights[conv.weights["w"]]
        weights[conv.weights["w"]] = (w * factor.reshape(-1, *[1] * (w.ndim - 1))).astype(
            np.float32
        )
        b = weights[conv.weights["b"]] if "b" in conv.weights else 0.0
        shift = ((b - e.array("mean")) * factor + bias).astype(np.float32)
        if "b" in conv.weights:
            weights[conv.weights["b"]] = shift
        else:
            name = e.scope.fresh(f"{conv.node.name}/b")
            weights[name] = shift
            conv.node.input.append(name)
            conv.weights["b"] = name
        return e.x[0]
    return e.node(
        "BatchNormalization",
        [
            e.x[0],
            e.optional("scale", lambda: np.ones(c)),
            e.optional("bias", lambda: np.zeros(c)),
            e.param("mean"),
            e.param("var"),
        ],
        epsilon=eps,
    )


def _along(e: Emit, name: str, axis: int, default: float) -> str:
    """A per-channel parameter shaped to broadcast along ``axis`` of a sample."""
    rank = len(e.shape())
    shape = [-1] + [1] * (rank - axis - 1)
    if not e.has_param(name):
        return e.const(np.full(e.shape()[axis], default).reshape(shape), name)
    return e.param(name, lambda v: v.reshape(shape))


def _one_axis(e: Emit, rms: bool) -> str:
    """A norm over one axis that is not the last (the channels of a map: ConvNeXt's),
    written out: ONNX's norms cover the trailing axes."""
    axis = e.a.axis + 1
    axes = e.ints([axis], "axes")
    x = e.x[0]
    if not rms:
        x = e.node("Sub", [x, e.node("ReduceMean", [x, axes], sub="mean")], sub="centred")
    square = e.node("Mul", [x, x], sub="square")
    var = e.node("ReduceMean", [square, axes], sub="var")
    std = e.node(
        "Sqrt", [e.node("Add", [var, e.const(float(e.a.eps), "eps")], sub="var_eps")], sub="std"
    )
    y = e.node("Div", [x, std], sub="normalised")
    y = e.node("Mul", [y, _offset(e, _along(e, "scale", e.a.axis, 1.0))], sub="scaled")
    if rms:
        return y
    return e.node("Add", [y, _along(e, "bias", e.a.axis, 0.0)])


def _offset(e: Emit, scale: str) -> str:
    """The gain: the stored scale w, plus the box's ``offset=`` where it has one (Gemma's
    1 + w), as an ``Add`` node, so the graph reads as the spec (the weight stays as stored)."""
    offset = float(getattr(e.a, "offset", 0.0))
    if not offset:
        return scale
    return e.node("Add", [scale, e.const(offset, "offset")], sub="gain")


def layernorm(e: Emit) -> str:
    a = e.a
    rank = len(e.shape())
    if a.axis is not None and a.axis != rank - 1:
        return _one_axis(e, rms=False)
    n = 1 if a.axis is not None else a.n_axes
    shape = e.shape()[rank - n :]
    return e.node(
        "LayerNormalization",
        [
            e.x[0],
            _offset(e, e.optional("scale", lambda: np.ones(shape))),
            e.optional("bias", lambda: np.zeros(shape)),
        ],
        axis=-n,
        epsilon=float(a.eps),
    )


def rmsnorm(e: Emit) -> str:
    a = e.a
    rank = len(e.shape())
    if a.axis != rank - 1:
        return _one_axis(e, rms=True)
    d = e.shape()[-1]
    return e.node(
        "RMSNormalization",
        [e.x[0], _offset(e, e.optional("scale", lambda: np.ones(d)))],
        axis=-1,
        epsilon=float(a.eps),
    )


def groupnorm(e: Emit) -> str:
    return e.node(
        "GroupNormalization",
        [e.x[0], e.param("scale"), e.param("bias")],
        num_groups=known(e.a.g),
        epsilon=float(e.a.eps),
    )


LOWER: dict[str, Lowering] = {
    "batchnorm": batchnorm,
    "layernorm": layernorm,
    "groupnorm": groupnorm,
    "rmsnorm": rmsnorm,
}

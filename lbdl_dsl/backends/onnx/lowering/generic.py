"""ONNX lowerings of the generic primitives (`core/layers/generic.py`)."""

from __future__ import annotations

import numpy as np
import onnx

from lbdl_dsl.backends.onnx.emit import Emit, Lowering, known


def layer_scale(e: Emit) -> str:
    """One factor per channel (the last axis, or the axis chosen), broadcast along it."""
    rank = len(e.shape())
    shape = [-1] + [1] * (rank - e.a.axis - 1)
    return e.node("Mul", [e.x[0], e.param("gamma", lambda v: np.reshape(v, shape))])


def timestep_embed(e: Emit) -> str:
    """cos(t·w_i) and sin(t·w_i), w_i = period^(-i/half), as the runtime's
    ``timestep_embedding``: in float32, a new last axis against the frequencies."""
    a = e.a
    d = known(a.d)
    half = d // 2
    freqs = np.exp(-np.log(float(a.period)) * np.arange(half, dtype=np.float64) / half)
    t = e.x[0]
    if e.inst.inputs[0].dtype != "float":
        t = e.node("Cast", [t], sub="float", to=onnx.TensorProto.FLOAT)
    t = e.node("Unsqueeze", [t, e.ints([-1], "axes")], sub="column")
    args = e.node("Mul", [t, e.const(freqs, "freqs")], sub="args")
    sin, cos = e.node("Sin", [args], sub="sin"), e.node("Cos", [args], sub="cos")
    parts = [sin, cos] if a.sin_first else [cos, sin]
    if d % 2:  # a zero column, as wide as one argument
        first = [args, e.ints([0], "start"), e.ints([1], "stop"), e.ints([-1], "axis")]
        column = e.node("Slice", first, sub="first")
        parts.append(e.node("Mul", [column, e.const(0.0, "zero")], sub="zeros"))
    return e.node("Concat", parts, axis=-1)


LOWER: dict[str, Lowering] = {
    "times": lambda e: e.node("Mul", [e.x[0], e.const(float(e.a.factor), "factor")]),
    "neg": lambda e: e.node("Neg", [e.x[0]]),
    "sin": lambda e: e.node("Sin", [e.x[0]]),
    "cos": lambda e: e.node("Cos", [e.x[0]]),
    "drop-path": lambda e: e.x[0],  # evaluation: every branch kept
    "layer-scale": layer_scale,
    "timestep-embed": timestep_embed,
    "token-drop": lambda e: e.x[0],  # evaluation: every sample's tokens kept
}

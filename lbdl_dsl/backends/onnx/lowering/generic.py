"""ONNX lowerings of the generic primitives (`core/layers/generic.py`)."""

from __future__ import annotations

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering


def layer_scale(e: Emit) -> str:
    """One factor per channel (the last axis, or the axis chosen), broadcast along it."""
    rank = len(e.shape())
    shape = [-1] + [1] * (rank - e.a.axis - 1)
    return e.node("Mul", [e.x[0], e.param("gamma", lambda v: np.reshape(v, shape))])


LOWER: dict[str, Lowering] = {
    "times": lambda e: e.node("Mul", [e.x[0], e.const(float(e.a.factor), "factor")]),
    "neg": lambda e: e.node("Neg", [e.x[0]]),
    "sin": lambda e: e.node("Sin", [e.x[0]]),
    "cos": lambda e: e.node("Cos", [e.x[0]]),
    "drop-path": lambda e: e.x[0],  # evaluation: every branch kept
    "layer-scale": layer_scale,
}

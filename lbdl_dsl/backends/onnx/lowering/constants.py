"""ONNX lowerings of the constant boxes: the tensor itself, computed once at export by the
entry's own NumPy reference (the registry's, which the tests hold to the JAX runtime's), in
the JAX model's types (float32, int32, bool)."""

from __future__ import annotations

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.layers.base import Numbers


def constant(e: Emit) -> str:
    layer = lookup(e.inst.node.op)
    assert layer is not None and layer.reference is not None, "constants have references"
    value = np.asarray(layer.reference([], {}, {}, Numbers(e.a)))
    kind = np.bool_ if value.dtype == np.bool_ else np.int32 if value.dtype.kind in "iu" else None
    return e.const(value, "value", kind or np.float32)


LOWER: dict[str, Lowering] = {
    "sincos-1d": constant,
    "sincos-2d": constant,
    "band": constant,
    "rel-index": constant,
    "table": constant,
}

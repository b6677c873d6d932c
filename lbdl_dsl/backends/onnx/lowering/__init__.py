"""The ONNX lowering of the registry's entries: one table, assembled from one module per family
(the family files of `lbdl_dsl/core/layers/`, by the same names).

`ONNX[name]` lowers the entry called ``name``. An entry without one (a recurrent layer, a
mixture of experts, Swin's window attention...) has no standard ONNX operator here: a spec
that uses it is exported by tracing instead (`lbdl_dsl.interop.onnx_export`), which says so.
A test holds every lowering to the JAX model's numbers in onnxruntime.
"""

from __future__ import annotations

from lbdl_dsl.backends.onnx.emit import Lowering
from lbdl_dsl.backends.onnx.lowering import (
    activation,
    attention,
    constants,
    conv,
    dense,
    generic,
    norm,
    recurrent,
    tensor,
    vision,
)

ONNX: dict[str, Lowering] = {}
_FAMILIES = (
    dense,
    conv,
    norm,
    activation,
    attention,
    tensor,
    recurrent,
    generic,
    constants,
    vision,
)
for _family in _FAMILIES:
    for _name, _lower in _family.LOWER.items():
        assert _name not in ONNX, _name
        ONNX[_name] = _lower

__all__ = ["ONNX"]

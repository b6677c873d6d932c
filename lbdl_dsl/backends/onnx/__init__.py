"""ONNX from the checked graph: each box lowered to its standard ONNX operator, named by its path.

``to_onnx(checked, arrays)`` writes a model whose graph reads as the figure does: a ``Conv``
named ``dresblock_0/residual_0/conv_2d_1`` where the spec has that convolution, a
``BatchNormalization`` for a batchnorm (or, with ``fold=True``, its scale and shift folded into
the convolution before it, as PyTorch's exporter does), one ``Attention`` node for a
multi-head attention, an ``Add`` for a residual sum, and each block call a call of an ONNX
local function named by the block (``functions=False`` writes everything inline). Channels
stay first, as the spec and ONNX both have them, so no transposes are written; the batch axis
is dynamic (``B``) unless ``batch`` fixes it, and names are ASCII (``Ŷ`` → ``Y_hat``).

The weights are the JAX model's (``arrays``: path → array, as `weights.flatten` gives
``params`` and ``state``), laid out once as ONNX wants them. A box without an ONNX lowering
(`lowering.ONNX`) is named in ``Lowered.unsupported``, and no model is made: the caller
exports by tracing instead (`lbdl_dsl.interop.onnx_export`). Needs the ``onnx`` package only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lbdl_dsl.backends.onnx.emit import Scope
from lbdl_dsl.backends.onnx.names import ascii_names
from lbdl_dsl.backends.onnx.walk import DOMAIN, OPSET, Refused, Walk, Where
from lbdl_dsl.compiler.instance import Checked, Tensor
from lbdl_dsl.core.errors import LbdlError

IR_VERSION = 10  # what opset 23 needs, and onnxruntime 1.22 on reads
TYPES = {"float": TensorProto.FLOAT, "int": TensorProto.INT32, "bool": TensorProto.BOOL}


@dataclass
class Lowered:
    """The model, or None with the boxes that have no ONNX form here."""

    model: onnx.ModelProto | None
    unsupported: list[Refused] = field(default_factory=list)


def to_onnx(
    checked: Checked,
    arrays: Mapping[str, np.ndarray],
    *,
    name: str = "model",
    fold: bool = False,
    functions: bool = True,
    batch: int | None = None,
    output_names: Sequence[str] | None = None,
) -> Lowered:
    """The ONNX model of ``checked`` with the weights ``arrays`` (see the module)."""
    graph = checked.program.model.body
    walk = Walk(checked.program, arrays, fold=fold, functions=functions)
    scope = Scope(function=False)
    in_names = ascii_names([graph.node(nid).name or "x" for nid in graph.inputs])
    scope.taken |= set(in_names)
    outs = [out for out, _ in graph.outputs]
    if output_names is not None and len(output_names) != len(outs):
        raise LbdlError(
            f"--output-names: {len(output_names)} names for {len(outs)} outputs ({', '.join(outs)})"
        )
    out_names = list(output_names) if output_names is not None else ascii_names(outs)
    if any(not n.isascii() or not n for n in out_names):
        raise LbdlError(f"--output-names: {', '.join(out_names)}: names must be ASCII")
    env = dict(zip(graph.inputs, in_names, strict=True))
    keep = frozenset(nid for _, nid in graph.outputs)
    values = walk.values(scope, checked.root, graph, env, Where(), keep)
    if walk.unsupported:
        return Lowered(None, walk.unsupported)
    named: dict[str, str] = {}
    for (_, nid), out in zip(graph.outputs, out_names, strict=True):
        named[values[nid]] = _name_output(scope, named.get(values[nid], values[nid]), out)
    dim = batch if batch is not None else "B"
    inputs = [
        _info(n, checked.inputs[graph.node(nid).name or ""], dim)
        for n, nid in zip(in_names, graph.inputs, strict=True)
    ]
    outputs = [
        _info(out, checked.outputs[o] or Tensor(()), dim)
        for out, o in zip(out_names, outs, strict=True)
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in {**scope.weights, **scope.consts}.items()]
    g = helper.make_graph(scope.nodes, name, inputs, outputs, initializer=inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if walk.made:
        opsets.append(helper.make_opsetid(DOMAIN, 1))
    model = helper.make_model(
        g,
        opset_imports=opsets,
        functions=list(walk.made.values()),
        producer_name="lbdl",
        ir_version=IR_VERSION,
    )
    return Lowered(model)


def _info(name: str, tensor: Tensor, batch: int | str) -> onnx.ValueInfoProto:
    dims: list[int | str | None] = [batch]
    for d in tensor.shape:
        v = d.as_int()
        dims.append(v if v is not None else (str(d) if str(d).isidentifier() else None))
    return helper.make_tensor_value_info(name, TYPES.get(tensor.dtype, TensorProto.FLOAT), dims)


def _name_output(scope: Scope, value: str, out: str) -> str:
    """Give a model's output its name: the node that makes the value writes it under that
    name, or an ``Identity`` does (for a value that is an input, a constant, or an output
    already). Returns the value's name from now on."""
    if value == out:
        return out
    made = scope.made.get(value)
    if made is None or value in scope.consts or value in scope.outputs:
        scope.add(helper.make_node("Identity", [value], [out], name=scope.fresh(out)))
        scope.outputs.add(out)
        return value
    for node in scope.nodes:
        node.output[:] = [out if o == value else o for o in node.output]
        node.input[:] = [out if i == value else i for i in node.input]
    scope.made[out] = scope.made.pop(value)
    scope.outputs.add(out)
    return out

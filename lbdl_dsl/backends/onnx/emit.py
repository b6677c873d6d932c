"""What an ONNX lowering may ask of the walker: the graph being written and one box's view of it.

A lowering (one per registry entry, in this package's family modules) turns one box into ONNX
nodes and returns the name of the value that is the box's output. It sees its inputs as value
names, channels first as the spec writes them (the batch axis first, then the sample's axes),
the entry's resolved `Attrs` record as the checker left it, and these helpers: `node` writes a
node named after the box's path, `param` gives a parameter's value (an initializer of the
model, or an input of the block's function), `const` a constant the box needs. A box that
ONNX cannot express raises `Unsupported` with the reason, and the walker names it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lbdl_dsl.compiler.instance import LayerInst
from lbdl_dsl.core.symbolic import Expr


class Unsupported(Exception):
    """A box this backend has no ONNX form for (the reason is the message)."""


@dataclass
class Made:
    """How a value of the graph was made: its node, and how many boxes read it (a lowering
    may rewrite the node in place only when it is the one reader: batchnorm folding)."""

    node: onnx.NodeProto
    readers: int = 0
    weights: dict[str, str] = field(default_factory=dict)  # the node's own: role → value


@dataclass
class Scope:
    """One ONNX graph being written: the model's, or the function of one block body.

    In the model's graph, parameters and constants are initializers; in a function, whose
    body is shared by every call, parameters are inputs the call passes and constants are
    ``Constant`` nodes."""

    function: bool
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # value → array
    consts: dict[str, np.ndarray] = field(default_factory=dict)  # value → array
    made: dict[str, Made] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)  # the model's outputs, once named
    folded: set[str] = field(default_factory=set)  # weights a batchnorm was folded into

    def fresh(self, name: str) -> str:
        """``name``, or ``name_1``... when a node or value of this graph has it already."""
        out, n = name, 0
        while out in self.taken:
            n += 1
            out = f"{name}_{n}"
        self.taken.add(out)
        return out

    def add(self, node: onnx.NodeProto) -> None:
        self.nodes.append(node)
        for out in node.output:
            self.made[out] = Made(node)

    def constant(self, name: str, array: np.ndarray) -> str:
        name = self.fresh(name)
        if self.function:
            value = numpy_helper.from_array(array, name)
            self.add(helper.make_node("Constant", [], [name], name=name, value=value))
        else:
            self.consts[name] = array
        return name


def known(value: Any) -> int:
    """A size as a Python int; `Unsupported` when it is only known when the model runs."""
    if isinstance(value, Expr):
        v = value.as_int()
        if v is None:
            raise Unsupported(f"the size {value} is not known when exporting")
        return v
    return int(value)


def sizes(values: Any) -> tuple[int, ...]:
    return tuple(known(v) for v in values)


class Emit:
    """One box's view of the graph being written (see the module)."""

    def __init__(
        self,
        scope: Scope,
        inst: LayerInst,
        xs: list[str],
        name: str,
        param: Callable[[str], tuple[str, np.ndarray, bool]],
        fold: bool,
    ) -> None:
        self.scope, self.inst, self.x, self.name = scope, inst, xs, name
        self.a: Any = inst.attrs
        self.fold = fold
        self._param = param
        self._named = False

    # -- shapes ------------------------------------------------------------------------------
    def shape(self, i: int = 0) -> tuple[int, ...]:
        """The per-sample shape of input ``i`` (no batch axis)."""
        return sizes(self.inst.inputs[i].shape)

    @property
    def out(self) -> tuple[int, ...]:
        assert self.inst.output is not None, "only checked boxes are lowered"
        return sizes(self.inst.output.shape)

    # -- nodes -------------------------------------------------------------------------------
    def node(self, op: str, inputs: list[str], sub: str = "", **attrs: Any) -> str:
        """Write one node; returns its output's name. The box's main node has ``sub`` empty
        and is named by the box's path; helper nodes are ``PATH/sub``."""
        name = self.scope.fresh(f"{self.name}/{sub}" if sub else self.name)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.scope.add(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def const(self, array: Any, sub: str, dtype: Any = np.float32) -> str:
        return self.scope.constant(f"{self.name}/{sub}", np.asarray(array, dtype))

    def ints(self, values: Any, sub: str) -> str:
        return self.const(list(values), sub, np.int64)

    # -- parameters --------------------------------------------------------------------------
    def has_param(self, name: str) -> bool:
        return name in self.inst.params or name in self.inst.state or name in self.inst.tied

    def array(self, name: str) -> np.ndarray:
        """A parameter's values, as the JAX model holds them for this box."""
        return self._param(name)[1]

    def param(self, name: str, layout: Callable[[np.ndarray], np.ndarray] | None = None) -> str:
        """The value of parameter ``name`` (a tied one, transposed where it is used so), laid
        out by ``layout`` where ONNX wants another order than the JAX model's."""
        value, array, transposed = self._param(name)
        if value in self.scope.folded and name in self.inst.tied:
            raise Unsupported("it shares a convolution's weights that a batchnorm was folded into")
        if layout is not None:
            array = layout(array)
            held = self.scope.weights.get(value)
            if transposed or (held is not None and not np.array_equal(held, array)):
                raise Unsupported("a parameter shared with another box in another layout")
        self.scope.weights.setdefault(value, np.ascontiguousarray(array, np.float32))
        if transposed:
            return self.node("Transpose", [value], sub=f"{name}_T", perm=[1, 0])
        return value

    def optional(self, name: str, default: Callable[[], np.ndarray]) -> str:
        """The parameter, or a constant ``default()`` where the box has none (no affine)."""
        return self.param(name) if self.has_param(name) else self.const(default(), name)

    def producer(self, i: int, op: str) -> Made | None:
        """How input ``i`` was made, when by an ``op`` node that only this box reads."""
        made = self.scope.made.get(self.x[i])
        if made is None or made.node.op_type != op or made.readers != 1:
            return None
        return made


Lowering = Callable[[Emit], str]
"""One entry's ONNX lowering: writes the box's nodes, returns its output value's name."""

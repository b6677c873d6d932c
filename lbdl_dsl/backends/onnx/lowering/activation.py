"""ONNX lowerings of activations and dropout (nothing, in evaluation: the model's mode when
exported)."""

from __future__ import annotations

from lbdl_dsl.backends.onnx.emit import Emit, Lowering


def unary(op: str) -> Lowering:
    return lambda e: e.node(op, [e.x[0]])


def silu(e: Emit) -> str:
    return e.node("Mul", [e.x[0], e.node("Sigmoid", [e.x[0]], sub="sigmoid")])


def relu6(e: Emit) -> str:
    return e.node("Clip", [e.x[0], e.const(0.0, "min"), e.const(6.0, "max")])


def softcap(e: Emit) -> str:
    """c·tanh(x/c) as Div, Tanh, Mul."""
    c = e.const(float(e.a.c), "cap")
    squashed = e.node("Tanh", [e.node("Div", [e.x[0], c], sub="scaled")], sub="tanh")
    return e.node("Mul", [squashed, c])


def passes(e: Emit) -> str:
    return e.x[0]


LOWER: dict[str, Lowering] = {
    "relu": unary("Relu"),
    "tanh": unary("Tanh"),
    "sigmoid": unary("Sigmoid"),
    "silu": silu,
    "softcap": softcap,
    "leaky-relu": lambda e: e.node("LeakyRelu", [e.x[0]], alpha=float(e.a.a)),
    "gelu": lambda e: e.node("Gelu", [e.x[0]], approximate="tanh" if e.a.approximate else None),
    "identity": passes,
    "relu6": relu6,
    "softargmax": lambda e: e.node("Softmax", [e.x[0]], axis=e.a.axis + 1),
    "dropout": passes,
    "dropout-2d": passes,
}

"""ONNX lowerings of the dense and embedding entries (the recurrent ones have none here:
ONNX's RNN, LSTM and GRU order their gates and weights otherwise)."""

from __future__ import annotations

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering


def fc(e: Emit) -> str:
    """``Gemm`` on a batch of vectors; ``MatMul`` (and ``Add``) on anything longer."""
    bias = [e.param("b")] if e.has_param("b") else []
    w = e.param("w")
    if len(e.shape()) == 1:
        return e.node("Gemm", [e.x[0], w, *bias])
    if not bias:
        return e.node("MatMul", [e.x[0], w])
    return e.node("Add", [e.node("MatMul", [e.x[0], w], sub="matmul"), *bias])


def sinusoid(t: int, d: int) -> np.ndarray:
    """The transformer's sinusoidal positions (T, D), as the JAX runtime computes them."""
    pos = np.arange(t, dtype=np.float64)[:, None]
    angle = pos / np.power(10000.0, np.arange(0, d, 2, dtype=np.float64) / d)
    pe = np.zeros((t, d))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return pe


def positions(e: Emit) -> str:
    t, d = e.shape()[-2:]
    return e.node("Add", [e.x[0], e.const(sinusoid(t, d), "positions")])


def learned_positions(e: Emit) -> str:
    """The table's first T rows, T being known when exporting."""
    t = e.shape()[-2]
    return e.node("Add", [e.x[0], e.param("table", lambda table: table[:t])])


def cls_token(e: Emit) -> str:
    """The class token in front of each sample's sequence: expanded to the batch, concatenated."""
    d = e.shape()[-1]
    batch = e.node("Shape", [e.x[0]], sub="batch", start=0, end=1)
    shape = e.node("Concat", [batch, e.ints([1, d], "row")], sub="shape", axis=0)
    e0 = e.param("e0", lambda v: v.reshape(1, 1, d))
    token = e.node("Expand", [e0, shape], sub="token")
    return e.node("Concat", [token, e.x[0]], axis=1)


LOWER: dict[str, Lowering] = {
    "fc": fc,
    "embed": lambda e: e.node("Gather", [e.param("table"), e.x[0]], axis=0),
    "pos-enc": positions,
    "pos-embed": learned_positions,
    "cls-token": cls_token,
    "scale": lambda e: e.node("Mul", [e.x[0], e.param("log_s", np.exp)]),
}

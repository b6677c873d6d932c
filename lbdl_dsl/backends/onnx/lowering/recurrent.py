"""ONNX lowerings of the recurrent layers: ONNX's ``RNN``, ``LSTM`` and ``GRU``, time first
(onnxruntime runs no other layout: the sequence is transposed in and out), with the weights
laid out once as ONNX orders them. PyTorch's gates, which the
JAX model keeps (i, f, g, o for the LSTM; r, z, n for the GRU), become ONNX's (i, o, f, c; z,
r, h), and the GRU applies its reset gate after the recurrent product, as PyTorch's does
(``linear_before_reset``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering

ORDER = {"RNN": (0,), "LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2)}  # PyTorch's gate k → ONNX's


def _gates(op: str) -> Callable[[np.ndarray], np.ndarray]:
    """(In, G·H) as the JAX model holds it → ONNX's (1, G·H, In), gates reordered."""
    order = ORDER[op]

    def layout(w: np.ndarray) -> np.ndarray:
        blocks = np.split(w.T, len(order), axis=0)
        return np.concatenate([blocks[k] for k in order], axis=0)[None]

    return layout


def recurrent(op: str) -> Lowering:
    def lower(e: Emit) -> str:
        hidden = e.array("w_hh").shape[0]
        gates = len(ORDER[op])
        biases = []
        for name in ("b_ih", "b_hh"):
            b = e.array(name) if e.has_param(name) else np.zeros(gates * hidden, np.float32)
            biases.append(_gates(op)(b[None, :]).reshape(-1))
        bias = e.const(np.concatenate(biases)[None], "b")
        w, r = e.param("w_ih", _gates(op)), e.param("w_hh", _gates(op))
        extra = {"linear_before_reset": 1} if op == "GRU" else {}
        x = e.node("Transpose", [e.x[0]], sub="time_first", perm=[1, 0, 2])
        y = e.node(op, [x, w, r, bias], sub="states", hidden_size=hidden, **extra)
        y = e.node("Squeeze", [y, e.ints([1], "directions")], sub="one_direction")
        return e.node("Transpose", [y], perm=[1, 0, 2])

    return lower


LOWER: dict[str, Lowering] = {
    "rnn": recurrent("RNN"),
    "lstm": recurrent("LSTM"),
    "gru": recurrent("GRU"),
}

"""ONNX lowerings of the layers that move, pick and combine values. The batch axis stays the
first of every value, so each per-sample axis ``a`` is ONNX's axis ``a + 1``."""

from __future__ import annotations

from lbdl_dsl.backends.onnx.emit import Emit, Lowering, known, sizes


def reshape(e: Emit) -> str:
    """``Flatten`` to one axis per sample, else ``Reshape`` keeping the batch (``0``)."""
    to = sizes(e.a.to)
    if len(to) == 1:
        return e.node("Flatten", [e.x[0]], axis=1)
    return e.node("Reshape", [e.x[0], e.ints([0, *to], "shape")])


def _operands(e: Emit) -> list[str]:
    """Each operand with the axes it lacks inserted after the batch axis (see `+`'s record)."""
    out = []
    for i, (x, pad) in enumerate(zip(e.x, e.a.pads, strict=True)):
        if pad:
            x = e.node("Unsqueeze", [x, e.ints(range(1, pad + 1), f"axes_{i}")], sub=f"in_{i}")
        out.append(x)
    return out


def elementwise(op: str) -> Lowering:
    def lower(e: Emit) -> str:
        xs = _operands(e)
        y = xs[0]
        for i, x in enumerate(xs[1:], 1):
            y = e.node(op, [y, x], sub="" if i == len(xs) - 1 else f"{op.lower()}_{i}")
        return y

    return lower


def _slice(e: Emit) -> str:
    a = e.a
    ins = [e.x[0], e.ints([known(a.start)], "starts"), e.ints([known(a.stop)], "ends")]
    return e.node("Slice", [*ins, e.ints([a.axis + 1], "axes")])


def take(e: Emit) -> str:
    index = e.const(e.a.index, "index", dtype="int64")
    return e.node("Gather", [e.x[0], index], axis=e.a.axis + 1)


def matmul(e: Emit) -> str:
    other = e.x[1]
    if e.a.tb:
        rank = len(e.shape(1)) + 1
        perm = [*range(rank - 2), rank - 1, rank - 2]
        other = e.node("Transpose", [other], sub="transposed", perm=perm)
    return e.node("MatMul", [e.x[0], other])


LOWER: dict[str, Lowering] = {
    "reshape": reshape,
    "flatten": reshape,
    "transpose": lambda e: e.node("Transpose", [e.x[0]], perm=[0, *(p + 1 for p in e.a.perm)]),
    "take": take,
    "slice": _slice,
    "split": _slice,
    "+": elementwise("Add"),
    "mul": elementwise("Mul"),
    "concat": lambda e: e.node("Concat", e.x, axis=e.a.axis + 1),
    "matmul": matmul,
    "mean": lambda e: e.node("ReduceMean", [e.x[0], e.ints([e.a.axis + 1], "axes")], keepdims=0),
    "l2norm": lambda e: e.node(
        "Div",
        [
            e.x[0],
            e.node(
                "Max",
                [
                    e.node("ReduceL2", [e.x[0], e.ints([-1], "axes")], sub="norm", keepdims=1),
                    e.const(1e-12, "eps"),
                ],
                sub="norm_eps",
            ),
        ],
    ),
    "sample": lambda e: e.x[0],  # evaluation: the mean
}

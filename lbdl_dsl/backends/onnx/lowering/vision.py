"""ONNX lowerings of the vision boxes (`core/layers/vision.py`) on channels-first maps
(B, C, H, W): Swin's window attention (windows cut by reshapes, one ``Attention`` node whose
mask adds the relative position bias and, when shifted, masks the regions the roll brought
together), space-to-depth, and the cyclic roll (``Slice`` and ``Concat``: ONNX has no roll)."""

from __future__ import annotations

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering, Unsupported, known
from lbdl_dsl.core.layers.constants import rel_index_ref
from lbdl_dsl.core.layers.vision import shift_regions


def _roll(e: Emit, x: str, shift: int, axis: int, size: int, sub: str) -> str:
    """``jnp.roll(x, shift, axis)``: the last ``shift`` positions first."""
    s = shift % size
    if s == 0:
        return x
    cut = size - s
    tail = e.node(
        "Slice",
        [x, e.ints([cut], "cut"), e.ints([size], "end"), e.ints([axis], f"axis_{axis}")],
        sub=f"{sub}_tail",
    )
    head = e.node(
        "Slice",
        [x, e.ints([0], "zero"), e.ints([cut], "cut"), e.ints([axis], f"axis_{axis}")],
        sub=f"{sub}_head",
    )
    return e.node("Concat", [tail, head], sub=sub, axis=axis)


def _shift_mask(h: int, w: int, window: int, shift: int) -> np.ndarray:
    """(nW, w·w, w·w): true where two tokens of a window lie in the same region of the map
    after Swin's cyclic shift (the registry's `shift_regions`, cut into windows)."""
    labels = np.asarray(shift_regions(h, w, window, shift))
    cells = labels.reshape(h // window, window, w // window, window).transpose(0, 2, 1, 3)
    flat = cells.reshape(-1, window * window)
    return np.asarray(flat[:, :, None] == flat[:, None, :])


def window_att(e: Emit) -> str:
    a = e.a
    c, h, w = e.shape()
    heads, win, shift = known(a.heads), known(a.window), known(a.shift)
    if known(h) % win or known(w) % win:
        raise Unsupported("a map the window does not divide (padded as Swin pads: not lowered)")
    n = win * win
    x = e.x[0]
    if shift:
        x = _roll(e, x, -shift, 2, h, "roll_h")
        x = _roll(e, x, -shift, 3, w, "roll_w")
    grid = e.node("Reshape", [x, e.ints([0, c, h // win, win, w // win, win], "grid")], sub="grid")
    cells = e.node("Transpose", [grid], sub="cells", perm=[0, 2, 4, 3, 5, 1])
    tokens = e.node("Reshape", [cells, e.ints([-1, n, c], "tokens")], sub="tokens")

    def project(name: str) -> str:
        y = e.node("MatMul", [tokens, e.param("w" + name)], sub=f"{name}/matmul")
        return e.node("Add", [y, e.param("b" + name)], sub=name) if e.has_param("b" + name) else y

    q, k, v = project("q"), project("k"), project("v")
    index = rel_index_ref((win, win))[0].reshape(-1)
    bias = e.array("table")[index].reshape(n, n, heads).transpose(2, 0, 1)  # (heads, n, n)
    if shift:
        keep = _shift_mask(h, w, win, shift)[:, None]  # (nW, 1, n, n)
        added = np.where(keep, bias[None], np.finfo(np.float32).min)  # (nW, heads, n, n)
        batch = e.node("Shape", [x], sub="batch", start=0, end=1)
        reps = e.node("Concat", [batch, e.ints([1, 1, 1], "ones")], sub="repeats", axis=0)
        mask = e.node("Tile", [e.const(added, "bias"), reps], sub="bias")
    else:
        mask = e.const(bias[None], "bias")
    out = e.node("Attention", [q, k, v, mask], sub="heads", q_num_heads=heads, kv_num_heads=heads)
    out = e.node("MatMul", [out, e.param("wo")], sub="o/matmul" if e.has_param("bo") else "o")
    if e.has_param("bo"):
        out = e.node("Add", [out, e.param("bo")], sub="o")
    cells = e.node(
        "Reshape", [out, e.ints([-1, h // win, w // win, win, win, c], "cells")], sub="merged"
    )
    grid = e.node("Transpose", [cells], sub="map_grid", perm=[0, 5, 1, 3, 2, 4])
    if not shift:
        return e.node("Reshape", [grid, e.ints([0, c, h, w], "map")])
    y = e.node("Reshape", [grid, e.ints([0, c, h, w], "map")], sub="map")
    y = _roll(e, y, shift, 2, h, "unroll_h")
    return _roll(e, y, shift, 3, w, "")


def space_to_depth(e: Emit) -> str:
    """Each f×f cell into the channels, PyTorch's pixel_unshuffle order (c·f·f + i·f + j) or
    Swin's ((j·f + i)·C + c)."""
    c, h, w = e.shape()
    f = known(e.a.f)
    x = e.node("Reshape", [e.x[0], e.ints([0, c, h // f, f, w // f, f], "grid")], sub="grid")
    perm = [0, 5, 3, 1, 2, 4] if e.a.swin else [0, 1, 3, 5, 2, 4]  # from (b, c, y, i, x, j)
    x = e.node("Transpose", [x], sub="cells", perm=perm)
    return e.node("Reshape", [x, e.ints([0, c * f * f, h // f, w // f], "shape")])


def roll(e: Emit) -> str:
    a = e.a
    x, shape = e.x[0], e.shape()
    for i, (shift, axis) in enumerate(zip(a.shifts, a.axes, strict=True)):
        last = i == len(a.axes) - 1
        x = _roll(e, x, known(shift), axis + 1, shape[axis], "" if last else f"axis{axis}")
    return x if x != e.x[0] else e.node("Identity", [x])


LOWER: dict[str, Lowering] = {
    "window-att": window_att,
    "space-to-depth": space_to_depth,
    "roll": roll,
}

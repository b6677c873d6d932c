"""ONNX lowerings of convolutions and pools: channels first, as ONNX and the spec both have
them, so no transposes; the weights are laid out as ONNX wants them once, at export."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lbdl_dsl.backends.onnx.emit import Emit, Lowering, Unsupported, known, sizes


def _pads(pads: Any) -> list[int]:
    """((lo, hi), ...) per axis → ONNX's [lo..., hi...]."""
    pairs = [(p, p) if isinstance(p, int) else tuple(p) for p in pads]
    return [int(lo) for lo, _ in pairs] + [int(hi) for _, hi in pairs]


def _oihw(n: int) -> Callable[[np.ndarray], np.ndarray]:
    """(*k, Cin/g, Cout), the JAX model's, → (Cout, Cin/g, *k)."""
    return lambda w: np.transpose(w, (n + 1, n, *range(n)))


def conv(e: Emit) -> str:
    a, n = e.a, len(e.a.kernel)
    ins = [e.x[0], e.param("w", _oihw(n))]
    if e.has_param("b"):
        ins.append(e.param("b"))
    out = e.node(
        "Conv",
        ins,
        kernel_shape=list(sizes(a.kernel)),
        strides=list(sizes(a.stride)),
        pads=_pads(a.pads),
        dilations=list(sizes(a.dilation)),
        group=known(a.groups),
    )
    if not e.inst.tied:  # its own weights, which a batchnorm after it may fold into
        made = e.scope.made[out]  # (a box that shares them later is then refused)
        made.weights = {"w": ins[1], **({"b": ins[2]} if len(ins) > 2 else {})}
    return out


def tconv(e: Emit) -> str:
    """PyTorch's ConvTranspose, which ONNX's is: weight (Cin, Cout/g, *k)."""
    a, n = e.a, len(e.a.kernel)
    ins = [e.x[0], e.param("w", lambda w: np.transpose(w, (n, n + 1, *range(n))))]
    if e.has_param("b"):
        ins.append(e.param("b"))
    pad = list(sizes(a.padding))
    return e.node(
        "ConvTranspose",
        ins,
        kernel_shape=list(sizes(a.kernel)),
        strides=list(sizes(a.stride)),
        pads=pad + pad,
        output_padding=list(sizes(a.out_padding)),
        dilations=list(sizes(a.dilation)),
        group=known(a.groups),
    )


def maxpool(e: Emit) -> str:
    a = e.a
    return e.node(
        "MaxPool",
        [e.x[0]],
        kernel_shape=list(sizes(a.kernel)),
        strides=list(sizes(a.stride)),
        pads=_pads(a.pads),
        dilations=list(sizes(a.dilation)),
    )


def avgpool(e: Emit) -> str:
    """PyTorch's AvgPool (padding counted); one window over the whole map is a global pool."""
    a = e.a
    if any(d != 1 for d in sizes(a.dilation)):
        raise Unsupported("ONNX's AveragePool has no dilation")
    pads = _pads(a.pads)
    if not any(pads) and sizes(a.kernel) == e.shape()[1:] and e.out[1:] == (1,) * len(a.kernel):
        return e.node("GlobalAveragePool", [e.x[0]])
    return e.node(
        "AveragePool",
        [e.x[0]],
        kernel_shape=list(sizes(a.kernel)),
        strides=list(sizes(a.stride)),
        pads=pads,
        count_include_pad=1,
    )


def upsample(e: Emit) -> str:
    """``Resize`` by the factor: nearest (each value repeated), or bilinear with PyTorch's
    ``align_corners=False`` sampling, which is ONNX's ``pytorch_half_pixel``."""
    f = float(known(e.a.f))
    scales = e.const([1.0, 1.0] + [f] * (len(e.shape()) - 1), "scales")
    if e.a.mode == "nearest":
        how = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}
        how["nearest_mode"] = "floor"
    elif e.a.mode == "bilinear":
        how = {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}
    else:
        raise Unsupported(f"`mode={e.a.mode}` is not ONNX's Resize")
    return e.node("Resize", [e.x[0], "", scales], **how)


def patches(e: Emit) -> str:
    """(C, H, W) → (H/P·W/P, C·P·P), each patch flattened channels first."""
    c, h, w = e.shape()
    p = known(e.a.P)
    nh, nw = h // p, w // p
    x = e.x[0]
    if (nh * p, nw * p) != (h, w):  # rows and columns past a multiple of P are dropped
        x = e.node(
            "Slice",
            [x, e.ints([0, 0], "starts"), e.ints([nh * p, nw * p], "ends"), e.ints([2, 3], "axes")],
            sub="crop",
        )
    x = e.node("Reshape", [x, e.ints([0, c, nh, p, nw, p], "grid")], sub="grid")
    x = e.node("Transpose", [x], sub="order", perm=[0, 2, 4, 1, 3, 5])
    return e.node("Reshape", [x, e.ints([0, nh * nw, c * p * p], "shape")])


LOWER: dict[str, Lowering] = {
    "conv-1d": conv,
    "conv-2d": conv,
    "tconv-1d": tconv,
    "tconv-2d": tconv,
    "maxpool": maxpool,
    "maxpool-1d": maxpool,
    "avgpool": avgpool,
    "avgpool-1d": avgpool,
    "global-avgpool": lambda e: e.node("GlobalAveragePool", [e.x[0]]),
    "upsample": upsample,
    "patches": patches,
}

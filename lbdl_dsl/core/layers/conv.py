"""Convolutions, pooling, upsampling and patches: layers on channels-first C×T or C×H×W maps.

Output sizes follow FIGURES.md rule 4 (every framework's floor formula); a pool's stride defaults
to its kernel and a convolution's to 1 (rule 3). The JAX lowerings run channels-last, which XLA
prefers on CPU and GPU; the code generator moves layouts so that the user never sees it. The
NumPy references loop over positions and taps, in channels-first order, as PyTorch defines them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    ZEROS,
    Attrs,
    Ctx,
    Layer,
    PSpec,
    Shape,
    Sizes,
    conv_out,
    ints,
    numel,
    numpy,
    positive,
    tconv_out,
)
from lbdl_dsl.core.layers.inits import INIT_HPS, weight_init
from lbdl_dsl.core.symbolic import Expr

_SPATIAL = {1: "C×T", 2: "C×H×W"}
Pads = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ConvAttrs(Attrs):
    """A convolution with every default resolved and its padding as (before, after) pairs."""

    channels: Expr
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: Pads
    dilation: tuple[int, ...]
    groups: int
    bias: bool


@dataclass(frozen=True)
class TConvAttrs(Attrs):
    channels: Expr
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    out_padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    bias: bool


@dataclass(frozen=True)
class PoolAttrs(Attrs):
    """A pool's window; the stride is the window's unless given (the book's rule 3)."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: Pads
    dilation: tuple[int, ...]


def _pads(c: Ctx, n: int, k: tuple[int, ...], s: tuple[int, ...], d: tuple[int, ...]) -> Pads:
    p = c.hp.get("p", 0)
    if p == "same":
        if any(v != 1 for v in s):
            c.fail("`p=same` needs stride 1", "give the padding as a number", hparam="p")
        totals = [di * (ki - 1) for ki, di in zip(k, d)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((v, v) for v in ints(p))


def _groups(c: Ctx, cin: Expr, cout: Expr) -> int:
    g = c.const("g")
    for what, n in (("input", cin), ("output", cout)):
        v = n.as_int()
        if g < 1 or (v is not None and v % g):
            c.fail(f"`g={g}` groups must divide the {what} channels ({n})", hparam="g")
    return g


def _conv_attrs(n: int) -> Callable[[Ctx], ConvAttrs]:
    def resolve(c: Ctx) -> ConvAttrs:
        x = c.rank(n + 1, what=_SPATIAL[n])
        k, s, d = ints(c.hp["k"]), ints(c.hp["s"]), ints(c.hp["d"])
        if min(k + s + d) < 1:
            c.fail("kernel, stride and dilation must be at least 1")
        g = _groups(c, x[0], c.hp["c"])
        return ConvAttrs(c.hp["c"], k, s, _pads(c, n, k, s, d), d, g, c.hp["bias"])

    return resolve


def _conv_shape(c: Ctx) -> Shape:
    a: ConvAttrs = c.a
    spatial = c.x[1:]
    out = (
        conv_out(spatial[i], a.kernel[i], a.stride[i], a.pads[i], a.dilation[i])
        for i in range(len(spatial))
    )
    return positive(c, (a.channels, *out))


def _kernel_params(c: Ctx, w_shape: Sizes, fan: Any, fan_out: Any) -> dict[str, PSpec]:
    n = len(c.a.kernel)
    out = {"w": PSpec(w_shape, weight_init(c, fan, fan_out), ("kernel",) * n + ("in", "out"))}
    if c.a.bias:
        out["b"] = PSpec((c.a.channels,), ZEROS, ("out",))
    return out


def _conv_params(c: Ctx) -> dict[str, PSpec]:
    a: ConvAttrs = c.a
    cin = c.x[0] / a.groups
    k = prod(a.kernel)
    return _kernel_params(c, (*a.kernel, cin, a.channels), cin * k, a.channels / a.groups * k)


def _window(c: Ctx) -> tuple[int, int, int]:
    return (c.a.kernel[0], c.a.stride[0], c.a.dilation[0])


def _pairs(pads: Pads) -> list[tuple[int, int]]:
    return [(0, 0), (0, 0), *pads]


def conv_ref(
    x: Any,
    w: Any,
    b: Any,
    stride: tuple[int, ...],
    pads: Pads,
    dilation: tuple[int, ...],
    groups: int,
) -> Any:
    """PyTorch's Conv1d/2d on channels-first x (B, Cin, *S) with w (*k, Cin/g, Cout)."""
    np = numpy()
    xp = np.pad(np.asarray(x, np.float64), _pairs(pads))
    n, kernel = x.ndim - 2, w.shape[: x.ndim - 2]
    cin_g, cout = w.shape[n], w.shape[n + 1]
    cout_g = cout // groups
    size = [
        (xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(n)
    ]
    out = np.zeros((x.shape[0], cout, *size))
    for pos in np.ndindex(*size):
        for tap in np.ndindex(*kernel):
            src = tuple(pos[i] * stride[i] + tap[i] * dilation[i] for i in range(n))
            xs = xp[(slice(None), slice(None), *src)]
            for g in range(groups):
                part = xs[:, g * cin_g : (g + 1) * cin_g] @ w[tap][:, g * cout_g : (g + 1) * cout_g]
                out[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *pos)] += part
    return out if b is None else out + np.reshape(b, (cout,) + (1,) * n)


_CONV_HP = (
    HP("c", "size", doc="output channels (taken from the annotation when left out)"),
    HP("k", "sizes", doc="kernel size, one number or one per axis"),
    HP("s", "sizes", 1, "stride"),
    HP("p", "padding", 0, "zero padding on each side, or `same`"),
    HP("d", "sizes", 1, "dilation"),
    HP("g", "size", 1, "groups (depthwise when equal to the channels)"),
    HP("bias", "bool", True, "add a trainable bias"),
    *INIT_HPS,
)


def _conv(n: int, example: tuple[str, str], cases: tuple[tuple[str, str], ...]) -> Layer:
    return Layer(
        name=f"conv-{n}d",
        aliases=(f"conv{n}d",),
        category="Convolution",
        doc=f"{n}-D convolution on a channels-first {_SPATIAL[n]} map. The number of output "
        "channels is usually written only at the right of the box, as in the book.",
        hparams=_CONV_HP,
        resolve=_conv_attrs(n),
        shape=_conv_shape,
        params=_conv_params,
        macs=lambda c: numel(c.y) * (c.x[0] / c.a.groups) * prod(c.a.kernel),
        from_annotation=(("c", 0),),
        layout="cl",
        spatial=n,
        rf=True,
        window=_window,
        example=example,
        cases=cases,
        reference=lambda xs, p, s, a: conv_ref(
            xs[0], p["w"], p.get("b"), a.stride, a.pads, a.dilation, a.groups
        ),
    )


CONV1D = _conv(1, ("16×100", "conv-1d k=3 p=1  32×100"), (("4×20", "conv-1d k=3 s=2 p=1  6×10"),))
CONV2D = _conv(
    2,
    ("1×28×28", "conv-2d k=5  32×24×24"),
    (
        ("8×10×10", "conv-2d k=3 s=2 p=1  16×5×5"),
        ("8×10×10", "conv-2d k=3 d=2 g=2 p=same bias=false  8×10×10"),
        ("8×9×9", "conv-2d k=(3, 1) g=8  8×7×9"),
        ("8×9×9", "conv-2d k=1 s=2  4×5×5"),
        ("4×6×6", "conv-2d k=2 s=2 init=xavier  8×3×3"),
    ),
)


def _tconv_attrs(n: int) -> Callable[[Ctx], TConvAttrs]:
    def resolve(c: Ctx) -> TConvAttrs:
        x = c.rank(n + 1, what=_SPATIAL[n])
        k, s, d = ints(c.hp["k"]), ints(c.hp["s"]), ints(c.hp["d"])
        p, op = ints(c.hp["p"]), ints(c.hp["op"])
        if min(k + s + d) < 1:
            c.fail("kernel, stride and dilation must be at least 1")
        if any(o >= max(si, di) for o, si, di in zip(op, s, d)):
            c.fail("output padding must be smaller than the stride or the dilation", hparam="op")
        g = _groups(c, x[0], c.hp["c"])
        return TConvAttrs(c.hp["c"], k, s, p, op, d, g, c.hp["bias"])

    return resolve


def _tconv_shape(c: Ctx) -> Shape:
    a: TConvAttrs = c.a
    sizes = c.x[1:]
    out = (
        tconv_out(sizes[i], a.kernel[i], a.stride[i], a.padding[i], a.out_padding[i], a.dilation[i])
        for i in range(len(sizes))
    )
    return positive(c, (a.channels, *out))


def _tconv_params(c: Ctx) -> dict[str, PSpec]:
    a: TConvAttrs = c.a
    k = prod(a.kernel)
    return _kernel_params(
        c, (*a.kernel, c.x[0], a.channels / a.groups), c.x[0] * k, a.channels / a.groups * k
    )


def tconv_ref(x: Any, w: Any, b: Any, a: TConvAttrs) -> Any:
    """PyTorch's ConvTranspose1d/2d, w (*k, Cin, Cout/g): each input value scattered through
    the kernel (full[o, i·s + j·d] += x[c, i]·w[j, c, o] within a group), then cropped."""
    np = numpy()
    x = np.asarray(x, np.float64)
    n = x.ndim - 2
    cin, cout_g = w.shape[n], w.shape[n + 1]
    cin_g, cout = cin // a.groups, cout_g * a.groups
    full_size = [
        (x.shape[2 + i] - 1) * a.stride[i]
        + a.dilation[i] * (a.kernel[i] - 1)
        + 1
        + a.out_padding[i]
        for i in range(n)
    ]
    full = np.zeros((x.shape[0], cout, *full_size))
    for pos in np.ndindex(*x.shape[2:]):
        xs = x[(slice(None), slice(None), *pos)]
        for tap in np.ndindex(*a.kernel):
            dst = tuple(pos[i] * a.stride[i] + tap[i] * a.dilation[i] for i in range(n))
            for g in range(a.groups):
                part = xs[:, g * cin_g : (g + 1) * cin_g] @ w[tap][g * cin_g : (g + 1) * cin_g]
                full[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *dst)] += part
    crop = tuple(slice(a.padding[i], full_size[i] - a.padding[i]) for i in range(n))
    out = full[(slice(None), slice(None), *crop)]
    return out if b is None else out + np.reshape(b, (cout,) + (1,) * n)


def _tconv(n: int, example: tuple[str, str], cases: tuple[tuple[str, str], ...]) -> Layer:
    return Layer(
        name=f"tconv-{n}d",
        aliases=(f"conv-transpose-{n}d", f"deconv-{n}d", f"transposed-conv-{n}d"),
        category="Convolution",
        doc=f"Transposed {n}-D convolution (PyTorch's ConvTranspose{n}d): output size "
        "(n−1)·s − 2p + d(k−1) + op + 1.",
        hparams=(
            *_CONV_HP[:3],
            HP("p", "sizes", 0, "padding removed from each side"),
            HP("op", "sizes", 0, "output padding added at the end"),
            *_CONV_HP[4:],
        ),
        resolve=_tconv_attrs(n),
        shape=_tconv_shape,
        params=_tconv_params,
        macs=lambda c: numel(c.x) * (c.a.channels / c.a.groups) * prod(c.a.kernel),
        from_annotation=(("c", 0),),
        layout="cl",
        spatial=n,
        rf=True,
        example=example,
        cases=cases,
        reference=lambda xs, p, s, a: tconv_ref(xs[0], p["w"], p.get("b"), a),
    )


TCONV1D = _tconv(1, ("8×50", "tconv-1d k=2 s=2  4×100"), (("4×6", "tconv-1d k=2 s=2 g=2  6×12"),))
TCONV2D = _tconv(
    2,
    ("64×14×14", "tconv-2d k=2 s=2  32×28×28"),
    (("4×5×5", "tconv-2d k=3 s=2 p=1 op=1  6×10×10"),),
)


def _pool_attrs(n: int, dilated: bool) -> Callable[[Ctx], PoolAttrs]:
    def resolve(c: Ctx) -> PoolAttrs:
        c.rank(n + 1, what=_SPATIAL[n])
        k = ints(c.hp["k"])
        s = ints(c.hp["s"]) if c.hp.get("s") is not None else k
        d = ints(c.hp["d"]) if dilated else (1,) * n
        if min(k + s + d) < 1:
            c.fail("window, stride and dilation must be at least 1")
        pads = _pads(c, n, k, s, d)
        if any(p[0] * 2 > ki for p, ki in zip(pads, k)):
            c.fail("padding must be at most half the kernel", hparam="p")
        return PoolAttrs(k, s, pads, d)

    return resolve


def _pool_shape(c: Ctx) -> Shape:
    a: PoolAttrs = c.a
    sizes = c.x[1:]
    out = (
        conv_out(sizes[i], a.kernel[i], a.stride[i], a.pads[i], a.dilation[i])
        for i in range(len(sizes))
    )
    return positive(c, (c.x[0], *out))


def pool_ref(x: Any, a: PoolAttrs, kind: str) -> Any:
    """PyTorch's MaxPool (−∞ padding, ceil_mode=False) or AvgPool (count_include_pad=True)."""
    np = numpy()
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(np.asarray(x, np.float64), _pairs(a.pads), constant_values=fill)
    n = x.ndim - 2
    size = [
        (xp.shape[2 + i] - a.dilation[i] * (a.kernel[i] - 1) - 1) // a.stride[i] + 1
        for i in range(n)
    ]
    out = np.zeros((*x.shape[:2], *size))
    for pos in np.ndindex(*size):
        taps = [
            xp[
                (
                    slice(None),
                    slice(None),
                    *(pos[i] * a.stride[i] + t[i] * a.dilation[i] for i in range(n)),
                )
            ]
            for t in np.ndindex(*a.kernel)
        ]
        out[(slice(None), slice(None), *pos)] = (
            np.max(taps, axis=0) if kind == "max" else np.sum(taps, axis=0) / len(taps)
        )
    return out


def _pool(kind: str, n: int, example: tuple[str, str], cases: tuple[tuple[str, str], ...]) -> Layer:
    dilated = kind == "max"
    suffix = "" if n == 2 else "-1d"
    hps = [
        HP("k", "sizes", doc="window size"),
        HP("s", "sizes", None, "stride (default: the window size)", default_from="k"),
        HP("p", "padding", 0, "padding on each side"),
    ]
    if dilated:
        hps.append(HP("d", "sizes", 1, "dilation"))
    return Layer(
        name=f"{kind}pool{suffix}",
        aliases=(f"{kind}pool{n}d",) + ((f"{kind}pool-{n}d",) if n == 2 else ()),
        category="Pooling",
        doc=f"{'Maximum' if dilated else 'Average'} over {n}-D windows of each channel; the "
        "stride defaults to the window, as in the book."
        + ("" if dilated else " Padding counts as zeros (PyTorch's count_include_pad)."),
        hparams=tuple(hps),
        resolve=_pool_attrs(n, dilated),
        shape=_pool_shape,
        layout="cl",
        spatial=n,
        rf=True,
        window=_window,
        example=example,
        cases=cases,
        reference=lambda xs, p, s, a: pool_ref(xs[0], a, kind),
    )


MAXPOOL = _pool(
    "max",
    2,
    ("32×24×24", "maxpool k=3  32×8×8"),
    (("3×9×9", "maxpool k=3 s=2 p=1  3×5×5"), ("3×8×8", "maxpool k=2 d=2  3×3×3")),
)
MAXPOOL1D = _pool("max", 1, ("16×100", "maxpool-1d k=2  16×50"), (("3×8", "maxpool-1d k=2  3×4"),))
AVGPOOL = _pool(
    "avg", 2, ("2048×7×7", "avgpool k=7  2048×1×1"), (("3×8×8", "avgpool k=3 s=2 p=1  3×4×4"),)
)
AVGPOOL1D = _pool("avg", 1, ("16×100", "avgpool-1d k=4  16×25"), (("3×8", "avgpool-1d k=4  3×2"),))

GLOBAL_AVGPOOL = Layer(
    name="global-avgpool",
    aliases=("gap",),
    category="Pooling",
    doc="Average over all spatial positions of each channel: C×H×W → C×1×1.",
    shape=lambda c: (c.rank(2, 3, what="C×T or C×H×W")[0],) + (Expr.lift(1),) * (len(c.x) - 1),
    layout="cl",
    rf=True,
    example=("512×7×7", "global-avgpool  512×1×1"),
    cases=(("3×5×5", "global-avgpool  3×1×1"),),
    reference=lambda xs, p, s, a: xs[0].mean(axis=tuple(range(2, xs[0].ndim)), keepdims=True),
)


def _upsample_shape(c: Ctx) -> Shape:
    x = c.rank(3, what="C×H×W")
    f = c.const("f")
    if f < 1:
        c.fail("the factor must be at least 1", hparam="f")
    return (x[0], x[1] * f, x[2] * f)


def upsample_ref(x: Any, f: int, mode: str) -> Any:
    """PyTorch's nearest, or bilinear with half-pixel centres (align_corners=False)."""
    np = numpy()
    x = np.asarray(x, np.float64)
    if mode == "nearest":
        return x.repeat(f, axis=2).repeat(f, axis=3)

    def taps(o: int, n: int) -> tuple[int, int, float]:
        src = max((o + 0.5) / f - 0.5, 0.0)
        i0 = min(int(math.floor(src)), n - 1)
        return i0, min(i0 + 1, n - 1), src - i0

    h, w = x.shape[2:]
    out = np.zeros((*x.shape[:2], h * f, w * f))
    for oy in range(h * f):
        y0, y1, ly = taps(oy, h)
        for ox in range(w * f):
            x0, x1, lx = taps(ox, w)
            top = (1 - lx) * x[:, :, y0, x0] + lx * x[:, :, y0, x1]
            bottom = (1 - lx) * x[:, :, y1, x0] + lx * x[:, :, y1, x1]
            out[:, :, oy, ox] = (1 - ly) * top + ly * bottom
    return out


UPSAMPLE = Layer(
    name="upsample",
    aliases=("upscale",),
    category="Pooling",
    doc="Upsampling of a C×H×W map by an integer factor, nearest or bilinear (half-pixel "
    "centres, as PyTorch's align_corners=False).",
    hparams=(
        HP("f", "size", 2, "the factor"),
        HP("mode", "choice", "nearest", "how to fill", ("nearest", "bilinear")),
    ),
    shape=_upsample_shape,
    layout="cl",
    rf=True,
    example=("64×14×14", "upsample f=2 mode=bilinear  64×28×28"),
    cases=(("3×4×4", "upsample f=2  3×8×8"), ("3×4×4", "upsample f=2 mode=bilinear")),
    reference=lambda xs, p, s, a: upsample_ref(xs[0], a.f, a.mode),
)


def _patches_shape(c: Ctx) -> Shape:
    x = c.rank(3, what="C×H×W")
    size = c.const("P")
    for axis, n in (("H", x[1]), ("W", x[2])):
        v = n.as_int()
        if v is not None and v % size:
            c.fail(f"the patch size {size} does not divide {axis}={v}", hparam="P")
    return ((x[1] / size) * (x[2] / size), x[0] * size * size)


def patches_ref(x: Any, size: int) -> Any:
    """(B, C, H, W) → (B, M, C·P·P): patches row by row, each flattened (C, P, P)."""
    b, c, h, w = x.shape
    p = x.reshape(b, c, h // size, size, w // size, size)
    return p.transpose(0, 2, 4, 1, 3, 5).reshape(b, (h // size) * (w // size), c * size * size)


PATCHES = Layer(
    name="patches",
    aliases=("patchify",),
    category="Pooling",
    doc="Cuts a C×H×W image into M = (H/P)(W/P) patches of P×P, each flattened channels-first: "
    "M×CP² (ViT, Fig. 5.9).",
    hparams=(HP("P", "size", doc="patch side"),),
    shape=_patches_shape,
    layout="cl",
    out_layout="cf",
    rf=True,
    example=("3×32×32", "patches P=8  16×192"),
    reference=lambda xs, p, s, a: patches_ref(xs[0], a.P),
)

LAYERS = (
    CONV1D,
    CONV2D,
    TCONV1D,
    TCONV2D,
    MAXPOOL,
    MAXPOOL1D,
    AVGPOOL,
    AVGPOOL1D,
    GLOBAL_AVGPOOL,
    UPSAMPLE,
    PATCHES,
)

"""Vision boxes after the book: Swin's window attention and patch merging, a cyclic shift,
space-to-depth, adaptive average pooling.

`window-att` is Swin's W-MSA and SW-MSA box (Liu et al. 2021, Fig. 3 and 4): on a C×H×W map,
multi-head self-attention inside each w×w window, with a learned bias for every relative
position of two tokens of a window (a (2w−1)²×heads table, indexed by the constant relative
position index) and, with `shift=`, the windows displaced by a cyclic shift of the map, the
tokens that the shift brought together from distant regions masked from each other (a mask the
compiler computes from the sizes). `patch-merge` is Swin's patch merging: each 2×2 group of
positions concatenated (4C channels), a layernorm, and a linear map to 2C.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    ZEROS,
    Arrays,
    Attrs,
    Ctx,
    FanIn,
    Layer,
    PSpec,
    Shape,
    Std,
    Weights,
    fmt_shape,
    ints,
    numpy,
)
from lbdl_dsl.core.layers.constants import rel_index_ref
from lbdl_dsl.core.layers.norm import layernorm_ref
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class WindowAttrs(Attrs):
    """Swin's attention resolved: heads, the window's side and shift as they apply to this map
    (a map no larger than the window is one window, never shifted, as in Swin), biases."""

    heads: int
    window: int
    shift: int
    bias: bool
    pad: tuple[int, int] = (0, 0)  # rows and columns added at the bottom and right (Swin's)


def _window_attrs(c: Ctx) -> WindowAttrs:
    x = c.rank(3, what="C×H×W")
    heads, w, s = c.const("h"), c.const("w"), c.const("shift")
    ch, hh, ww = (d.as_int() for d in x)
    if heads < 1 or (ch is not None and ch % heads):
        c.fail(f"{heads} heads do not divide the {x[0]} channels", hparam="h")
    if hh is None or ww is None:
        c.fail(f"window attention needs the map's size, got {fmt_shape(x)}")
    if w < 1 or not 0 <= s < w:
        c.fail(f"the shift must be in [0, {w}), got {s}", hparam="shift")
    if min(hh, ww) <= w:  # Swin: one window covers the map, and nothing is shifted
        w, s = min(hh, ww), 0
    # a map the window does not divide is padded with zeros at the bottom and the right, its
    # padded tokens attended to, and cropped after (torchvision's Swin)
    pad = ((-hh) % w, (-ww) % w)
    return WindowAttrs(heads, w, s, c.hp["bias"], pad)


def _window_params(c: Ctx) -> dict[str, PSpec]:
    d, a = c.x[0], c.a
    specs = {
        "wq": PSpec((d, d), FanIn(d), ("embed", "heads")),
        "wk": PSpec((d, d), FanIn(d), ("embed", "heads")),
        "wv": PSpec((d, d), FanIn(d), ("embed", "heads")),
        "wo": PSpec((d, d), FanIn(d), ("heads", "embed")),
    }
    if a.bias:
        specs |= {n: PSpec((d,), ZEROS, ("heads",)) for n in ("bq", "bk", "bv")}
    specs["bo"] = PSpec((d,), ZEROS, ("embed",))
    rows = Expr.lift((2 * a.window - 1) ** 2)
    specs["table"] = PSpec((rows, Expr.lift(a.heads)), Std(0.02), ("positions", "heads"))
    return specs


def _window_macs(c: Ctx) -> Expr:
    """The four projections of every token, and in each window the scores Q·Kᵀ and the
    weighted sum A·V: 4·HW·C² + 2·HW·w²·C."""
    d, positions = c.x[0], (c.x[1] + c.a.pad[0]) * (c.x[2] + c.a.pad[1])  # padded tokens too
    return Expr.lift(4 * positions * d * d + 2 * positions * (c.a.window**2) * d)


def shift_regions(h: int, w: int, window: int, shift: int) -> Any:
    """Swin's region labels of the shifted map: 0..8 for the 3×3 bands a cyclic shift by
    ``shift`` makes of it; tokens of different regions must not attend to each other."""
    np = numpy()
    labels = np.zeros((h, w), np.int64)
    bands = ((0, -window), (-window, -shift), (-shift, None))
    for i, (r0, r1) in enumerate(bands):
        for j, (c0, c1) in enumerate(bands):
            labels[r0:r1, c0:c1] = 3 * i + j
    return labels


def _windows(x: Any, window: int) -> Any:
    """(B, C, H, W) → (B, nW, w·w, C): windows row by row, tokens row by row in each."""
    b, ch, h, w = x.shape
    t = x.reshape(b, ch, h // window, window, w // window, window)
    return t.transpose(0, 2, 4, 3, 5, 1).reshape(b, -1, window * window, ch)


def window_att_ref(x: Any, p: Weights, a: Any) -> Any:
    """Swin's (S)W-MSA in NumPy, one window and one head at a time, in float64."""
    np = numpy()
    x = np.asarray(x, np.float64)
    height, width = x.shape[2:]
    x = np.pad(x, ((0, 0), (0, 0), (0, a.pad[0]), (0, a.pad[1])))
    b, ch, h, w = x.shape
    win, heads, s = a.window, a.heads, a.shift
    d = ch // heads
    shifted = np.roll(x, (-s, -s), axis=(2, 3)) if s else x
    tokens = _windows(shifted, win)  # (B, nW, N, C)
    labels = _windows(shift_regions(h, w, win, s)[None, None].astype(np.float64), win)
    index = rel_index_ref((win, win))[0]
    bias = np.asarray(p["table"], np.float64)[index]  # (N, N, heads)

    def proj(t: Any, name: str) -> Any:
        return t @ p["w" + name] + p.get("b" + name, 0.0)

    q, k, v = proj(tokens, "q"), proj(tokens, "k"), proj(tokens, "v")
    out = np.zeros_like(q)
    for n in range(tokens.shape[1]):
        lab = labels[0, n, :, 0]
        keep = lab[:, None] == lab[None, :] if s else np.ones((len(lab),) * 2, bool)
        for hd in range(heads):
            cols = slice(hd * d, (hd + 1) * d)
            scores = q[:, n, :, cols] @ k[:, n, :, cols].swapaxes(-1, -2) / math.sqrt(d)
            scores = np.where(keep, scores + bias[:, :, hd], -np.inf)
            e = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, n, :, cols] = (e / e.sum(-1, keepdims=True)) @ v[:, n, :, cols]
    out = proj(out, "o")  # (B, nW, N, C) back to the map
    nh, nw = h // win, w // win
    y = out.reshape(b, nh, nw, win, win, ch).transpose(0, 5, 1, 3, 2, 4).reshape(b, ch, h, w)
    y = np.roll(y, (s, s), axis=(2, 3)) if s else y
    return y[:, :, :height, :width]


WINDOW_ATT = Layer(
    name="window-att",
    aliases=("w-msa", "swin-att"),
    category="Attention",
    doc="Swin's window attention (W-MSA; SW-MSA with `shift=`) on a C×H×W map: multi-head "
    "self-attention within each w×w window, scores scaled by 1/√(C/h) plus a learned bias "
    "per relative position (a (2w−1)²×h table, indexed by `rel-index`'s constant). With "
    "`shift=s` the map is cyclically shifted by −s before and by +s after, and tokens that "
    "the shift brought from distant regions are masked from each other (a constant mask). A "
    "map no larger than the window is one window and is not shifted, as in Swin; a map the "
    "window does not divide is padded with zeros at the bottom and right to whole windows, "
    "and cropped after, as torchvision's Swin pads it (the MACs count the padded tokens). "
    "Biases on "
    "the query, key and value projections unless `bias=false`; the output projection always "
    "has one.",
    hparams=(
        HP("h", "size", doc="number of heads"),
        HP("w", "size", 7, "the window's side", shown=True, word="window"),
        # W-MSA and SW-MSA blocks alternate: a figure hiding shift=0 could not tell them apart
        HP("shift", "size", 0, "the cyclic shift (w/2 in every other Swin block)", shown=True),
        HP("bias", "bool", True, "biases on the query, key and value projections"),
    ),
    resolve=_window_attrs,
    params=_window_params,
    macs=_window_macs,
    layout="cl",
    example=("96×56×56", "window-att h=3 shift=3"),
    cases=(
        ("8×8×8", "window-att h=2 w=4 shift=2"),
        ("8×4×8", "window-att h=2 w=2 bias=false"),
        ("4×3×3", "window-att h=1 w=7"),
        ("8×5×7", "window-att h=2 w=3 shift=1"),
        ("4×9×4", "window-att h=1 w=4"),
    ),
    reference=lambda xs, p, s, a: window_att_ref(xs[0], p, a),
)


@dataclass(frozen=True)
class SpaceToDepthAttrs(Attrs):
    f: int
    swin: bool  # Swin's channel order (blocks of C) instead of PyTorch's pixel_unshuffle


def _s2d_attrs(c: Ctx) -> SpaceToDepthAttrs:
    x = c.rank(3, what="C×H×W")
    f = c.const("f")
    if f < 1:
        c.fail("the factor must be at least 1", hparam="f")
    for axis, n in (("H", x[1]), ("W", x[2])):
        v = n.as_int()
        if v is not None and v % f:
            c.fail(f"the factor {f} does not divide {axis}={v}", hparam="f")
    return SpaceToDepthAttrs(f, c.hp["order"] == "swin")


def space_to_depth_ref(x: Any, f: int, swin: bool) -> Any:
    """Pixel order: channel c·f² + i·f + j holds position (i, j) of each f×f cell of channel
    c (PyTorch's pixel_unshuffle); Swin's: channel (j·f + i)·C + c (its x0, x1, x2, x3)."""
    b, ch, h, w = x.shape
    t = x.reshape(b, ch, h // f, f, w // f, f)  # b, c, y, i, x, j
    t = t.transpose(0, 5, 3, 1, 2, 4) if swin else t.transpose(0, 1, 3, 5, 2, 4)
    return t.reshape(b, ch * f * f, h // f, w // f)


SPACE_TO_DEPTH = Layer(
    name="space-to-depth",
    aliases=("pixel-unshuffle",),
    category="Pooling",
    doc="Moves each f×f cell of a C×H×W map into the channels: f²C×H/f×W/f. The channels are "
    "in PyTorch's pixel_unshuffle order, or with `order=swin` in Swin's patch merging order "
    "(the cell's positions (0,0), (1,0), (0,1), (1,1), each a block of C channels).",
    hparams=(
        HP("f", "size", 2, "the cell's side"),
        HP("order", "choice", "pixel", "the channels' order", ("pixel", "swin")),
    ),
    resolve=_s2d_attrs,
    shape=lambda c: (c.x[0] * c.a.f**2, c.x[1] / c.a.f, c.x[2] / c.a.f),
    layout="cl",
    rf=True,
    window=lambda c: (c.a.f, c.a.f, 1),
    example=("96×56×56", "space-to-depth order=swin  384×28×28"),
    cases=(("3×6×6", "space-to-depth f=3  27×2×2"),),
    reference=lambda xs, p, s, a: space_to_depth_ref(xs[0], a.f, a.swin),
)


def _merge_inside(hp: Mapping[str, Any], ranks: tuple[int, ...]) -> str:
    out = "c" if hp.get("c") is not None else "2*C"
    params = ["c"] if hp.get("c") is not None else []
    return (
        f"block inside({', '.join([*params, 'eps'])}) on X: C×H×W:\n"
        "  space-to-depth f=2 order=swin\n"
        "  layernorm axis=0 eps=eps -> norm\n"
        f"  conv-2d k=1 c={out} bias=false -> reduction\n"
    )


def _merge_shape(c: Ctx) -> Shape:
    x = c.rank(3, what="C×H×W")
    for axis, n in (("H", x[1]), ("W", x[2])):
        v = n.as_int()
        if v is not None and v % 2:
            c.fail(f"patch merging halves the map, but {axis}={v} is odd")
    out = c.hp.get("c")
    return (2 * x[0] if out is None else out, x[1] / 2, x[2] / 2)


def _merge_ref(xs: Arrays, p: Weights, s: Weights, a: Any) -> Any:
    np = numpy()
    t = space_to_depth_ref(xs[0], 2, True)
    norm = p["norm"]
    t = np.moveaxis(
        layernorm_ref(np.moveaxis(t, 1, -1), norm["scale"], norm["bias"], a.eps, 1), -1, 1
    )
    w = np.asarray(p["reduction"]["w"], np.float64)[0, 0]  # (4C, c)
    return np.einsum("bchw,co->bohw", t, w)


PATCH_MERGE = Layer(
    name="patch-merge",
    aliases=("patch-merging",),
    category="Pooling",
    doc="Swin's patch merging between stages: each 2×2 cell of a C×H×W map concatenated into "
    "4C channels (`space-to-depth order=swin`), a layernorm over them, and a linear map to "
    "2C channels without bias (a 1×1 convolution): 2C×H/2×W/2.",
    hparams=(
        HP("c", "size", None, "output channels (default 2C; or from the annotation)"),
        HP("eps", "float", 1e-5, "layernorm's epsilon"),
    ),
    shape=_merge_shape,
    inside=_merge_inside,
    from_annotation=(("c", 0),),
    example=("96×56×56", "patch-merge  192×28×28"),
    cases=(("4×6×6", "patch-merge c=5 eps=1e-6"),),
    reference=_merge_ref,
)


@dataclass(frozen=True)
class RollAttrs(Attrs):
    """The shifts of the last axes (one per axis, from the first shifted), and where the code
    keeps the input (channels last when only a map's positions move)."""

    shifts: tuple[int, ...]
    axes: tuple[int, ...]
    layout: str


def _roll_attrs(c: Ctx) -> RollAttrs:
    shifts = ints(c.hp["by"])
    if not 1 <= len(shifts) <= len(c.x):
        c.fail(f"`by` shifts 1 to {len(c.x)} axes, got {len(shifts)}", hparam="by")
    axes = tuple(range(len(c.x) - len(shifts), len(c.x)))
    layout = "cl" if axes[0] >= 1 and len(c.x) >= 2 else "cf"
    return RollAttrs(shifts, axes, layout)


ROLL = Layer(
    name="roll",
    aliases=("cyclic-shift",),
    category="Tensor",
    doc="Cyclic shift of the last axes: `by=(-3, -3)` moves each position of a C×H×W map 3 up "
    "and 3 left, the first rows and columns wrapping round to the end (Swin's cyclic shift, "
    "torch.roll).",
    hparams=(HP("by", "shape", doc="the shift of each of the last axes"),),
    resolve=_roll_attrs,
    layout="attrs",
    rf=True,
    keeps_dtype=True,
    example=("96×56×56", "roll by=(-3, -3)"),
    cases=(("5×7", "roll by=(2, -3)"), ("4×6×6", "roll by=1")),
    reference=lambda xs, p, s, a: numpy().roll(xs[0], a.shifts, axis=tuple(i + 1 for i in a.axes)),
)


@dataclass(frozen=True)
class AdaptiveAttrs(Attrs):
    """The output's positions along each spatial axis, and the input's."""

    out: tuple[int, ...]
    sizes: tuple[int, ...]


def _adaptive_attrs(c: Ctx) -> AdaptiveAttrs:
    x = c.rank(2, 3, what="C×T or C×H×W")
    n = len(x) - 1
    sizes = tuple(d.as_int() for d in x[1:])
    if any(v is None for v in sizes):
        c.fail(f"adaptive pooling needs the map's size, got {fmt_shape(x)}")
    to = c.hp.get("to")
    to = (1,) * n if to is None else tuple(to)
    if len(to) == n + 1:  # the whole annotation, channels included
        if to[0] != x[0]:
            c.fail(f"pooling keeps the {x[0]} channels, but the annotation has {to[0]}")
        to = to[1:]
    if len(to) == 1:
        to = to * n
    if len(to) != n:
        c.fail(f"`to` gives {len(to)} sizes for a map of {n} spatial axes", hparam="to")
    out = ints(to)
    if any(o < 1 for o in out):
        c.fail(f"output sizes must be at least 1, got {out}", hparam="to")
    return AdaptiveAttrs(out, tuple(v for v in sizes if v is not None))


def adaptive_bounds(n: int, o: int) -> list[tuple[int, int]]:
    """PyTorch's windows: output i averages positions ⌊i·n/o⌋ ≤ j < ⌈(i+1)·n/o⌉."""
    return [((i * n) // o, -((-(i + 1) * n) // o)) for i in range(o)]


def adaptive_ref(x: Any, out: tuple[int, ...]) -> Any:
    np = numpy()
    x = np.asarray(x, np.float64)
    for axis, o in enumerate(out):
        n = x.shape[axis + 2]
        parts = [
            np.take(x, range(lo, hi), axis=axis + 2).mean(axis=axis + 2, keepdims=True)
            for lo, hi in adaptive_bounds(n, o)
        ]
        x = np.concatenate(parts, axis=axis + 2)
    return x


ADAPTIVE_AVGPOOL = Layer(
    name="adaptive-avgpool",
    aliases=("adaptive-pool",),
    category="Pooling",
    doc="Average pooling to a given output size, whatever the input's (PyTorch's "
    "AdaptiveAvgPool): output position i of an axis of n averages the input positions "
    "⌊i·n/o⌋ to ⌈(i+1)·n/o⌉ − 1. The size is `to=(7, 7)` or the annotation; 1×1 by default "
    "(`global-avgpool`).",
    hparams=(HP("to", "shape", None, "the output's spatial sizes (default: all 1)"),),
    resolve=_adaptive_attrs,
    shape=lambda c: (c.x[0], *(Expr.lift(o) for o in c.a.out)),
    from_annotation=(("to", None),),
    layout="cl",
    example=("512×14×14", "adaptive-avgpool  512×7×7"),
    cases=(
        ("3×10×9", "adaptive-avgpool to=(4, 5)"),
        ("3×7", "adaptive-avgpool to=3"),
        ("2×6×6", "adaptive-avgpool"),
    ),
    reference=lambda xs, p, s, a: adaptive_ref(xs[0], a.out),
)

LAYERS = (WINDOW_ATT, PATCH_MERGE, SPACE_TO_DEPTH, ROLL, ADAPTIVE_AVGPOOL)

"""Convolutions, pooling, upsampling and patches: layers on channels-first C×T or C×H×W maps.

Output sizes follow FIGURES.md rule 4 (every framework's floor formula); a pool's stride defaults
to its kernel and a convolution's to 1 (rule 3). The JAX lowerings run channels-last, which XLA
prefers on CPU and GPU; the code generator moves layouts so that the user never sees it.
"""

from __future__ import annotations

from math import prod

from lbdl_dsl.core.layers.base import (
    HP,
    ZEROS,
    Ctx,
    Emit,
    FanIn,
    Layer,
    PSpec,
    conv_out,
    ints,
    numel,
    positive,
    tconv_out,
)
from lbdl_dsl.core.symbolic import Expr

_SPATIAL = {1: "C×T", 2: "C×H×W"}


def _pads(c: Ctx, n: int) -> tuple[tuple[int, int], ...]:
    p = c.hp.get("p", 0)
    if p == "same":
        if any(s != 1 for s in ints(c.hp.get("s", (1,) * n))):
            c.fail("`p=same` needs stride 1", "give the padding as a number", hparam="p")
        k, d = ints(c.hp["k"]), ints(c.hp.get("d", (1,) * n))
        totals = [di * (ki - 1) for ki, di in zip(k, d)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((v, v) for v in ints(p))


def _check_groups(c: Ctx, cin: Expr, cout: Expr) -> None:
    g = c.const("g")
    for what, n in (("input", cin), ("output", cout)):
        v = n.as_int()
        if g < 1 or (v is not None and v % g):
            c.fail(f"`g={g}` groups must divide the {what} channels ({n})", hparam="g")


def _conv_shape(n: int):
    def rule(c: Ctx) -> tuple:
        x = c.rank(n + 1, what=_SPATIAL[n])
        k, s, d = ints(c.hp["k"]), ints(c.hp["s"]), ints(c.hp["d"])
        if min(k + s + d) < 1:
            c.fail("kernel, stride and dilation must be at least 1")
        _check_groups(c, x[0], c.hp["c"])
        pads = c.hp["pads"] = _pads(c, n)
        out = tuple(conv_out(x[i + 1], k[i], s[i], pads[i], d[i]) for i in range(n))
        return positive(c, (c.hp["c"], *out))

    return rule


def _conv_params(c: Ctx) -> dict[str, PSpec]:
    k, g = ints(c.hp["k"]), c.const("g")
    cin = c.x[0] / g
    roles = ("kernel",) * len(k) + ("in", "out")
    out = {"w": PSpec((*k, cin, c.hp["c"]), FanIn(cin * prod(k)), roles)}
    if c.hp["bias"]:
        out["b"] = PSpec((c.hp["c"],), ZEROS, ("out",))
    return out


def _conv_macs(c: Ctx) -> Expr:
    return numel(c.out) * (c.x[0] / c.const("g")) * prod(ints(c.hp["k"]))


def _conv_lower(e: Emit) -> str:
    bias = e.param("b") if e.has_param("b") else None
    hp = e.hp
    return e.call("conv", e.x[0], e.param("w"), bias, hp["s"], hp["pads"], hp["d"], hp["g"])


def _window(c: Ctx) -> tuple[int, int, int]:
    return (ints(c.hp["k"])[0], ints(c.hp["s"])[0], ints(c.hp.get("d", (1,)))[0])


_CONV_HP = (
    HP("c", "size", doc="output channels (taken from the annotation when left out)"),
    HP("k", "sizes", doc="kernel size, one number or one per axis"),
    HP("s", "sizes", 1, "stride"),
    HP("p", "padding", 0, "zero padding on each side, or `same`"),
    HP("d", "sizes", 1, "dilation"),
    HP("g", "size", 1, "groups (depthwise when equal to the channels)"),
    HP("bias", "bool", True, "add a trainable bias"),
)


def _conv(n: int, example: tuple[str, str]) -> Layer:
    return Layer(
        name=f"conv-{n}d",
        aliases=(f"conv{n}d",),
        category="Convolution",
        doc=f"{n}-D convolution on a channels-first {_SPATIAL[n]} map. The number of output "
        "channels is usually written only at the right of the box, as in the book.",
        hparams=_CONV_HP,
        shape=_conv_shape(n),
        params=_conv_params,
        macs=_conv_macs,
        lower=_conv_lower,
        from_annotation=(("c", 0),),
        layout="cl",
        spatial=n,
        window=_window,
        example=example,
    )


CONV1D = _conv(1, ("16×100", "conv-1d k=3 p=1  32×100"))
CONV2D = _conv(2, ("1×28×28", "conv-2d k=5  32×24×24"))


def _tconv_shape(n: int):
    def rule(c: Ctx) -> tuple:
        x = c.rank(n + 1, what=_SPATIAL[n])
        k, s, d = ints(c.hp["k"]), ints(c.hp["s"]), ints(c.hp["d"])
        p, op = ints(c.hp["p"]), ints(c.hp["op"])
        if any(o >= max(si, di) for o, si, di in zip(op, s, d)):
            c.fail("output padding must be smaller than the stride or the dilation", hparam="op")
        _check_groups(c, x[0], c.hp["c"])
        out = tuple(tconv_out(x[i + 1], k[i], s[i], p[i], op[i], d[i]) for i in range(n))
        return positive(c, (c.hp["c"], *out))

    return rule


def _tconv_params(c: Ctx) -> dict[str, PSpec]:
    k, g = ints(c.hp["k"]), c.const("g")
    roles = ("kernel",) * len(k) + ("in", "out")
    out = {"w": PSpec((*k, c.x[0], c.hp["c"] / g), FanIn(c.x[0] * prod(k)), roles)}
    if c.hp["bias"]:
        out["b"] = PSpec((c.hp["c"],), ZEROS, ("out",))
    return out


def _tconv_lower(e: Emit) -> str:
    bias = e.param("b") if e.has_param("b") else None
    return e.call(
        "conv_transpose",
        e.x[0],
        e.param("w"),
        bias,
        tuple(e.hp["s"]),
        tuple(e.hp["p"]),
        tuple(e.hp["op"]),
        tuple(e.hp["d"]),
        e.hp["g"],
    )


def _tconv(n: int, example: tuple[str, str]) -> Layer:
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
        shape=_tconv_shape(n),
        params=_tconv_params,
        macs=lambda c: numel(c.x) * (c.hp["c"] / c.const("g")) * prod(ints(c.hp["k"])),
        lower=_tconv_lower,
        from_annotation=(("c", 0),),
        layout="cl",
        spatial=n,
        example=example,
    )


TCONV1D = _tconv(1, ("8×50", "tconv-1d k=2 s=2  4×100"))
TCONV2D = _tconv(2, ("64×14×14", "tconv-2d k=2 s=2  32×28×28"))


def _pool_shape(n: int, dilated: bool):
    def rule(c: Ctx) -> tuple:
        x = c.rank(n + 1, what=_SPATIAL[n])
        k = ints(c.hp["k"])
        s = ints(c.hp["s"]) if c.hp.get("s") is not None else k
        d = ints(c.hp["d"]) if dilated else (1,) * n
        pads = c.hp["pads"] = _pads(c, n)
        if any(p[0] * 2 > ki for p, ki in zip(pads, k)):
            c.fail("padding must be at most half the kernel", hparam="p")
        c.hp["s"] = s
        return positive(
            c, (x[0], *(conv_out(x[i + 1], k[i], s[i], pads[i], d[i]) for i in range(n)))
        )

    return rule


def _pool(kind: str, n: int, example: tuple[str, str]) -> Layer:
    dilated = kind == "max"
    suffix = "" if n == 2 else "-1d"
    fn = "max_pool" if dilated else "avg_pool"

    def lower(e: Emit) -> str:
        extra = (tuple(e.hp["d"]),) if dilated else ()
        return e.call(fn, e.x[0], tuple(e.hp["k"]), tuple(e.hp["s"]), e.hp["pads"], *extra)

    hps = [
        HP("k", "sizes", doc="window size"),
        HP("s", "sizes", None, "stride (default: the window size)"),
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
        shape=_pool_shape(n, dilated),
        lower=lower,
        layout="cl",
        spatial=n,
        window=_window,
        example=example,
    )


MAXPOOL = _pool("max", 2, ("32×24×24", "maxpool k=3  32×8×8"))
MAXPOOL1D = _pool("max", 1, ("16×100", "maxpool-1d k=2  16×50"))
AVGPOOL = _pool("avg", 2, ("2048×7×7", "avgpool k=7  2048×1×1"))
AVGPOOL1D = _pool("avg", 1, ("16×100", "avgpool-1d k=4  16×25"))

GLOBAL_AVGPOOL = Layer(
    name="global-avgpool",
    aliases=("gap", "adaptive-avgpool"),
    category="Pooling",
    doc="Average over all spatial positions of each channel: C×H×W → C×1×1.",
    shape=lambda c: (c.rank(2, 3, what="C×T or C×H×W")[0],) + (Expr.lift(1),) * (len(c.x) - 1),
    lower=lambda e: e.call("global_avg_pool", e.x[0]),
    layout="cl",
    example=("512×7×7", "global-avgpool  512×1×1"),
)


def _upsample_shape(c: Ctx) -> tuple:
    x = c.rank(3, what="C×H×W")
    f = c.const("f")
    if f < 1:
        c.fail("the factor must be at least 1", hparam="f")
    return (x[0], x[1] * f, x[2] * f)


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
    lower=lambda e: e.call(f"upsample_{e.hp['mode']}", e.x[0], e.hp["f"]),
    layout="cl",
    example=("64×14×14", "upsample f=2 mode=bilinear  64×28×28"),
)


def _patches_shape(c: Ctx) -> tuple:
    x = c.rank(3, what="C×H×W")
    size = c.const("P")
    for axis, n in (("H", x[1]), ("W", x[2])):
        v = n.as_int()
        if v is not None and v % size:
            c.fail(f"the patch size {size} does not divide {axis}={v}", hparam="P")
    return ((x[1] / size) * (x[2] / size), x[0] * size * size)


PATCHES = Layer(
    name="patches",
    aliases=("patchify",),
    category="Pooling",
    doc="Cuts a C×H×W image into M = (H/P)(W/P) patches of P×P, each flattened channels-first: "
    "M×CP² (ViT, Fig. 5.9).",
    hparams=(HP("P", "size", doc="patch side"),),
    shape=_patches_shape,
    lower=lambda e: e.call("patches", e.x[0], e.hp["P"]),
    layout="cl",
    out_layout="cf",
    example=("3×32×32", "patches P=8  16×192"),
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

"""Layers that move, combine and pick values without parameters: reshape, +, concat, take...

FIGURES.md rule 2: moving between a channels-first map and a sequence is an explicit reshape or
transpose in the spec, so these layers see (and the lowering restores) the spec's layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.layers.base import (
    HP,
    TOKEN,
    Arrays,
    Attrs,
    AxisAttrs,
    Ctx,
    Layer,
    Shape,
    Weights,
    fmt_shape,
    ints,
    numel,
    numpy,
    resolve_axis,
)
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class ReshapeAttrs(Attrs):
    """The shape of each sample after the box (a -1 axis already inferred)."""

    to: tuple[Expr, ...]


@dataclass(frozen=True)
class PermAttrs(Attrs):
    perm: tuple[int, ...]


@dataclass(frozen=True)
class TakeAttrs(Attrs):
    axis: int
    index: int


@dataclass(frozen=True)
class SliceAttrs(Attrs):
    """Positions start ≤ i < stop of one axis (`split` resolves to one of these too)."""

    axis: int
    start: Expr
    stop: Expr


@dataclass(frozen=True)
class BroadcastAttrs(Attrs):
    """How many axes each operand of `+`/`mul` lacks in front of its per-sample shape.

    Per-sample shapes broadcast on their trailing axes (4×8 with 8); the batch axis of the
    generated code stays the first of every operand, so a backend inserts the missing axes
    after it, never before it (issue 17, item 10b). All zeros, the common case, shows nothing.
    """

    pads: tuple[int, ...]

    def items(self) -> tuple[tuple[str, Any], ...]:
        return (("pads", self.pads),) if any(self.pads) else ()


def _broadcast_attrs(c: Ctx) -> BroadcastAttrs:
    rank = max(len(s) for s in c.ins)
    return BroadcastAttrs(tuple(rank - len(s) for s in c.ins))


def _reshape_attrs(c: Ctx) -> ReshapeAttrs:
    target = c.hp.get("to")
    if target is None:
        c.fail("`reshape` needs its target shape", "write it at the right: `reshape  256`")
    dims = list(target)
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1:
        c.fail("only one axis of a reshape can be inferred (-1)", hparam="to")
    if unknown:
        rest = numel([d for d in dims if d != -1])
        dims[unknown[0]] = numel(c.x) / rest
    out = tuple(Expr.lift(d) for d in dims)
    if numel(out) != numel(c.x):
        c.fail(
            f"cannot reshape {fmt_shape(c.x)} ({numel(c.x)} values) into {fmt_shape(out)} "
            f"({numel(out)} values)"
        )
    return ReshapeAttrs(out)


def _reshape_ref(xs: Arrays, p: Weights, s: Weights, a: ReshapeAttrs) -> Any:
    return xs[0].reshape(xs[0].shape[0], *a.to)


RESHAPE = Layer(
    name="reshape",
    aliases=("view",),
    category="Tensor",
    doc="Reshapes each sample (channels-first order, as the book's figures read). The target is "
    "the annotation at the right of the box, or `to=(...)` with one -1 axis inferred.",
    hparams=(HP("to", "shape", None, "the target shape (default: the annotation)"),),
    resolve=_reshape_attrs,
    shape=lambda c: c.a.to,
    from_annotation=(("to", None),),
    keeps_dtype=True,
    example=("64×2×2", "reshape  256"),
    cases=(("6×8", "reshape to=(2, -1)  2×24"),),
    reference=_reshape_ref,
)


def _flatten_attrs(c: Ctx) -> ReshapeAttrs:
    start = c.hp["start"]
    if not 0 <= start < len(c.x):
        c.fail(f"`start={start}` is out of range for {len(c.x)} axes", hparam="start")
    return ReshapeAttrs((*c.x[:start], numel(c.x[start:])))


FLATTEN = Layer(
    name="flatten",
    category="Tensor",
    doc="Flattens the axes from `start` on (all of them by default), channels-first.",
    hparams=(HP("start", "axis", 0, "the first axis to flatten"),),
    resolve=_flatten_attrs,
    shape=lambda c: c.a.to,
    keeps_dtype=True,
    example=("64×2×2", "flatten  256"),
    reference=_reshape_ref,
)


def _perm(c: Ctx) -> tuple[int, ...]:
    perm = c.hp.get("perm")
    n = len(c.x)
    if perm is None:
        if n < 2:
            c.fail("`transpose` needs at least 2 axes")
        perm = (*range(n - 2), n - 1, n - 2)
    perm = ints(perm)
    if sorted(perm) != list(range(n)):
        c.fail(f"`perm={perm}` is not a permutation of {n} axes", hparam="perm")
    return perm


TRANSPOSE = Layer(
    name="transpose",
    aliases=("permute",),
    category="Tensor",
    doc="Permutes the axes of each sample; swaps the last two by default (T×D ↔ D×T).",
    hparams=(HP("perm", "axes", None, "the new order of the axes"),),
    resolve=lambda c: PermAttrs(_perm(c)),
    shape=lambda c: tuple(c.x[i] for i in c.a.perm),
    keeps_dtype=True,
    example=("16×64", "transpose  64×16"),
    reference=lambda xs, p, s, a: xs[0].transpose(0, *(i + 1 for i in a.perm)),
)


def _take_attrs(c: Ctx) -> TakeAttrs:
    a = resolve_axis(c)
    i, n = c.const("i"), c.x[a].as_int()
    if n is not None and not -n <= i < n:
        c.fail(f"index {i} is out of range for an axis of {n}", hparam="i")
    return TakeAttrs(a, i)


def _index(xs: Arrays, axis: int, item: Any) -> Any:
    return xs[0][(slice(None),) * (axis + 1) + (item,)]


TAKE = Layer(
    name="take",
    aliases=("select",),
    category="Tensor",
    doc="Keeps one position of an axis and drops the axis (ViT keeps Z0, the CLS token).",
    hparams=(
        HP("i", "index", 0, "the position (-1: the last)", shown=True),
        HP("axis", "axis", 0, "the axis"),
    ),
    resolve=_take_attrs,
    shape=lambda c: c.x[: c.a.axis] + c.x[c.a.axis + 1 :],
    keeps_dtype=True,
    example=("17×64", "take i=0  64"),
    cases=(("6×8", "take i=2  8"), ("6×8", "take i=-1 axis=1  6")),
    reference=lambda xs, p, s, a: _index(xs, a.axis, a.index),
)


def _slice_attrs(c: Ctx) -> SliceAttrs:
    a = resolve_axis(c)
    start, stop = Expr.lift(c.hp["start"]), c.hp.get("stop")
    stop = c.x[a] if stop is None else Expr.lift(stop)
    size, length = (stop - start).as_int(), c.x[a].as_int()
    if size is not None and size <= 0:
        c.fail(f"the slice {start}:{stop} is empty", hparam="stop")
    beyond = (stop - c.x[a]).as_int()
    if beyond is not None and beyond > 0:
        c.fail(
            f"the slice {start}:{stop} ends past the axis, which has {c.x[a]} positions",
            f"stop is at most {length if length is not None else c.x[a]}",
            hparam="stop",
        )
    return SliceAttrs(a, start, stop)


def _slice_shape(c: Ctx) -> Shape:
    a: SliceAttrs = c.a
    return (*c.x[: a.axis], a.stop - a.start, *c.x[a.axis + 1 :])


def _slice_ref(xs: Arrays, p: Weights, s: Weights, a: SliceAttrs) -> Any:
    return _index(xs, a.axis, slice(a.start, a.stop))


SLICE = Layer(
    name="slice",
    category="Tensor",
    doc="Keeps positions start ≤ i < stop of one axis.",
    hparams=(
        HP("start", "size", 0, "first position kept"),
        HP("stop", "size", None, "first position dropped (default: the end)"),
        HP("axis", "axis", 0, "the axis"),
    ),
    resolve=_slice_attrs,
    shape=_slice_shape,
    keeps_dtype=True,
    example=("16×64", "slice stop=8  8×64"),
    cases=(("6×8", "slice start=1 stop=4  3×8"),),
    reference=_slice_ref,
)


def _split_attrs(c: Ctx) -> SliceAttrs:
    a = resolve_axis(c)
    n, i = c.const("n"), c.const("i")
    if n < 1 or not 0 <= i < n:
        c.fail(f"part {i} of {n} does not exist", hparam="i")
    size = c.x[a].as_int()
    if size is not None and size % n:
        c.fail(f"an axis of {size} does not split into {n} equal parts", hparam="n")
    part = c.x[a] / n
    return SliceAttrs(a, part * i, part * (i + 1))


SPLIT = Layer(
    name="split",
    aliases=("chunk",),
    category="Tensor",
    doc="Part i of n equal parts along an axis (one box per part you keep).",
    hparams=(
        HP("n", "size", 2, "number of parts"),
        HP("i", "size", 0, "which part"),
        HP("axis", "axis", 0, "the axis"),
    ),
    resolve=_split_attrs,
    shape=_slice_shape,
    keeps_dtype=True,
    example=("16×64", "split n=2 i=1  8×64"),
    reference=_slice_ref,
)


def refuse_bool(c: Ctx) -> None:
    """Arithmetic on a Boolean tensor is refused: read as 0/1 it silently gives numbers that a
    mask was never meant to be. The cast that says so is one box."""
    for i, dtype in enumerate(c.dtypes):
        if dtype == "bool":
            which = "the flowing tensor" if i == 0 else f"input {i + 1}"
            c.fail(
                f"`{c.op}` computes with numbers, but {which} is a Boolean tensor",
                "cast it explicitly where 0/1 is meant: `cast to=float` (or `cast to=int`)",
            )


def _broadcast(c: Ctx) -> Shape:
    refuse_bool(c)
    rank = max(len(s) for s in c.ins)
    out = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in c.ins if len(s) - rank + axis >= 0]
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            shown = " and ".join(fmt_shape(s) for s in c.ins)
            c.fail(f"`{c.op}` needs matching shapes, got {shown}")
        out.append(sizes.pop() if sizes else Expr.lift(1))
    return tuple(out)


ADD = Layer(
    name="+",
    aliases=("add",),
    category="Combine",
    doc="Elementwise sum of the flowing tensor and the tensors named in parentheses: "
    "`+(skip)`. Shapes must match (a size of 1 broadcasts).",
    arity=(2, 16),
    resolve=_broadcast_attrs,
    shape=_broadcast,
    layout="any",
    rf=True,
    glyph="+",
    ident="add",
    example=("32×8×8", "+(X)"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: sum(xs[1:], xs[0]),
)

MUL = Layer(
    name="mul",
    aliases=("multiply",),
    category="Combine",
    doc="Elementwise product (gating, squeeze-and-excitation): `mul(gate)`; a size of 1 "
    "broadcasts, so C×H×W times C×1×1 scales each channel.",
    arity=(2, 16),
    resolve=_broadcast_attrs,
    shape=_broadcast,
    layout="any",
    rf=True,
    example=("32×8×8", "mul(X)"),
    step=lambda c: TOKEN,
    reference=lambda xs, p, s, a: numpy().prod(numpy().stack(numpy().broadcast_arrays(*xs)), 0),
)


def _concat_shape(c: Ctx) -> Shape:
    a = c.a.axis
    first = c.x
    for other in c.ins[1:]:
        same = len(other) == len(first) and all(
            other[i] == first[i] for i in range(len(first)) if i != a
        )
        if not same:
            shown = " and ".join(fmt_shape(s) for s in c.ins)
            c.fail(f"`concat` on axis {a} needs the other axes to match, got {shown}")
    joined = sum((s[a] for s in c.ins), Expr.lift(0))
    return (*first[:a], joined, *first[a + 1 :])


CONCAT = Layer(
    name="concat",
    aliases=("cat",),
    category="Combine",
    doc="Concatenates the flowing tensor and the tensors in parentheses along an axis "
    "(channels by default): U-Net's skips, DenseNet's dense connections.",
    hparams=(HP("axis", "axis", 0, "the axis (0: channels of C×H×W, or positions of T×D)"),),
    arity=(2, 64),
    resolve=lambda c: AxisAttrs(resolve_axis(c)),
    shape=_concat_shape,
    example=("32×8×8", "concat(X)  64×8×8"),
    cases=(("32×8×8", "concat(X) axis=2  32×8×16"),),
    reference=lambda xs, p, s, a: numpy().concatenate(xs, axis=a.axis + 1),
)


def _matmul_shape(c: Ctx) -> Shape:
    refuse_bool(c)
    a, b = c.ins
    for shape, what in ((a, "first"), (b, "second")):
        if len(shape) < 2:
            c.fail(
                f"`matmul` multiplies matrices: its {what} operand needs two axes or more "
                f"(…×N×K by …×K×M), got {fmt_shape(shape)}",
                "reshape a vector to 1×K (a row) or K×1 (a column)",
            )
    if len(a) != len(b):
        c.fail(
            f"`matmul` needs operands with as many axes, got {fmt_shape(a)} and {fmt_shape(b)}",
            "reshape one of them so that their leading axes line up (a size of 1 broadcasts)",
        )
    if c.hp["tb"]:
        b = (*b[:-2], b[-1], b[-2])
    lead = []
    for x, y in zip(a[:-2], b[:-2]):
        if x != y and Expr.lift(1) not in (x, y):
            c.fail(
                f"`matmul`'s leading axes {fmt_shape(a[:-2])} and {fmt_shape(b[:-2])} differ",
                "they must match, or be 1 to broadcast",
            )
        lead.append(y if x == Expr.lift(1) else x)
    if a[-1] != b[-2]:
        shown = f"{fmt_shape(c.ins[1])}{' transposed' if c.hp['tb'] else ''}"
        c.fail(
            f"cannot multiply {fmt_shape(c.ins[0])} by {shown}: {a[-1]} ≠ {b[-2]}",
            "the first operand's last axis must be the second's next to last",
        )
    return (*lead, a[-2], b[-1])


MATMUL = Layer(
    name="matmul",
    aliases=("matrix-product",),
    category="Combine",
    doc="Matrix product of the flowing tensor (…×N×K) and the one in parentheses (…×K×M, or "
    "…×M×K with `tb=true`), over any number of leading axes, which match or broadcast from 1 "
    "(heads, windows): a GNN's aggregation A·H, CLIP's similarity matrix, attention written out.",
    hparams=(HP("tb", "bool", False, "transpose the second operand"),),
    arity=(2, 2),
    shape=_matmul_shape,
    macs=lambda c: numel(c.y) * c.x[-1],
    example=("8×16", "matmul(X) tb=true  8×8"),
    cases=(
        ("2×3×4×5; B: 2×3×5×6", "matmul(B)  2×3×4×6"),
        ("2×1×4×5; B: 1×3×6×5", "matmul(B) tb=true  2×3×4×6"),
    ),
    reference=lambda xs, p, s, a: xs[0] @ (xs[1].swapaxes(-1, -2) if a.tb else xs[1]),
)


MEAN = Layer(
    name="mean",
    aliases=("avg",),
    category="Tensor",
    doc="Average over one axis, dropping it (a graph's readout, a sequence's pooling).",
    hparams=(HP("axis", "axis", 0, "the axis"),),
    resolve=lambda c: AxisAttrs(resolve_axis(c)),
    shape=lambda c: c.x[: c.a.axis] + c.x[c.a.axis + 1 :],
    keeps_dtype=True,
    example=("16×64", "mean  64"),
    reference=lambda xs, p, s, a: xs[0].mean(axis=a.axis + 1),
)

L2NORM = Layer(
    name="l2norm",
    aliases=("normalize",),
    category="Tensor",
    doc="Divides each vector of the last axis by its Euclidean norm (CLIP's embeddings).",
    keeps_dtype=True,
    example=("512", "l2norm"),
    reference=lambda xs, p, s, a: xs[0] / numpy().linalg.norm(xs[0], axis=-1, keepdims=True),
)


@dataclass(frozen=True)
class PadAttrs(Attrs):
    """Positions added before and after along each axis of a sample, from the first."""

    widths: tuple[tuple[Expr, Expr], ...]
    value: float
    mode: str


def _pad_attrs(c: Ctx) -> PadAttrs:
    before, after = c.hp["before"] or (), c.hp["after"] or ()
    if not before and not after:
        c.fail("`pad` needs `before=` or `after=`", "e.g. `pad after=(1, 1)` on C×H×W")
    n = max(len(before), len(after))
    if n > len(c.x):
        c.fail(f"`pad` gives {n} axes widths, but its input has {len(c.x)} axes")
    zero = Expr.lift(0)
    before = (zero,) * (n - len(before)) + tuple(before)
    after = (zero,) * (n - len(after)) + tuple(after)
    for w in (*before, *after):
        if (v := w.as_int()) is not None and v < 0:
            c.fail(f"`pad` adds positions: {w} is negative", "`slice` removes positions")
    if c.hp["mode"] != "constant" and c.hp["value"] != 0.0:
        c.fail("`value=` fills a constant pad only", hparam="value")
    widths = ((zero, zero),) * (len(c.x) - n) + tuple(zip(before, after))
    return PadAttrs(widths, c.hp["value"], c.hp["mode"])


def _pad_ref(xs: Arrays, p: Weights, s: Weights, a: PadAttrs) -> Any:
    np = numpy()
    known = [(Expr.lift(b).as_int(), Expr.lift(e).as_int()) for b, e in a.widths]
    widths = [(0, 0)] + [(b or 0, e or 0) for b, e in known]  # a reference's sizes are known
    if a.mode == "constant":
        return np.pad(xs[0], widths, constant_values=a.value)
    return np.pad(xs[0], widths, mode=a.mode)


PAD = Layer(
    name="pad",
    category="Tensor",
    doc="Adds positions around a sample: `before=` and `after=` give the widths of the last "
    "axes in order (`pad after=(1, 1)` on C×H×W adds a row at the bottom and a column at the "
    "right, as Swin pads a map to its windows), filled with `value` (0 by default), or by "
    "reflecting (`mode=reflect`) or repeating (`mode=edge`) the border.",
    hparams=(
        HP("before", "shape", None, "positions added before, per last axis"),
        HP("after", "shape", None, "positions added after, per last axis"),
        HP("value", "float", 0.0, "the constant filled in"),
        HP("mode", "choice", "constant", "how to fill", ("constant", "reflect", "edge")),
    ),
    resolve=_pad_attrs,
    shape=lambda c: tuple(d + b + e for d, (b, e) in zip(c.x, c.a.widths)),
    keeps_dtype=True,
    example=("3×5×7", "pad after=(1, 1)  3×6×8"),
    cases=(
        ("3×5×7", "pad before=(2, 0) after=(1, 3) value=-1.5  3×8×10"),
        ("6×8", "pad before=2 after=2 mode=reflect  6×12"),
        ("6×8", "pad before=1 mode=edge  6×9"),
    ),
    reference=_pad_ref,
)


def _cast_type(c: Ctx) -> tuple[str, Expr | None]:
    to = c.hp["to"]
    if to == "int" and c.dtypes and c.dtypes[0] == "float":
        c.fail(
            "`cast to=int` of a float tensor would truncate it",
            "cast Booleans or whole numbers; round a float with a box that says how",
            hparam="to",
        )
    vocab = Expr.lift(2) if to == "int" and c.dtypes and c.dtypes[0] == "bool" else None
    if to == "int" and c.dtypes and c.dtypes[0] == "int":
        vocab = c.vocab[0]
    return to, vocab


def _cast_ref(xs: Arrays, p: Weights, s: Weights, a: Any) -> Any:
    np = numpy()
    return np.asarray(xs[0]).astype({"float": np.float64, "int": np.int32, "bool": bool}[a.to])


CAST = Layer(
    name="cast",
    aliases=("astype",),
    category="Tensor",
    doc="Converts a tensor's type: `cast to=float` reads a Boolean mask as 0/1 (or whole "
    "numbers as numbers), `cast to=int` a mask as 0/1 indices, `cast to=bool` nonzero as true. "
    "Arithmetic refuses a Boolean tensor without it.",
    hparams=(HP("to", "choice", "float", "the type", ("float", "int", "bool")),),
    layout="any",
    out_type=_cast_type,
    example=("8×8 bool", "cast to=float"),
    cases=(("6 int<5>", "cast to=float"),),
    reference=_cast_ref,
)

SAMPLE = Layer(
    name="sample",
    aliases=("reparam",),
    category="Combine",
    doc="A VAE's sample: mean μ (flowing) and log-variance (in parentheses) give "
    "μ + exp(logvar/2)·ε with ε ~ N(0, 1) in training, μ in evaluation.",
    arity=(2, 2),
    shape=_broadcast,
    stochastic=True,
    example=("16", "sample(logvar)"),
    reference=lambda xs, p, s, a: xs[0],  # evaluation: the mean
)

LAYERS = (
    RESHAPE,
    FLATTEN,
    TRANSPOSE,
    TAKE,
    SLICE,
    SPLIT,
    ADD,
    MUL,
    CONCAT,
    MATMUL,
    PAD,
    CAST,
    MEAN,
    L2NORM,
    SAMPLE,
)

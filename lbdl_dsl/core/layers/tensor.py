"""Layers that move, combine and pick values without parameters: reshape, +, concat, take...

FIGURES.md rule 2: moving between a channels-first map and a sequence is an explicit reshape or
transpose in the spec, so these layers see (and the lowering restores) the spec's layout.
"""

from __future__ import annotations

from lbdl_dsl.core.layers.base import HP, Ctx, Emit, Layer, fmt_shape, ints, numel
from lbdl_dsl.core.symbolic import Expr


def _reshape_shape(c: Ctx) -> tuple:
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
    c.hp["to"] = out
    return out


def _reshape_lower(e: Emit) -> str:
    return f"{e.x[0]}.reshape(({e.x[0]}.shape[0], {', '.join(map(str, e.out_shape))}))"


RESHAPE = Layer(
    name="reshape",
    aliases=("view",),
    category="Tensor",
    doc="Reshapes each sample (channels-first order, as the book's figures read). The target is "
    "the annotation at the right of the box, or `to=(...)` with one -1 axis inferred.",
    hparams=(HP("to", "shape", None, "the target shape (default: the annotation)"),),
    shape=_reshape_shape,
    lower=_reshape_lower,
    from_annotation=(("to", None),),
    example=("64×2×2", "reshape  256"),
)


def _flatten_shape(c: Ctx) -> tuple:
    start = c.hp["start"]
    if not 0 <= start < len(c.x):
        c.fail(f"`start={start}` is out of range for {len(c.x)} axes", hparam="start")
    return (*c.x[:start], numel(c.x[start:]))


FLATTEN = Layer(
    name="flatten",
    category="Tensor",
    doc="Flattens the axes from `start` on (all of them by default), channels-first.",
    hparams=(HP("start", "axis", 0, "the first axis to flatten"),),
    shape=_flatten_shape,
    lower=lambda e: f"{e.x[0]}.reshape(({e.x[0]}.shape[0], {', '.join(map(str, e.out_shape))}))",
    example=("64×2×2", "flatten  256"),
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


def _transpose_shape(c: Ctx) -> tuple:
    perm = c.hp["perm"] = _perm(c)
    return tuple(c.x[i] for i in perm)


TRANSPOSE = Layer(
    name="transpose",
    aliases=("permute",),
    category="Tensor",
    doc="Permutes the axes of each sample; swaps the last two by default (T×D ↔ D×T).",
    hparams=(HP("perm", "axes", None, "the new order of the axes"),),
    shape=_transpose_shape,
    lower=lambda e: f"{e.x[0]}.transpose((0, {', '.join(str(i + 1) for i in e.hp['perm'])}))",
    example=("16×64", "transpose  64×16"),
)


def _axis_of(c: Ctx) -> int:
    a = c.hp["axis"]
    if not -len(c.x) <= a < len(c.x):
        c.fail(f"axis {a} is out of range for {len(c.x)} axes", hparam="axis")
    return a % len(c.x)


def _take_shape(c: Ctx) -> tuple:
    a = _axis_of(c)
    i, n = c.const("i"), c.x[a].as_int()
    if n is not None and not -n <= i < n:
        c.fail(f"index {i} is out of range for an axis of {n}", hparam="i")
    c.hp["axis"] = a
    return c.x[:a] + c.x[a + 1 :]


def _index(e: Emit, item: str) -> str:
    return f"{e.x[0]}[{', '.join([':'] * (e.hp['axis'] + 1) + [item])}]"


TAKE = Layer(
    name="take",
    aliases=("select",),
    category="Tensor",
    doc="Keeps one position of an axis and drops the axis (ViT keeps Z0, the CLS token).",
    hparams=(HP("i", "index", 0, "the position (-1: the last)"), HP("axis", "axis", 0, "the axis")),
    shape=_take_shape,
    lower=lambda e: _index(e, str(e.hp["i"])),
    example=("17×64", "take i=0  64"),
)


def _slice_shape(c: Ctx) -> tuple:
    a = _axis_of(c)
    start = c.hp["start"]
    stop = c.hp.get("stop")
    stop = c.x[a] if stop is None else stop
    size = Expr.lift(stop) - start
    v = size.as_int()
    if v is not None and v <= 0:
        c.fail(f"the slice {start}:{stop} is empty", hparam="stop")
    c.hp.update(axis=a, stop=stop)
    return (*c.x[:a], size, *c.x[a + 1 :])


SLICE = Layer(
    name="slice",
    category="Tensor",
    doc="Keeps positions start ≤ i < stop of one axis.",
    hparams=(
        HP("start", "size", 0, "first position kept"),
        HP("stop", "size", None, "first position dropped (default: the end)"),
        HP("axis", "axis", 0, "the axis"),
    ),
    shape=_slice_shape,
    lower=lambda e: _index(e, f"{e.hp['start']}:{e.hp['stop']}"),
    example=("16×64", "slice stop=8  8×64"),
)


def _split_shape(c: Ctx) -> tuple:
    a = _axis_of(c)
    n, i = c.const("n"), c.const("i")
    if n < 1 or not 0 <= i < n:
        c.fail(f"part {i} of {n} does not exist", hparam="i")
    size = c.x[a].as_int()
    if size is not None and size % n:
        c.fail(f"an axis of {size} does not split into {n} equal parts", hparam="n")
    c.hp["axis"] = a
    return (*c.x[:a], c.x[a] / n, *c.x[a + 1 :])


def _split_lower(e: Emit) -> str:
    size = e.in_shapes[0][e.hp["axis"]] // e.hp["n"]
    return _index(e, f"{e.hp['i'] * size}:{(e.hp['i'] + 1) * size}")


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
    shape=_split_shape,
    lower=_split_lower,
    example=("16×64", "split n=2 i=1  8×64"),
)


def _broadcast(c: Ctx) -> tuple:
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
    shape=_broadcast,
    lower=lambda e: " + ".join(e.x),
    layout="any",
    example=("32×8×8", "+(X)"),
)

MUL = Layer(
    name="mul",
    aliases=("multiply",),
    category="Combine",
    doc="Elementwise product (gating, squeeze-and-excitation): `mul(gate)`; a size of 1 "
    "broadcasts, so C×H×W times C×1×1 scales each channel.",
    arity=(2, 16),
    shape=_broadcast,
    lower=lambda e: " * ".join(e.x),
    layout="any",
    example=("32×8×8", "mul(X)"),
)


def _concat_shape(c: Ctx) -> tuple:
    a = _axis_of(c)
    first = c.x
    for other in c.ins[1:]:
        same = len(other) == len(first) and all(
            other[i] == first[i] for i in range(len(first)) if i != a
        )
        if not same:
            shown = " and ".join(fmt_shape(s) for s in c.ins)
            c.fail(f"`concat` on axis {a} needs the other axes to match, got {shown}")
    c.hp["axis"] = a
    joined = sum((s[a] for s in c.ins), Expr.lift(0))
    return (*first[:a], joined, *first[a + 1 :])


def _concat_lower(e: Emit) -> str:
    return f"jnp.concatenate(({', '.join(e.x)},), axis={e.hp['axis'] + 1})"


CONCAT = Layer(
    name="concat",
    aliases=("cat",),
    category="Combine",
    doc="Concatenates the flowing tensor and the tensors in parentheses along an axis "
    "(channels by default): U-Net's skips, DenseNet's dense connections.",
    hparams=(HP("axis", "axis", 0, "the axis (0: channels of C×H×W, or positions of T×D)"),),
    arity=(2, 64),
    shape=_concat_shape,
    lower=_concat_lower,
    example=("32×8×8", "concat(X)  64×8×8"),
)


def _matmul_shape(c: Ctx) -> tuple:
    a = c.rank(2, 3, what="…×N×K")
    b = c.rank(2, 3, what="…×K×M", i=1)
    if c.hp["tb"]:
        b = (*b[:-2], b[-1], b[-2])
    if a[-1] != b[-2] or a[:-2] != b[:-2]:
        c.fail(f"cannot multiply {fmt_shape(c.ins[0])} by {fmt_shape(c.ins[1])}")
    return (*a[:-1], b[-1])


MATMUL = Layer(
    name="matmul",
    aliases=("matrix-product",),
    category="Combine",
    doc="Matrix product of the flowing tensor (…×N×K) and the one in parentheses (…×K×M, or "
    "…×M×K with `tb=true`): a GNN's aggregation A·H, CLIP's similarity matrix.",
    hparams=(HP("tb", "bool", False, "transpose the second operand"),),
    arity=(2, 2),
    shape=_matmul_shape,
    macs=lambda c: numel(c.out) * c.x[-1],
    lower=lambda e: f"{e.x[0]} @ {e.x[1]}" + (".swapaxes(-1, -2)" if e.hp["tb"] else ""),
    example=("8×16", "matmul(X) tb=true  8×8"),
)


def _mean_shape(c: Ctx) -> tuple:
    a = _axis_of(c)
    c.hp["axis"] = a
    return c.x[:a] + c.x[a + 1 :]


MEAN = Layer(
    name="mean",
    aliases=("avg",),
    category="Tensor",
    doc="Average over one axis, dropping it (a graph's readout, a sequence's pooling).",
    hparams=(HP("axis", "axis", 0, "the axis"),),
    shape=_mean_shape,
    lower=lambda e: f"{e.x[0]}.mean(axis={e.hp['axis'] + 1})",
    example=("16×64", "mean  64"),
)

L2NORM = Layer(
    name="l2norm",
    aliases=("normalize",),
    category="Tensor",
    doc="Divides each vector of the last axis by its Euclidean norm (CLIP's embeddings).",
    lower=lambda e: e.call("l2_normalize", e.x[0]),
    example=("512", "l2norm"),
)


def _sample_lower(e: Emit) -> str:
    return e.call("reparameterize", e.x[0], e.x[1], e.train, e.key())


SAMPLE = Layer(
    name="sample",
    aliases=("reparam",),
    category="Combine",
    doc="A VAE's sample: mean μ (flowing) and log-variance (in parentheses) give "
    "μ + exp(logvar/2)·ε with ε ~ N(0, 1) in training, μ in evaluation.",
    arity=(2, 2),
    shape=_broadcast,
    lower=_sample_lower,
    stochastic=True,
    example=("16", "sample(logvar)"),
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
    MEAN,
    L2NORM,
    SAMPLE,
)

"""Constant tensors: boxes that read no input and compute a tensor from sizes alone.

A sin-cos position table (Vaswani et al.'s in 1-D, MAE's and DiT's in 2-D), a band of a
matrix (a local-attention mask), the relative position of every pair of positions of a grid
(Swin's index into its bias table) are fixed by the sizes of the model, so they are neither
trainable parameters nor state, and never inputs the user must supply. A constant box starts a
new flowing tensor, as `input` does; its size is written at its right or given by its
hyper-parameters, and it is drawn as a box with no arrow in. The code computes the tensor once,
when the model is traced, with a batch axis of one that broadcasts against the batch of the
tensors it meets (`+`, `mul`, `attention`'s mask, `gather`'s index).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.formula import INDEX_NAMES, Formula, evaluate, numbers, whole_in_range
from lbdl_dsl.core.layers.base import HP, Attrs, Ctx, Layer, numpy, prod_int
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class TableAttrs(Attrs):
    """A sin-cos table: positions (a grid's rows and columns in 2-D), features, base period."""

    grid: tuple[int, ...]
    d: int
    base: float
    split: bool


def _known(c: Ctx, name: str, at_least: int = 1) -> int:
    v = c.const(name)
    if v < at_least:
        c.fail(f"`{name}` must be at least {at_least}, got {v}", hparam=name)
    return v


def _base(c: Ctx) -> float:
    if not c.hp["base"] > 1:
        c.fail(f"the base period must be more than 1, got {c.hp['base']}", hparam="base")
    return float(c.hp["base"])


def _sincos_1d_attrs(c: Ctx) -> TableAttrs:
    t, d = _known(c, "t"), _known(c, "d", 2)
    if d % 2:
        c.fail(f"a sin-cos table needs an even number of features, got d={d}", hparam="d")
    return TableAttrs((t,), d, _base(c), c.hp["split"])


def sincos_1d_ref(pos: Any, d: int, base: float, split: bool) -> Any:
    """Position p, feature pair i: sin and cos of p / base^(2i/d); alternating (§ 4.10) or,
    with ``split``, the sines in the first half and the cosines in the second (MAE)."""
    np = numpy()
    table = np.zeros((len(pos), d))
    for row, p in enumerate(pos):
        for i in range(d // 2):
            angle = p / base ** (2 * i / d)
            if split:
                table[row, i], table[row, d // 2 + i] = math.sin(angle), math.cos(angle)
            else:
                table[row, 2 * i], table[row, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return table


SINCOS_1D = Layer(
    name="sincos-1d",
    aliases=("sincos",),
    category="Constant",
    doc="The sinusoidal position table of § 4.10 as a T×D constant: sin and cos of "
    "t/base^(2i/D) for position t and feature pair i, alternating (`pos-enc` adds the same "
    "table); `split=true` puts the sines in the first half and the cosines in the second, as "
    "MAE and DiT write it.",
    hparams=(
        HP("t", "size", doc="positions (from the annotation when left out)"),
        HP("d", "size", doc="features, even (from the annotation when left out)"),
        HP("base", "float", 10_000.0, "the base period"),
        HP("split", "bool", False, "sines then cosines, instead of alternating"),
    ),
    arity=(0, 0),
    resolve=_sincos_1d_attrs,
    shape=lambda c: (Expr.lift(c.a.grid[0]), Expr.lift(c.a.d)),
    from_annotation=(("t", 0), ("d", 1)),
    example=("", "sincos-1d  16×64"),
    cases=(("", "sincos-1d split=true base=100  8×6"),),
    reference=lambda xs, p, s, a: sincos_1d_ref(range(a.grid[0]), a.d, a.base, a.split)[None],
)


def _sincos_2d_attrs(c: Ctx) -> TableAttrs:
    grid = tuple(_known_value(c, "grid", v) for v in c.hp["grid"])
    grid = grid * 2 if len(grid) == 1 else grid  # grid=16: a square
    if len(grid) != 2:
        c.fail(f"a 2-D grid has 2 sizes, got {len(grid)}", hparam="grid")
    d = _known(c, "d", 4)
    if d % 4:
        c.fail(f"a 2-D sin-cos table needs features in fours, got d={d}", hparam="d")
    return TableAttrs(grid, d, _base(c), True)


def _known_value(c: Ctx, name: str, value: Any) -> int:
    v = value.as_int() if isinstance(value, Expr) else value
    if not isinstance(v, int) or v < 1:
        c.fail(f"`{name}` must be known whole numbers ≥ 1 here, got {value}", hparam=name)
    return v


def sincos_2d_ref(h: int, w: int, d: int, base: float) -> Any:
    """MAE's and DiT's table: positions row by row; the first half of the features encodes
    the column with `sincos-1d split=true` of D/2 features, the second half the row."""
    np = numpy()
    cols = sincos_1d_ref([j for _ in range(h) for j in range(w)], d // 2, base, True)
    rows = sincos_1d_ref([i for i in range(h) for _ in range(w)], d // 2, base, True)
    return np.concatenate([cols, rows], axis=1)


SINCOS_2D = Layer(
    name="sincos-2d",
    category="Constant",
    doc="The 2-D sin-cos position table of MAE and DiT as a (H·W)×D constant: the positions of "
    "an H×W grid row by row, the first half of the features a `sincos-1d split=true` table of "
    "the column, the second half of the row. D is a multiple of 4.",
    hparams=(
        HP("grid", "shape", doc="the grid's rows and columns, (H, W), or one size for a square"),
        HP("d", "size", doc="features, a multiple of 4 (from the annotation when left out)"),
        HP("base", "float", 10_000.0, "the base period"),
    ),
    arity=(0, 0),
    resolve=_sincos_2d_attrs,
    shape=lambda c: (Expr.lift(prod_int(c.a.grid)), Expr.lift(c.a.d)),
    from_annotation=(("d", 1),),
    example=("", "sincos-2d grid=(16, 16)  256×384"),
    cases=(("", "sincos-2d grid=(2, 3) base=50  6×8"),),
    reference=lambda xs, p, s, a: sincos_2d_ref(a.grid[0], a.grid[1], a.d, a.base)[None],
)


@dataclass(frozen=True)
class BandAttrs(Attrs):
    t: int
    s: int
    below: int
    above: int


def _band_attrs(c: Ctx) -> BandAttrs:
    t = _known(c, "t")
    s = t if c.hp.get("s") is None else _known(c, "s")
    return BandAttrs(t, s, _known(c, "below", 0), _known(c, "above", 0))


def band_ref(a: BandAttrs) -> Any:
    np = numpy()
    i, j = np.arange(a.t)[:, None], np.arange(a.s)[None, :]
    return ((j >= i - a.below) & (j <= i + a.above))[None]


BAND = Layer(
    name="band",
    aliases=("band-mask",),
    category="Constant",
    doc="A T×S Boolean mask that keeps key j for query i when i − below ≤ j ≤ i + above: "
    "`below=W-1` alone is a causal window of W positions (sliding-window attention), "
    "`above=0` with a large `below` the causal mask. For `attention`'s mask.",
    hparams=(
        HP("t", "size", doc="rows, the queries (from the annotation when left out)"),
        HP("s", "size", None, "columns, the keys (default: t)"),
        HP("below", "size", 0, "diagonals kept below the main one (earlier keys)"),
        HP("above", "size", 0, "diagonals kept above the main one (later keys)"),
    ),
    arity=(0, 0),
    resolve=_band_attrs,
    shape=lambda c: (Expr.lift(c.a.t), Expr.lift(c.a.s)),
    from_annotation=(("t", 0), ("s", 1)),
    out_type=lambda c: ("bool", None),
    example=("", "band below=3  16×16"),
    cases=(("", "band below=1 above=2  5×7"),),
    reference=lambda xs, p, s, a: band_ref(a),
)


@dataclass(frozen=True)
class RelIndexAttrs(Attrs):
    """A grid's shape; the index of the relative position of every pair of its positions."""

    grid: tuple[int, ...]
    n: int  # positions
    values: int  # distinct relative positions: ∏(2g − 1)


def _rel_index_attrs(c: Ctx) -> RelIndexAttrs:
    grid = tuple(_known_value(c, "grid", v) for v in c.hp["grid"])
    if not 1 <= len(grid) <= 3:
        c.fail(f"a grid has 1 to 3 axes, got {len(grid)}", hparam="grid")
    return RelIndexAttrs(grid, prod_int(grid), prod_int([2 * g - 1 for g in grid]))


def rel_index_ref(grid: tuple[int, ...]) -> Any:
    """Swin's relative_position_index, for any number of axes: for positions a and b, the
    offsets a − b + (g − 1) along each axis, as one number in mixed radix (2g − 1)."""
    np = numpy()
    coords = list(np.ndindex(*grid))
    out = np.zeros((len(coords), len(coords)), np.int32)
    for i, a in enumerate(coords):
        for j, b in enumerate(coords):
            index = 0
            for ga, gb, g in zip(a, b, grid):
                index = index * (2 * g - 1) + (ga - gb + g - 1)
            out[i, j] = index
    return out[None]


REL_INDEX = Layer(
    name="rel-index",
    aliases=("relative-index",),
    category="Constant",
    doc="For the N positions of a grid (row by row), the N×N whole numbers that index the "
    "relative position of every pair: Swin's relative position index, in [0, ∏(2g − 1)). "
    "`gather` or `embed` turns it into a learned bias (`embed d=heads` is Swin's table).",
    hparams=(HP("grid", "shape", doc="the grid's sizes, e.g. (7, 7) or (16,)"),),
    arity=(0, 0),
    resolve=_rel_index_attrs,
    shape=lambda c: (Expr.lift(c.a.n), Expr.lift(c.a.n)),
    out_type=lambda c: ("int", Expr.lift(c.a.values)),
    example=("", "rel-index grid=(7, 7)  49×49"),
    cases=(
        ("", "rel-index grid=5  5×5"),
        ("", "rel-index grid=(2, 3)  6×6"),
        ("", "rel-index grid=(4,)  4×4"),
    ),
    reference=lambda xs, p, s, a: rel_index_ref(a.grid),
)


@dataclass(frozen=True)
class BucketAttrs(Attrs):
    t: int
    s: int
    n: int  # buckets
    far: int  # the distance from which every position shares the last bucket
    bidirectional: bool


def _bucket_attrs(c: Ctx) -> BucketAttrs:
    t = _known(c, "t")
    s = t if c.hp.get("s") is None else _known(c, "s")
    n, far = _known(c, "n", 2), _known(c, "far", 1)
    half = n // 2 if c.hp["bidirectional"] else n
    if c.hp["bidirectional"] and n % 2:
        c.fail(f"bidirectional buckets split in two halves: n={n} is odd", hparam="n")
    if far <= half // 2:
        c.fail(
            f"far={far} must exceed the {half // 2} exact buckets",
            "T5's is n=32 far=128",
            "far",
        )
    return BucketAttrs(t, s, n, far, c.hp["bidirectional"])


def t5_bucket(rel: int, n: int, far: int, bidirectional: bool) -> int:
    """T5's bucket of one relative position (key − query), from its formula (Raffel et al.
    2020; transformers' ``_relative_position_bucket``): half the buckets per direction when
    bidirectional (later keys in the upper half), else only earlier keys count; distances below
    n/2 have a bucket each, larger ones share buckets spaced logarithmically up to ``far``,
    beyond which all share the last."""
    bucket = 0
    if bidirectional:
        n //= 2
        bucket += n if rel > 0 else 0
        rel = abs(rel)
    else:
        rel = -min(rel, 0)
    exact = n // 2
    if rel < exact:
        return bucket + rel
    large = exact + int(math.log(rel / exact) / math.log(far / exact) * (n - exact))
    return bucket + min(large, n - 1)


def buckets_ref(a: Any) -> Any:
    np = numpy()
    table = [
        [t5_bucket(j - i, a.n, a.far, a.bidirectional) for j in range(a.s)] for i in range(a.t)
    ]
    return np.asarray(table, np.int32)[None]


REL_BUCKETS = Layer(
    name="rel-buckets",
    aliases=("t5-buckets", "relative-buckets"),
    category="Constant",
    doc="T5's relative position buckets as a T×S constant of whole numbers in [0, n): for query "
    "i and key j, the bucket of j − i (Raffel et al. 2020): exact for distances under n/4 "
    "(bidirectional) or n/2, logarithmic up to `far`, the last bucket beyond; later keys take "
    "the upper half when `bidirectional=true` (an encoder), and all later keys bucket 0 "
    "otherwise (a decoder). `embed d=h` turns it into T5's learned bias, T×S×h. A name for "
    "the `table` whose formula specs/t5-small.lbdl writes (the two agree on every pair).",
    hparams=(
        HP("t", "size", doc="rows, the queries (from the annotation when left out)"),
        HP("s", "size", None, "columns, the keys (default: t)"),
        HP("n", "size", 32, "buckets"),
        HP("far", "size", 128, "the distance from which all positions share the last bucket"),
        HP("bidirectional", "bool", True, "keys on both sides (encoder); false: earlier keys only"),
    ),
    arity=(0, 0),
    resolve=_bucket_attrs,
    shape=lambda c: (Expr.lift(c.a.t), Expr.lift(c.a.s)),
    from_annotation=(("t", 0), ("s", 1)),
    out_type=lambda c: ("int", Expr.lift(c.a.n)),
    example=("", "rel-buckets  64×64"),
    cases=(
        ("", "rel-buckets n=8 far=20 bidirectional=false  30×30"),
        ("", "rel-buckets n=16 far=40  9×50"),
    ),
    reference=lambda xs, p, s, a: buckets_ref(a),
)


@dataclass(frozen=True)
class AlibiAttrs(Attrs):
    h: int
    t: int
    s: int


def _alibi_attrs(c: Ctx) -> AlibiAttrs:
    t = _known(c, "t")
    return AlibiAttrs(_known(c, "h"), t, t if c.hp.get("s") is None else _known(c, "s"))


def alibi_slopes(h: int) -> list[float]:
    """Press et al. 2022: for h a power of two, the geometric sequence 2^(−8/h), 2^(−16/h), …;
    otherwise those of the power of two below, then every other slope of the one above."""
    if math.log2(h).is_integer():
        start = 2 ** (-8 / h)
        return [start ** (i + 1) for i in range(h)]
    below = 2 ** math.floor(math.log2(h))
    return alibi_slopes(below) + alibi_slopes(2 * below)[0::2][: h - below]


def alibi_ref(a: Any) -> Any:
    np = numpy()
    out = np.zeros((a.h, a.t, a.s))
    for head, m in enumerate(alibi_slopes(a.h)):
        for i in range(a.t):
            for j in range(a.s):
                out[head, i, j] = -m * abs(i - j)
    return out[None]


ALIBI = Layer(
    name="alibi",
    category="Constant",
    doc="ALiBi's score bias (Press et al. 2022) as an h×T×S constant: −m_h·|i − j| for query i "
    "and key j, with head h's slope m_h from the paper's geometric sequence (2^(−8/h), … for h "
    "a power of two). For `attention`'s or `self-att`'s score bias: `self-att(B) causal=true`.",
    hparams=(
        HP("h", "size", doc="heads"),
        HP("t", "size", doc="rows, the queries (from the annotation when left out)"),
        HP("s", "size", None, "columns, the keys (default: t)"),
    ),
    arity=(0, 0),
    resolve=_alibi_attrs,
    shape=lambda c: (Expr.lift(c.a.h), Expr.lift(c.a.t), Expr.lift(c.a.s)),
    from_annotation=(("h", 0), ("t", 1), ("s", 2)),
    example=("", "alibi h=8  8×16×16"),
    cases=(("", "alibi h=6  6×5×7"),),
    reference=lambda xs, p, s, a: alibi_ref(a),
)


@dataclass(frozen=True)
class FormulaAttrs(Attrs):
    """A table's formula, its extents, the sizes it names as numbers, and, for whole numbers,
    their range [0, n)."""

    f: Formula
    size: tuple[int, ...]
    values: tuple[tuple[str, int | float], ...]
    n: int | None


def _formula_attrs(c: Ctx) -> FormulaAttrs:
    size = tuple(_known_value(c, "size", v) for v in c.hp["size"])
    if not 1 <= len(size) <= len(INDEX_NAMES):
        c.fail(f"a table has 1 to {len(INDEX_NAMES)} axes, got {len(size)}", hparam="size")
    f: Formula = c.hp["f"]
    beyond = sorted(f.indices() - set(INDEX_NAMES[: len(size)]))
    if beyond:
        names = ", ".join(f"`{n}`" for n in INDEX_NAMES[: len(size)])
        c.fail(
            f"the formula reads `{beyond[0]}`, but a table of {len(size)} "
            f"{'axis' if len(size) == 1 else 'axes'} has only {names}",
            "the index variables are i, j, k, l, one per axis of the shape, in order",
            "f",
        )
    try:
        values = tuple(numbers(f).items())
    except ValueError as exc:
        c.fail(f"a table's sizes must be known: {exc}", hparam="f")
    n = None if c.hp.get("int") is None else _known(c, "int")
    return FormulaAttrs(f, size, values, n)


def table_ref(a: FormulaAttrs) -> Any:
    """The table as `core.formula` evaluates its tree: float64, or int32 in [0, n)."""
    value = evaluate(a.f, tuple(a.size))
    return value.astype(numpy().float64) if a.n is None else whole_in_range(value, a.n)


TABLE = Layer(
    name="table",
    aliases=("const-table",),
    category="Constant",
    doc="A constant computed from positions: the formula `f` (a string) gives the value at "
    "index i (and j, k, l: one per axis of the shape at the right or of `size=`). It may use "
    "numbers, the sizes known at the box, + − * / ^, the comparisons < <= == >= > (1 where "
    "true, 0 elsewhere) and exp, log, sqrt, abs, sign, floor, ceil, min, max, clamp(x, lo, hi) "
    "and where(c, a, b). `int=n`: whole numbers in [0, n) (an index for `embed`), else floats. "
    "Computed once, when the model is traced; no parameters, no multiply-accumulates.",
    hparams=(
        HP("f", "formula", doc='the formula over i, j, k, l, e.g. "abs(j - i)"'),
        HP("size", "shape", doc="the extent of each axis (from the annotation when left out)"),
        HP("int", "size", None, "whole numbers in [0, int) instead of floats (default: floats)"),
    ),
    arity=(0, 0),
    resolve=_formula_attrs,
    shape=lambda c: tuple(Expr.lift(n) for n in c.a.size),
    from_annotation=(("size", None),),
    out_type=lambda c: ("int", Expr.lift(c.a.n)) if c.a.n is not None else ("float", None),
    example=("", 'table f="abs(j - i)"  16×16'),
    cases=(
        ("", 'table f="where(j > i, 1.0, exp(-(i - j) / 4))"  5×7'),
        ("", 'table f="min(i, 3) + 4 * floor(log(j + 1))" int=12  6×9'),
        ("", 'table f="clamp(i - 2, 0, 3) * sign(j - 1) + sqrt(k) ^ 2"  4×3×2'),
        ("", 'table f="max(ceil(i / 3), j, 1) * (i == j) + (i <= j) + (i >= j) - (k < 1)"  5×4×2'),
    ),
    reference=lambda xs, p, s, a: table_ref(a)[None],
)

LAYERS = (TABLE, SINCOS_1D, SINCOS_2D, BAND, REL_INDEX, REL_BUCKETS, ALIBI)

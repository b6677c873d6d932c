"""Lowerings of the constant boxes: a call that computes the tensor once, when traced."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering
from lbdl_dsl.core.formula import INDEX_NAMES, to_numpy

_COMPUTE = "COMPUTE"  # the generated module's compute type (float32, or --dtype's)


def sincos_1d(e: Emit) -> str:
    a = e.a
    (t,) = a.grid
    return e.call("sincos_table", t, a.d, base=a.base, split=a.split, dtype=_COMPUTE)


def band(e: Emit) -> str:
    a = e.a
    return e.call("band_mask", a.t, a.s, below=a.below, above=a.above)


def table(e: Emit) -> str:
    """The formula as a NumPy lambda over the index grids, made from the checked tree (never
    the text as written), evaluated once when the model is traced."""
    a = e.a
    axes = INDEX_NAMES[: len(a.size)]
    f = f"lambda {', '.join(axes)}: {to_numpy(a.f.root, dict(a.values))}"
    if a.n is None:
        return e.call("formula_table", f, tuple(a.size), dtype=_COMPUTE)
    return e.call("formula_table", f, tuple(a.size), n=a.n)


LOWER: dict[str, Lowering] = {
    "table": table,
    "sincos-1d": sincos_1d,
    "sincos-2d": lambda e: e.call(
        "sincos_2d_table", *e.a.grid, e.a.d, base=e.a.base, dtype=_COMPUTE
    ),
    "band": band,
    "rel-index": lambda e: e.call("relative_index", e.a.grid),
    "rel-buckets": lambda e: e.call(
        "relative_buckets", e.a.t, e.a.s, e.a.n, e.a.far, bidirectional=e.a.bidirectional
    ),
    "alibi": lambda e: e.call("alibi_bias", e.a.h, e.a.t, e.a.s, dtype=_COMPUTE),
}

"""Lowerings of the vision boxes (`core/layers/vision.py`), channels-last in the code."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering

_WEIGHTS = ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "table")


def window_att(e: Emit) -> str:
    a = e.a
    weights = "{" + ", ".join(f'"{n}": {e.param(n)}' for n in _WEIGHTS if e.has_param(n)) + "}"
    padded = {"pad": a.pad} if any(a.pad) else {}  # a map the window does not divide
    return e.call(
        "window_attention",
        e.x[0],
        weights,
        heads=a.heads,
        window=a.window,
        shift=a.shift,
        **padded,
    )


def roll(e: Emit) -> str:
    a = e.a
    axes = a.axes if a.layout == "cl" else tuple(i + 1 for i in a.axes)
    return f"jnp.roll({e.x[0]}, {a.shifts!r}, axis={axes!r})"


LOWER: dict[str, Lowering] = {
    "window-att": window_att,
    "space-to-depth": lambda e: e.call("space_to_depth", e.x[0], e.a.f, swin=e.a.swin),
    "roll": roll,
    "adaptive-avgpool": lambda e: e.call("adaptive_avg_pool", e.x[0], e.a.out),
}

"""Lowerings of the generic primitives (`core/layers/generic.py`)."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def layer_scale(e: Emit) -> str:
    axis = {} if e.a.last else {"axis": e.a.axis + 1}
    return e.call("scale_along", e.x[0], e.param("gamma"), **axis)


def timestep_embed(e: Emit) -> str:
    a = e.a
    return e.call(
        "timestep_embedding",
        e.x[0],
        a.d,
        period=a.period,
        sin_first=a.sin_first,
        dtype="COMPUTE",  # the generated module's compute type (float32, or --dtype's)
    )


LOWER: dict[str, Lowering] = {
    "times": lambda e: f"{e.x[0]} * {e.a.factor!r}",
    "neg": lambda e: f"-{e.x[0]}",
    "sin": lambda e: f"jnp.sin({e.x[0]})",
    "cos": lambda e: f"jnp.cos({e.x[0]})",
    "drop-path": lambda e: e.call("drop_path", e.x[0], e.a.p, train=e.train, key=e.key()),
    "layer-scale": layer_scale,
    "gather": lambda e: e.call("gather", e.x[0], e.x[1], axis=e.a.axis),
    "timestep-embed": timestep_embed,
    "token-drop": lambda e: e.call(
        "token_drop", e.x[0], e.a.p, e.a.null, train=e.train, key=e.key()
    ),
}

"""Lowerings of activations and dropout: one runtime function or one `jnp` expression each."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def unary(fn: str) -> Lowering:
    return lambda e: e.call(fn, e.x[0])


def dropout(fn: str) -> Lowering:
    def lower(e: Emit) -> str:
        return e.call(fn, e.x[0], e.a.p, train=e.train, key=e.key())

    return lower


def gelu(e: Emit) -> str:
    return e.call("gelu", e.x[0], approximate=True) if e.a.approximate else e.call("gelu", e.x[0])


LOWER: dict[str, Lowering] = {
    "relu": unary("relu"),
    "tanh": unary("tanh"),
    "sigmoid": unary("sigmoid"),
    "silu": unary("silu"),
    "leaky-relu": lambda e: e.call("leaky_relu", e.x[0], e.a.a),
    "gelu": gelu,
    "softcap": lambda e: f"{e.a.c!r} * jnp.tanh({e.x[0]} / {e.a.c!r})",
    "identity": lambda e: e.x[0],
    "relu6": lambda e: f"jnp.clip({e.x[0]}, 0.0, 6.0)",
    "softargmax": lambda e: e.call("softmax", e.x[0], axis=e.a.axis + 1),
    "dropout": dropout("dropout"),
    "dropout-2d": dropout("dropout_channels"),
}

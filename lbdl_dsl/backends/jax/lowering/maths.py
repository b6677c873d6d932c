"""Lowerings of the elementwise maths (`core/layers/maths.py`): one `jnp` expression each."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def softplus(e: Emit) -> str:
    b = e.a.beta
    return (
        f"jax.nn.softplus({e.x[0]})" if b == 1.0 else f"jax.nn.softplus({b!r} * {e.x[0]}) / {b!r}"
    )


def clamp(e: Emit) -> str:
    return f"jnp.clip({e.x[0]}, {e.a.lo!r}, {e.a.hi!r})"


LOWER: dict[str, Lowering] = {
    "exp": lambda e: f"jnp.exp({e.x[0]})",
    "log": lambda e: f"jnp.log({e.x[0]})",
    "abs": lambda e: f"jnp.abs({e.x[0]})",
    "softplus": softplus,
    "sqrt": lambda e: f"jnp.sqrt({e.x[0]})",
    "rsqrt": lambda e: f"jax.lax.rsqrt({e.x[0]})",
    "clamp": clamp,
    "pow": lambda e: f"{e.x[0]} ** {e.a.p!r}",
}

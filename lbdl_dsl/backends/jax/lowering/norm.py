"""Lowerings of the normalisation entries."""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def batchnorm(e: Emit) -> str:
    a = e.a
    call = e.call(
        "batch_norm",
        e.x[0],
        e.param("scale"),
        e.param("bias"),
        e.state("mean"),
        e.state("var"),
        train=e.train,
        momentum=a.momentum,
        eps=a.eps,
    )
    y, mean, var = e.unpack(call, e.target, "mean", "var")
    e.set_state("mean", mean)
    e.set_state("var", var)
    return y


def layernorm(e: Emit) -> str:
    extra = {} if e.a.n_axes == 1 else {"axes": e.a.n_axes}
    return e.call("layer_norm", e.x[0], e.param("scale"), e.param("bias"), eps=e.a.eps, **extra)


LOWER: dict[str, Lowering] = {
    "batchnorm": batchnorm,
    "layernorm": layernorm,
    "groupnorm": lambda e: e.call(
        "group_norm", e.x[0], e.param("scale"), e.param("bias"), groups=e.a.g, eps=e.a.eps
    ),
    "rmsnorm": lambda e: e.call("rms_norm", e.x[0], e.param("scale"), eps=e.a.eps),
}

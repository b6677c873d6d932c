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


def _optional(e: Emit, name: str) -> str:
    return e.param(name) if e.has_param(name) else "None"


def _gain(e: Emit) -> str:
    """The scale, shifted by the norm's offset (Gemma's 1 + w) when it has one."""
    scale = _optional(e, "scale")
    return f"({scale} + {e.a.offset!r})" if e.a.offset and scale != "None" else scale


def layernorm(e: Emit) -> str:
    """The runtime's ``layer_norm`` on the last axes, which is where a chosen axis 0 of a map
    lies once the code keeps it channels-last; ``layer_norm_at`` for any other chosen axis."""
    a = e.a
    scale, bias = _gain(e), _optional(e, "bias")
    if not a.last:
        return e.call("layer_norm_at", e.x[0], scale, bias, axis=a.axis + 1, eps=a.eps)
    extra = {} if a.n_axes == 1 else {"axes": a.n_axes}
    return e.call("layer_norm", e.x[0], scale, bias, eps=a.eps, **extra)


def rmsnorm(e: Emit) -> str:
    a, scale = e.a, _gain(e)
    if a.last:
        return e.call("rms_norm", e.x[0], scale, eps=a.eps)
    return e.call("rms_norm_at", e.x[0], scale, axis=a.axis + 1, eps=a.eps)


LOWER: dict[str, Lowering] = {
    "batchnorm": batchnorm,
    "layernorm": layernorm,
    "groupnorm": lambda e: e.call(
        "group_norm", e.x[0], e.param("scale"), e.param("bias"), groups=e.a.g, eps=e.a.eps
    ),
    "rmsnorm": rmsnorm,
}

"""Lowerings of convolutions, pools, upsampling and patches (channels-last in the code)."""

from __future__ import annotations

from typing import Any

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def _ones(values: tuple[int, ...]) -> bool:
    return all(v == 1 for v in values)


def _bias(e: Emit) -> list[str]:
    return [e.param("b")] if e.has_param("b") else []


def conv(e: Emit) -> str:
    """``conv(x, w, b, stride=..., padding=...)``, each keyword only where it does something."""
    a = e.a
    extra: dict[str, Any] = {}
    if not _ones(a.stride):
        extra["stride"] = a.stride
    if any(p != (0, 0) for p in a.pads):
        extra["padding"] = a.pads
    if not _ones(a.dilation):
        extra["dilation"] = a.dilation
    extra["groups"] = a.groups
    return e.call("conv", e.x[0], e.param("w"), *_bias(e), **extra)


def tconv(e: Emit) -> str:
    a = e.a
    extra: dict[str, Any] = {}
    if any(a.out_padding):
        extra["output_padding"] = a.out_padding
    if not _ones(a.dilation):
        extra["dilation"] = a.dilation
    extra["groups"] = a.groups
    return e.call(
        "conv_transpose",
        e.x[0],
        e.param("w"),
        *_bias(e),
        stride=a.stride,
        padding=a.padding,
        **extra,
    )


def pool(fn: str) -> Lowering:
    def lower(e: Emit) -> str:
        a = e.a
        extra = {} if _ones(a.dilation) else {"dilation": a.dilation}
        return e.call(fn, e.x[0], window=a.kernel, stride=a.stride, padding=a.pads, **extra)

    return lower


LOWER: dict[str, Lowering] = {
    "conv-1d": conv,
    "conv-2d": conv,
    "tconv-1d": tconv,
    "tconv-2d": tconv,
    "maxpool": pool("max_pool"),
    "maxpool-1d": pool("max_pool"),
    "avgpool": pool("avg_pool"),
    "avgpool-1d": pool("avg_pool"),
    "global-avgpool": lambda e: e.call("global_avg_pool", e.x[0]),
    "upsample": lambda e: e.call(f"upsample_{e.a.mode}", e.x[0], e.a.f),
    "patches": lambda e: e.call("patches", e.x[0], e.a.P),
}

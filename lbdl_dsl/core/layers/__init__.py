"""The layer registry: every layer the language knows, each declared once (see `base`)."""

from __future__ import annotations

from lbdl_dsl.core.layers import (
    activation,
    attention,
    constants,
    conv,
    dense,
    generic,
    maths,
    moe,
    norm,
    ssm,
    tensor,
    vision,
)
from lbdl_dsl.core.layers.base import HP, REQUIRED, Attrs, Ctx, Layer, PSpec, ShapeFailure

_FAMILIES = (
    dense,
    conv,
    norm,
    activation,
    attention,
    tensor,
    ssm,
    generic,
    maths,
    constants,
    vision,
    moe,
)

LAYERS: dict[str, Layer] = {}
ALIASES: dict[str, str] = {}
for _family in _FAMILIES:
    for _layer in _family.LAYERS:
        assert _layer.name not in LAYERS, _layer.name
        LAYERS[_layer.name] = _layer
        for _alias in _layer.aliases:
            assert _alias not in ALIASES and _alias not in LAYERS, _alias
            ALIASES[_alias] = _layer.name


def lookup(name: str) -> Layer | None:
    """The entry for a name as the book or a framework writes it, or None."""
    canonical = ALIASES.get(name, name)
    return LAYERS.get(canonical)


def all_names() -> list[str]:
    return sorted(LAYERS) + sorted(ALIASES)


__all__ = [
    "HP",
    "LAYERS",
    "REQUIRED",
    "Attrs",
    "Ctx",
    "Layer",
    "PSpec",
    "ShapeFailure",
    "lookup",
]

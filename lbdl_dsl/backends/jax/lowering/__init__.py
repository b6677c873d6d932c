"""The JAX lowering of every registry entry: one table, assembled from one module per family.

`LOWERINGS[name]` lowers the entry called ``name``. A test checks that the table and the
registry have the same names, so an entry cannot be added without its lowering (or a lowering
kept for an entry that is gone).
"""

from __future__ import annotations

from lbdl_dsl.backends.jax.emit import Layout, Lowering
from lbdl_dsl.backends.jax.lowering import (
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

LOWERINGS: dict[str, Lowering] = {}
_TABLES = (
    dense,
    conv,
    norm,
    activation,
    attention,
    tensor,
    generic,
    maths,
    constants,
    vision,
    moe,
    ssm,
)
for _family in _TABLES:
    for _name, _lower in _family.LOWER.items():
        assert _name not in LOWERINGS, _name
        LOWERINGS[_name] = _lower

DECODE_LOWERINGS: dict[str, Lowering] = {
    name: lower for family in (dense, attention, moe) for name, lower in family.DECODE.items()
}
"""A decoding module's lowering where it differs (`Step`: positions, caches, routing)."""

DECODE_LAYOUTS: dict[str, Layout] = {
    name: layout for family in (dense, attention) for name, layout in family.LAYOUTS.items()
}
"""How a decoding module's runtime function reads a box's weights (`decode_weights`)."""

__all__ = ["DECODE_LAYOUTS", "DECODE_LOWERINGS", "LOWERINGS"]

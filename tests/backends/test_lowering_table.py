"""The JAX backend's lowering table covers the registry exactly, and lowerings read records.

A lowering lives with its backend, one row per registry entry (STYLE.md: one layer, one entry;
docs/architecture.md: a layer's whole story). Adding an entry without its lowering, or keeping a
lowering whose entry is gone, fails here rather than when a user's spec first uses the box.
"""

from __future__ import annotations

from lbdl_dsl.backends.jax.lowering import LOWERINGS
from lbdl_dsl.core.layers import LAYERS


def test_the_lowering_table_covers_the_primitives_exactly() -> None:
    """Composites (`self-att`, `ffw`...) are lowered through their inside: primitives only."""
    primitives = sorted(name for name, layer in LAYERS.items() if not layer.composite)
    assert sorted(LOWERINGS) == primitives
    assert all(callable(lower) for lower in LOWERINGS.values())

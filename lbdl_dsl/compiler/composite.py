"""Composite boxes: the inside a registry entry declares in the language, built once per text.

`self-att`, `cross-att` and `ffw` are single boxes in a spec and in the book's figures, but each
entry writes its inside as a block of primitive boxes (`Layer.inside`, a function of the box's
resolved hyper-parameters and input ranks that returns the block's text). The checker checks
that block as it checks a block call, so the composite's parameters, MACs and shapes are those
of its primitives; the JAX backend lowers it through its inside, and the diagram can open it.
The texts are ours, not the user's; they are parsed by the same parser, under a file name that
is the entry's name (``self-att:3``), and kept here so that messages and comments can quote
them.
"""

from __future__ import annotations

import functools
from typing import Any

from lbdl_dsl.compiler.build import build_blocks
from lbdl_dsl.compiler.graph import Block
from lbdl_dsl.compiler.parser import parse
from lbdl_dsl.core.layers import Layer

SOURCES: dict[str, str] = {}
"""Each composite's last built text, by its file name (the entry's name): for comments."""


@functools.lru_cache(maxsize=512)
def _built(name: str, text: str) -> Block:
    (block,) = build_blocks([parse(text, name)]).values()
    return block


def built_text(name: str, text: str) -> Block:
    """The one block of ``text`` (ours, not the user's), built once; ``name`` is its file."""
    SOURCES[name] = text
    return _built(name, text)


def inside(layer: Layer, hp: dict[str, Any], ranks: tuple[int, ...]) -> Block:
    """The block that is ``layer``'s inside for these hyper-parameters and input ranks."""
    assert layer.inside is not None
    text = layer.inside(hp, ranks)
    SOURCES[layer.name] = text
    return _built(layer.name, text)

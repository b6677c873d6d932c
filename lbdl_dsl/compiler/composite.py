"""Composite boxes: the inside a registry entry declares in the language, built once per text.

`self-att`, `cross-att` and `ffw` are single boxes in a spec and in the book's figures, but each
entry writes its inside as a block of primitive boxes (`Layer.inside`, a function of the box's
resolved hyper-parameters and input ranks that returns the block's text). The checker checks
that block as it checks a block call, so the composite's parameters, MACs and shapes are those
of its primitives; the JAX backend lowers it through its inside, and the diagram can open it.
The texts are ours, not the user's; they are parsed by the same parser, under a file name that
is the entry's name and the text's digest (``self-att@1f2e3d4c``: two boxes of one layer with
other hyper-parameters have other insides), and kept here so that messages and comments can quote
them (`shown_name` gives back the entry's name).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from lbdl_dsl.compiler.build import build_blocks
from lbdl_dsl.compiler.graph import Block
from lbdl_dsl.compiler.parser import parse
from lbdl_dsl.core.layers import Layer

SOURCES: dict[str, str] = {}
"""Each composite inside's text, by its file name (`file_name`): for messages and comments."""


def file_name(name: str, text: str) -> str:
    """The file name a composite's inside is parsed under: its entry's name and the text's
    digest, so that each distinct inside is its own file whatever was built before it."""
    return f"{name}@{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def shown_name(file: str) -> str:
    """The name a message or comment shows for ``file``: a composite's entry name alone."""
    return file.partition("@")[0] if file in SOURCES else file


@functools.lru_cache(maxsize=512)
def _built(name: str, text: str) -> Block:
    (block,) = build_blocks([parse(text, name)]).values()
    return block


def built_text(name: str, text: str) -> Block:
    """The one block of ``text`` (ours, not the user's), built once; ``name`` names its file."""
    file = file_name(name, text)
    SOURCES[file] = text
    return _built(file, text)


def inside(layer: Layer, hp: dict[str, Any], ranks: tuple[int, ...]) -> Block:
    """The block that is ``layer``'s inside for these hyper-parameters and input ranks."""
    assert layer.inside is not None
    return built_text(layer.name, layer.inside(hp, ranks))

"""What a lowering may ask of the code generator: the `Emit` protocol.

A lowering (one per registry entry, in `lowering/`) turns one box into a Python expression of
the generated module. It sees its inputs as expressions in the layout its entry asked for, the
entry's resolved `Attrs` with every size already a number (or, for a size only known when the
model runs, such as a sequence's T, the code that computes it), and these helpers. It never
sees the spec's text and never computes with sizes: what it needs is in the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Emit(Protocol):
    x: list[str]  # the inputs, in the layout the entry asked for
    a: Any  # the entry's `Attrs`, with sizes as ints or code
    target: str  # the variable the box's value will be assigned to

    def param(self, name: str) -> str: ...
    def has_param(self, name: str) -> bool: ...
    def params(self) -> str | None: ...
    def state(self, name: str) -> str: ...
    def set_state(self, name: str, expr: str) -> None: ...
    def call(self, fn: str, *args: Any, **kwargs: Any) -> str: ...
    def bind(self, expr: str, hint: str = "t") -> str: ...
    def unpack(self, expr: str, *hints: str) -> list[str]: ...
    def key(self) -> str: ...
    def decoding(self, name: str) -> str: ...

    @property
    def train(self) -> str: ...


Lowering = Callable[[Emit], str]
"""One entry's lowering: the expression of the box's value (lines may be bound before it)."""


ROWS = "_rows"
"""The suffix of a weight stored (Dout, Din)."""


@dataclass(frozen=True)
class Fused:
    """Weights multiplied with the same input, put side by side as ``into`` + `ROWS` (their
    biases as ``b`` + the part of ``into`` after its first letter, a zero for one left out)."""

    weights: tuple[str, ...]
    biases: tuple[str, ...]
    into: str


@dataclass(frozen=True)
class Layout:
    """How a box's runtime function in a decoding module reads its weights, which
    `Decoder.split` lays out so (`decode_weights`)."""

    rows: tuple[str, ...] = ()
    fused: Fused | None = None

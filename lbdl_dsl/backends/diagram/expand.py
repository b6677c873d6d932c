"""Which boxes to draw open: ``--expand all``, ``--expand resblock``, ``--expand tlayer,declayer``
or ``--expand 2``.

By default a block call is one tall box, as the book draws ``resblock`` in ResNet-50; opening
every call of a deep model would bury the figure. A composite box of the registry (``self-att``,
``cross-att``, ``ffw``) opens the same way, into the inside its entry declares (Fig. 5.6), and
a mixture box (``moe``) into its router, its experts side by side and their gated sum. Names
open every call of those blocks (or every box of those composites); a depth counts open boxes
from the model's own body: ``1`` opens the calls written in the model, ``2`` also the boxes
inside those.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.errors import LbdlError, did_you_mean
from lbdl_dsl.core.layers import LAYERS, lookup


@dataclass(frozen=True)
class Expansion:
    """A decision per box that can open: open it or draw it as one box."""

    everything: bool = False
    depth: int = 0
    names: frozenset[str] = frozenset()
    asked: frozenset[str] = frozenset()  # the names as given, without the blocks holding them

    def wants(self, name: str, depth: int) -> bool:
        """Whether a call of block ``name`` (or a composite ``name``), nested in ``depth`` open
        boxes, is drawn open."""
        if self.everything:
            return True
        if self.names:
            return name in self.names
        return depth < self.depth


def composites() -> list[str]:
    """The registry's boxes that have an inside to show (a mixture box: its experts)."""
    return sorted(
        name for name, layer in LAYERS.items() if layer.composite or layer.expert is not None
    )


def _canonical(name: str, blocks: Collection[str]) -> str:
    """A block's name, or a composite's canonical name (``self-attention`` → ``self-att``)."""
    if name in blocks:
        return name
    layer = lookup(name)
    if layer is not None and layer.name in composites():
        return layer.name
    known = sorted(blocks)
    openable = known + composites()
    raise LbdlError(
        f"no block named `{name}` to expand",
        hint=did_you_mean(name, openable)
        or (f"the blocks are {', '.join(known)}" if known else "this spec defines no blocks")
        + "; or use `all` or a depth",
    )


def parse(expand: str | None, blocks: Collection[str]) -> Expansion:
    """Read the CLI's ``--expand`` value; an unknown block name is the user's error."""
    if expand is None or expand == "":
        return Expansion()
    text = expand.strip()
    if text == "all":
        return Expansion(everything=True)
    if text.lstrip("-").isdigit():
        return Expansion(depth=max(int(text), 0))
    names = frozenset(_canonical(n.strip(), blocks) for n in text.split(",") if n.strip())
    asked = names
    if isinstance(blocks, Mapping):
        names |= holders(names, blocks)
    return Expansion(names=names, asked=asked)


def holders(names: frozenset[str], blocks: Mapping[str, Any]) -> frozenset[str]:
    """The blocks whose calls must open for a box named in ``names`` to show: ``--expand ffw``
    on a Transformer whose ffw boxes sit inside ``tlayer`` calls opens those calls too (drawn
    shut, they would hide the very box asked for)."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, block in blocks.items():
            if name not in found and _calls(block.body, names | found):
                found.add(name)
                grew = True
    return frozenset(found - names)


def _calls(graph: Any, names: Collection[str]) -> bool:
    """Whether ``graph`` (or a group inside it) has a box or a block call among ``names``."""
    for node in graph.nodes():
        if node.kind in ("layer", "call") and _canonical_op(node.op) in names:
            return True
        inner = [getattr(node, "body", None), getattr(node, "shortcut", None)]
        if any(g is not None and _calls(g, names) for g in inner):
            return True
    return False


def _canonical_op(op: str) -> str:
    layer = lookup(op)
    return layer.name if layer is not None else op

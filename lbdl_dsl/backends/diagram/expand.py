"""Which block calls to draw open: ``--expand all``, ``--expand resblock`` or ``--expand 2``.

By default a block call is one tall box, as the book draws ``resblock`` in ResNet-50; opening
every call of a deep model would bury the figure. A depth counts block calls from the model's
own body: ``1`` opens the calls written in the model, ``2`` also the calls inside those.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from lbdl_dsl.core.errors import LbdlError, did_you_mean


@dataclass(frozen=True)
class Expansion:
    """A decision per call: open it or draw it as one box."""

    everything: bool = False
    depth: int = 0
    block: str | None = None

    def wants(self, block: str, depth: int) -> bool:
        """Whether a call of ``block``, nested in ``depth`` open calls, is drawn open."""
        if self.everything:
            return True
        if self.block is not None:
            return block == self.block
        return depth < self.depth


def parse(expand: str | None, blocks: Collection[str]) -> Expansion:
    """Read the CLI's ``--expand`` value; an unknown block name is the user's error."""
    if expand is None or expand == "":
        return Expansion()
    text = expand.strip()
    if text == "all":
        return Expansion(everything=True)
    if text.lstrip("-").isdigit():
        return Expansion(depth=max(int(text), 0))
    if text not in blocks:
        known = sorted(blocks)
        raise LbdlError(
            f"no block named `{text}` to expand",
            hint=did_you_mean(text, known)
            or (f"the blocks are {', '.join(known)}" if known else "this spec defines no blocks")
            + "; or use `all` or a depth",
        )
    return Expansion(block=text)

"""What a process of several can save when another process of the run is gone.

A collective whose peer died never completes: the step in flight fails (gloo reports the closed
connection at once on CPUs), and every later collective, barrier or save through the checkpoint
layer's multi-process path waits for the dead process. So a survivor saves alone, without a
single collective, and only what it holds whole: the state of its last step, when that step
completed and this process holds every array entire (replicated, as under ``dp``, or its
pieces all local). Under FSDP or tensor parallelism each process holds a part of the state, the
dead one's part is gone with it, and no survivor can write a complete checkpoint; nor can one
whose last step failed, since the state that entered it was handed to it (donated, so that the
state is not held twice). The newest complete checkpoint, written by all processes together,
is then the place to resume from, and the survivor's message names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

PARTIAL = "each process holds only its part of the state"  # the reason that outranks the others


@dataclass(frozen=True)
class Held:
    """The state as this process holds it: whole on the host, or None and why not."""

    state: Any | None
    why_not: str = ""


def held_whole(ts: Any) -> Held:
    """``ts`` as host arrays when its computation completed and every array is whole here."""
    leaves, tree = jax.tree.flatten(ts)
    arrays = [a for a in leaves if isinstance(a, jax.Array)]
    if any(a.is_deleted() for a in arrays):
        return Held(None, "the state that entered the failed step was handed to it (donated)")
    try:
        for array in arrays:
            array.block_until_ready()
    except Exception:  # noqa: BLE001 - a step that failed holds no state
        return Held(None, "its last step did not complete")
    out = []
    for leaf in leaves:
        whole = _whole(leaf) if isinstance(leaf, jax.Array) else np.asarray(leaf)
        if whole is None:
            return Held(None, PARTIAL)
        out.append(whole)
    return Held(jax.tree.unflatten(tree, out))


def _whole(array: jax.Array) -> np.ndarray | None:
    """The whole of ``array`` from this process's pieces, or None if some piece is elsewhere."""
    if array.is_fully_addressable:
        return np.asarray(array)
    out = np.empty(array.shape, array.dtype)
    covered = np.zeros(array.shape, bool)
    for shard in array.addressable_shards:
        out[shard.index] = np.asarray(shard.data)
        covered[shard.index] = True
    return out if covered.all() else None

"""Python's cycle collector, set for building big trees of small objects.

A check makes millions of small objects (instances, tensors, sizes, rows of the summary) and
frees few of them until it ends. With Python's default thresholds the collector looks through
the young objects every 700 allocations and, as they survive, through the older ones again and
again: on a 190,000-box model it took half the time of the check and of the summary, and found
almost nothing to free (the compiler's trees hold no cycles). `fewer_collections` raises the
thresholds while a stage runs and gives the caller's back after it: young cycles are still
collected, about a hundred times less often, and the oldest generation waits for the stage's
end. Thresholds are the interpreter's, so two threads checking at once share the setting;
either way the results are the same.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

YOUNG = 100_000
"""Allocations between two collections of the young generation while a stage runs (700 by
default): a collection then costs less than a tenth of the work done between two of them."""

OLD = 1_000
"""Collections of the middle generation before one of the oldest (10 by default): the oldest
holds everything made so far (a model's tree, its parsed text) and is the costliest to look
through, which a stage then does not do (10⁹ allocations apart)."""


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect less often inside (a ``with`` block, or a decorated function); nested uses and
    a caller that turned collection off (threshold 0) or up already are left as they are."""
    before = gc.get_threshold()
    if before[0] == 0 or before[0] >= YOUNG:
        yield
        return
    gc.set_threshold(YOUNG, before[1], max(before[2], OLD))
    try:
        yield
    finally:
        gc.set_threshold(*before)

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

MIDDLE = 1_000
"""Young collections before one of the middle generation (10 by default): every object that
survives a young collection waits there, and a collection of it looked through a million of
them at a time, 80 ms each, 0.4 s of a 190,000-box check that found nothing to free. The young
collections still run; what survives them is looked at again when the stage ends."""

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
    gc.set_threshold(YOUNG, max(before[1], MIDDLE), max(before[2], OLD))
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """No cycle collection inside: for a whole compiler command (`lbdl-compile`, `lbdl check`,
    `lbdl build`), whose trees hold no cycles (``tests/test_no_cycles.py``). Even the young
    collections `fewer_collections` keeps looked through every object once: 58 collections,
    0.3 s of a 190,000-box check, which freed 95 objects of the libraries' own, freed at exit
    anyway. A caller that turned the collector off keeps it off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

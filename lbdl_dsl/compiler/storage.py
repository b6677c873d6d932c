"""How a ×N group keeps its copies' arrays: stacked along a leading axis, or one set per copy.

A stacked group is compiled once whatever N (``jax.lax.scan`` over the stack): GPT-3's 96
blocks cost what one does. But on XLA:CPU the loop is not free: every weight is sliced out of
its stack in the forward pass and again in the backward pass, and the stacked gradients are
written back slice by slice, each a kernel of its own. For a short group those kernels cost more
to compile and to run than the copies themselves: ResNet-50's stages (1 + 2, 3, 5 and 2
bottlenecks) compiled 1.2 to 1.4 times as long as Flax's unrolled model, stacked, and about as
long with each copy's arrays apart. So a group of at most `PER_COPY_MAX` copies in all keeps
one set of arrays per copy, under the copy's number (``repeat_0/2/...``), and its copies are
called in turn; longer groups stay stacked.

Only groups of role ``layers`` outside every stack: inside a stacked group (or a mixture of
experts) every array has that group's axis already, and a copy cannot be called apart from the
loop around it.
"""

from __future__ import annotations

from collections.abc import Iterator

from lbdl_dsl.compiler.instance import Copies, Inst

PER_COPY_MAX = 6
"""The most copies a ×N group may have, all its runs together, and keep its arrays apart.

ResNet-50's longest group has 5 (its third stage: 6 bottlenecks, the first written apart); GPT-2
small's 12 blocks stay stacked, whose compile must not grow with the depth."""


def per_copy(inst: Inst) -> bool:
    """Whether the ×N group ``inst``, outside every stack, keeps each copy's arrays apart."""
    if not inst.copies or any(cp.role != "layers" for cp in inst.copies):
        return False
    counts = [cp.count.as_int() for cp in inst.copies]
    return None not in counts and sum(c for c in counts if c is not None) <= PER_COPY_MAX


def numbered(inst: Inst) -> Iterator[tuple[int, int, Copies]]:
    """Each run of copies with the number of its first copy and its count: the copies of a
    group kept apart are numbered across its runs (``0`` is the one that changes the shape).
    Counts are known by the time a model is built (the JAX module's tables need them)."""
    first = 0
    for cp in inst.copies:
        count = cp.count.as_int()
        assert count is not None, "a ×N group is lowered once its count is known"
        yield first, count, cp
        first += count

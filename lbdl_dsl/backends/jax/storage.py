"""How a ×N group keeps its copies' arrays: stacked along a leading axis, or one set per copy.

A stacked group is compiled once whatever N (``jax.lax.scan`` over the stack): GPT-3's 96
blocks cost what one does. But on XLA:CPU the loop is not free: every weight is sliced out of
its stack in the forward pass and again in the backward pass, and the stacked gradients are
written back slice by slice, each a kernel of its own. For a short group those kernels cost more
to compile and to run than the copies themselves: ResNet-50 (its stages' 3, 4, 6 and 3
bottlenecks, the first of each written apart) compiled 1.2 to 1.4 times as long as Flax's
unrolled model, stacked, and about as long with each copy's arrays apart. So a short group
keeps one set of arrays per copy, under the copy's number (``repeat_0/2/...``), and its copies
are called in turn; longer groups stay stacked. Short depends on the body, as measured: up to
`PER_COPY_MAX` copies of convolutions, whose loops cost most (each stage's stacks are shapes of
their own), up to `PER_COPY_ANY` of anything else (a transformer's blocks, whose copies cost
more to compile apart than their loop does).

Only groups of role ``layers`` outside every stack: inside a stacked group (or a mixture of
experts) every array has that group's axis already, and a copy cannot be called apart from the
loop around it.
"""

from __future__ import annotations

from collections.abc import Iterator

from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.instance import GroupInst, Inst

PER_COPY_MAX = 6
"""The most copies a ×N group of convolutions may have, all its runs together, and keep its
arrays apart: ResNet-50's longest has 5 (its third stage: 6 bottlenecks, the first written
apart). Its training step compiled in 9.9 s stacked against 5.7 s apart, and apart in 5.2 s
against the Flax peer's 5.4 s, in two runs on a 2-core CPU."""

PER_COPY_ANY = 2
"""The most copies any other group may have and keep them apart. A transformer block's loop
costs little against its copies: GPT-2 small's training step at 2, 4, 6 and 8 blocks compiled
in 1.38, 1.92, 2.87 and 4.09 s apart against 1.44, 1.52, 1.48 and 1.48 s stacked (2-core CPU),
so its groups stack from 3 copies on."""


def per_copy(inst: GroupInst) -> bool:
    """Whether the ×N group ``inst``, outside every stack, keeps each copy's arrays apart."""
    if not inst.copies or any(cp.role != "layers" for cp in inst.copies):
        return False
    counts = [cp.count.as_int() for cp in inst.copies]
    if None in counts:
        return False
    total = sum(c for c in counts if c is not None)
    if total <= PER_COPY_ANY:
        return True
    return total <= PER_COPY_MAX and any(_convolves(cp.body) for cp in inst.copies)


def checkpointed_on_cpu(inst: GroupInst) -> bool:
    """Whether the copies of a group kept apart (`per_copy`) run under the checkpoint policy
    that keeps only their products and convolutions (``keep_products`` in the runtime) on a
    CPU too; on an accelerator they always do.

    Not for groups of convolutions: in their straight-line copies XLA:CPU planned the same
    temporaries with and without it (ResNet-50's training step at batch 8: 880 and 878 MiB; at
    batch 32, ResNet-50, ResNet-101 and MobileNetV2 the same to the MiB; VGG-16 at 8: 1,429 and
    1,356 MiB), while the checkpoint cost compile time (ResNet-50 4.4 s against 3.4 to 3.5 s)
    and step time (1.78 to 1.89 s against 1.63 to 1.65 s), recomputing norms and activations.
    On an H100 it does save memory (ResNet-50 at batch 128 keeping every residual: 7.3 GiB
    against 4.6 GiB), so the runtime keeps it there. The memory estimate (`memory`) counts
    what the checkpoint keeps, which is XLA:CPU's plan too.
    """
    return not any(_convolves(cp.body) for cp in inst.copies)


def _convolves(insts: list[Inst]) -> bool:
    """Whether a box of ``insts``, or inside them, has a convolution's kernel (an array with
    spatial axes of role ``kernel``)."""
    for inst in insts:
        if any("kernel" in spec.roles for spec in inst.params.values()):
            return True
        if any(_convolves(part) for part in inst.parts()):
            return True
    return False


def stored(root: list[Inst]) -> Iterator[paths.Array]:
    """Every array as the JAX module stores it (`paths.arrays` with this rule)."""
    return paths.arrays(root, per_copy)


def cut(root: list[Inst]) -> paths.Cut:
    """The arrays stored apart, each with the logical array it is a copy of (`paths.cut`)."""
    return paths.cut(root, per_copy)

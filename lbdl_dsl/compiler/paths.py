"""Parameter paths: the one rule that names every parameter and state array of a model.

A path is the chain of box ids from the model down to the box that owns the array, then the
array's name: ``repeat_0/tlayer_0/ffw_0/w1``. A block call and a residual group add their id, a
shortcut adds ``shortcut``, and a ×N group adds its id once for all its copies, whose arrays
are stacked along a leading axis (one per ×N around them; role ``layers``); a mixture of
experts adds ``expert`` and stacks its experts' arrays the same way (role ``experts``); a group
whose copies differ (the first copy changes the shape) numbers its runs of identical copies
``0``, ``1``... Box ids are
the names the spec gives (`fc 4D -> up`) or the layer's name and its rank among the boxes of
the same kind in its scope (`fc_0`, `fc_1`), so inserting a box shifts only the ids of its own
kind, in its own scope. The JAX module's tables, weight files, the importers' maps, sharding and
`lbdl diff` all read paths from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lbdl_dsl.compiler.instance import Inst
from lbdl_dsl.core.layers.base import PSpec, Sizes
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class Array:
    """One parameter or state array of a model, where it lives and how it is stacked."""

    path: str
    spec: PSpec
    stack: tuple[Expr, ...]  # the counts of the ×N groups around it, outermost first
    owner: Inst  # the box that declares it
    trainable: bool
    stack_roles: tuple[str, ...] = ()  # the role of each stacked axis (``layers``, ``experts``)

    @property
    def shape(self) -> Sizes:
        return (*self.stack, *self.spec.shape)

    @property
    def roles(self) -> tuple[str, ...]:
        return self.stack_roles + self.spec.roles


def arrays(root: list[Inst]) -> Iterator[Array]:
    """Every parameter, then every state array, of each box in order, depth first."""
    return _arrays(root, "", ())


_Stack = tuple[tuple[Expr, str], ...]  # the counts and roles of the ×N groups around a box


def _arrays(insts: list[Inst], prefix: str, stack: _Stack) -> Iterator[Array]:
    # At module level, not nested in `arrays`: a nested function that calls itself is a
    # reference cycle that keeps what it captures alive until the cycle collector runs.
    for inst in insts:
        here = f"{prefix}{inst.id}"
        counts, roles = tuple(c for c, _ in stack), tuple(r for _, r in stack)
        for name, spec in inst.params.items():
            yield Array(f"{here}/{name}", spec, counts, inst, True, roles)
        for name, spec in inst.state.items():
            yield Array(f"{here}/{name}", spec, counts, inst, False, roles)
        yield from _arrays(inst.body, f"{here}/", stack)
        yield from _arrays(inst.shortcut, f"{here}/shortcut/", stack)
        for step, copies in inst.copy_prefixes():
            yield from _arrays(copies.body, f"{here}/{step}", (*stack, (copies.count, copies.role)))

"""Parameter paths: the one rule that names every parameter and state array of a model.

A path is the chain of box ids from the model down to the box that owns the array, then the
array's name: ``repeat_0/tlayer_0/ffw_0/w1``. A block call and a residual group add their id, a
shortcut adds ``shortcut``, and a ×N group adds its id once for all its copies, whose arrays
are stacked along a leading axis (one per ×N around them; role ``layers``); a mixture of
experts adds ``expert`` and stacks its experts' arrays the same way (role ``experts``); a group
whose copies differ (the first copy changes the shape) numbers its runs of identical copies
``0``, ``1``... These are the logical paths, the one way the compiler names arrays: weight
files, the importers' maps, sharding, memory and `lbdl diff` read them. How a backend stores a
×N group's copies is that backend's choice: given a ``storage`` rule (the JAX backend's
`storage.per_copy`), the walk yields a short group's copies apart instead, each under the copy's
number across all its runs, with the logical array it is one copy of (`Array.view`,
`Array.copy`); `cut` maps one layout to the other at the backend's boundary. Box ids are
the names the spec gives (`fc 4D -> up`) or the layer's name and its rank among the boxes of
the same kind in its scope (`fc_0`, `fc_1`), so inserting a box shifts only the ids of its own
kind, in its own scope. The JAX module's tables, weight files, the importers' maps, sharding and
`lbdl diff` all read paths from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lbdl_dsl.compiler.instance import Copies, GroupInst, Inst
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
    view: str = ""  # with a storage rule, a copy's logical path; "" when the same
    copy: tuple[int, ...] = ()  # which copy of that view's leading axes this array is

    @property
    def shape(self) -> Sizes:
        return (*self.stack, *self.spec.shape)

    @property
    def roles(self) -> tuple[str, ...]:
        return self.stack_roles + self.spec.roles


Storage = Callable[[GroupInst], bool]
"""A backend's rule: whether a ×N group outside every stack keeps each copy's arrays apart."""


def arrays(root: list[Inst], storage: Storage | None = None) -> Iterator[Array]:
    """Every parameter, then every state array, of each box in order, depth first: the
    logical layout, or with ``storage`` as that backend stores them."""
    return _arrays(root, "", (), _Apart("", (), storage) if storage else None)


_Stack = tuple[tuple[Expr, str], ...]  # the counts and roles of the ×N groups around a box


@dataclass(frozen=True)
class _Apart:
    """Where the stacked view of a box is, for the arrays of copies kept apart."""

    prefix: str  # the logical prefix
    copy: tuple[int, ...]  # the copy numbers, within their runs, of the groups kept apart
    storage: Storage  # which groups keep their copies apart


Own = Callable[[Inst], Iterator[tuple[str, PSpec, bool]]]
"""A box's own arrays: (name, spec, trainable)."""


def _own(inst: Inst) -> Iterator[tuple[str, PSpec, bool]]:
    for name, spec in inst.params.items():
        yield name, spec, True
    for name, spec in inst.state.items():
        yield name, spec, False


def arrays_of(
    root: list[Inst], specs: Callable[[Inst], dict[str, PSpec]], storage: Storage | None = None
) -> Iterator[Array]:
    """Arrays a box declares beyond its parameters and state (a decoding cache, `decoding`),
    named and stacked as state arrays are (with ``storage``, as that backend stores them)."""

    def own(inst: Inst) -> Iterator[tuple[str, PSpec, bool]]:
        for name, spec in specs(inst).items():
            yield name, spec, False

    return _arrays(root, "", (), _Apart("", (), storage) if storage else None, own)


def _arrays(
    insts: list[Inst], prefix: str, stack: _Stack, apart: _Apart | None, own: Own = _own
) -> Iterator[Array]:
    # At module level, not nested in `arrays`: a nested function that calls itself is a
    # reference cycle that keeps what it captures alive until the cycle collector runs.
    for inst in insts:
        here = f"{prefix}{inst.id}"
        counts, roles = tuple(c for c, _ in stack), tuple(r for _, r in stack)
        view = f"{apart.prefix}{inst.id}" if apart else here
        for name, spec, trainable in own(inst):
            yield _array(f"{here}/{name}", spec, counts, inst, trainable, roles, view, apart)
        if not isinstance(inst, GroupInst):
            for step, part in zip(("", "shortcut/"), inst.parts(), strict=False):
                inner = apart and _Apart(f"{view}/{step}", apart.copy, apart.storage)
                yield from _arrays(part, f"{here}/{step}", stack, inner, own)
            continue
        if apart is not None and not stack and _kept_apart(inst, apart.storage):
            steps = dict((id(cp), step) for step, cp in inst.copy_prefixes())
            for first, count, cp in numbered(inst):
                for k in range(count):
                    at = _Apart(f"{view}/{steps[id(cp)]}", (*apart.copy, k), apart.storage)
                    yield from _arrays(cp.body, f"{here}/{first + k}/", stack, at, own)
            continue
        for step, copies in inst.copy_prefixes():
            grown = (*stack, (copies.count, copies.role))
            inner = apart and _Apart(f"{view}/{step}", apart.copy, apart.storage)
            yield from _arrays(copies.body, f"{here}/{step}", grown, inner, own)


def _kept_apart(inst: GroupInst, storage: Storage) -> bool:
    """Whether a group keeps its copies apart: only groups of role ``layers`` whose counts
    are known, and then as the backend's rule says."""
    if not inst.copies or any(cp.role != "layers" for cp in inst.copies):
        return False
    if any(cp.count.as_int() is None for cp in inst.copies):
        return False
    return storage(inst)


def numbered(inst: GroupInst) -> Iterator[tuple[int, int, Copies]]:
    """Each run of copies with the number of its first copy and its count: the copies of a
    group kept apart are numbered across its runs (``0`` is the one that changes the shape).
    Counts are known by the time a model is built (the JAX module's tables need them)."""
    first = 0
    for cp in inst.copies:
        count = cp.count.as_int()
        assert count is not None, "a ×N group is lowered once its count is known"
        yield first, count, cp
        first += count


def _array(
    path: str,
    spec: PSpec,
    counts: tuple[Expr, ...],
    inst: Inst,
    trainable: bool,
    roles: tuple[str, ...],
    view: str,
    apart: _Apart | None,
) -> Array:
    if apart is None or not apart.copy:
        return Array(path, spec, counts, inst, trainable, roles)
    name = path.rsplit("/", 1)[1]
    return Array(path, spec, counts, inst, trainable, roles, f"{view}/{name}", apart.copy)


Cut = dict[str, tuple[str, tuple[int, ...], Sizes]]
"""A stored path → its logical array's path, its index there, the logical array's shape."""


def cut(root: list[Inst], storage: Storage) -> Cut:
    """Each array a backend stores apart (``storage``) that is one copy of a logical array:
    where it comes from. A weight file, a checkpoint and an importer's map hold the logical
    layout; the backend cuts each copy out of it, and stacks the copies back to write it."""
    view = {a.path: a.shape for a in arrays(root)}
    return {a.path: (a.view, a.copy, view[a.view]) for a in arrays(root, storage) if a.view}

"""Parameter paths: the one rule that names every parameter and state array of a model.

A path is the chain of box ids from the model down to the box that owns the array, then the
array's name: ``repeat_0/tlayer_0/ffw_0/w1``. A block call and a residual group add their id, a
shortcut adds ``shortcut``, and a ×N group adds its id once for all its copies, whose arrays
are stacked along a leading axis (one per ×N around them; role ``layers``); a mixture of
experts adds ``expert`` and stacks its experts' arrays the same way (role ``experts``); a group
whose copies differ (the first copy changes the shape) numbers its runs of identical copies
``0``, ``1``... A short group outside every stack keeps each copy's arrays apart instead, under
the copy's number across all its runs (`storage`); ``stacked=True`` gives the view as if every
group were stacked, which the importers' maps are written against. Box ids are
the names the spec gives (`fc 4D -> up`) or the layer's name and its rank among the boxes of
the same kind in its scope (`fc_0`, `fc_1`), so inserting a box shifts only the ids of its own
kind, in its own scope. The JAX module's tables, weight files, the importers' maps, sharding and
`lbdl diff` all read paths from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lbdl_dsl.compiler import storage
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
    view: str = ""  # the path in the stacked view (`arrays(stacked=True)`); "" when the same
    copy: tuple[int, ...] = ()  # which copy of that view's leading axes this array is

    @property
    def shape(self) -> Sizes:
        return (*self.stack, *self.spec.shape)

    @property
    def roles(self) -> tuple[str, ...]:
        return self.stack_roles + self.spec.roles


def arrays(root: list[Inst], *, stacked: bool = False) -> Iterator[Array]:
    """Every parameter, then every state array, of each box in order, depth first, as the
    model stores them, or with ``stacked`` as if every ×N group were stacked."""
    return _arrays(root, "", (), _Apart("", ()) if not stacked else None)


_Stack = tuple[tuple[Expr, str], ...]  # the counts and roles of the ×N groups around a box


@dataclass(frozen=True)
class _Apart:
    """Where the stacked view of a box is, for the arrays of copies kept apart."""

    prefix: str  # the stacked view's prefix
    copy: tuple[int, ...]  # the copy numbers, within their runs, of the groups kept apart


Own = Callable[[Inst], Iterator[tuple[str, PSpec, bool]]]
"""A box's own arrays: (name, spec, trainable)."""


def _own(inst: Inst) -> Iterator[tuple[str, PSpec, bool]]:
    for name, spec in inst.params.items():
        yield name, spec, True
    for name, spec in inst.state.items():
        yield name, spec, False


def arrays_of(root: list[Inst], specs: Callable[[Inst], dict[str, PSpec]]) -> Iterator[Array]:
    """Arrays a box declares beyond its parameters and state (a decoding cache, `decoding`),
    named and stacked as the model stores its state."""

    def own(inst: Inst) -> Iterator[tuple[str, PSpec, bool]]:
        for name, spec in specs(inst).items():
            yield name, spec, False

    return _arrays(root, "", (), _Apart("", ()), own)


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
        inner = apart and _Apart(f"{view}/", apart.copy)
        yield from _arrays(inst.body, f"{here}/", stack, inner, own)
        inner = apart and _Apart(f"{view}/shortcut/", apart.copy)
        yield from _arrays(inst.shortcut, f"{here}/shortcut/", stack, inner, own)
        if apart is not None and not stack and storage.per_copy(inst):
            steps = dict((id(cp), step) for step, cp in inst.copy_prefixes())
            for first, count, cp in storage.numbered(inst):
                for k in range(count):
                    at = _Apart(f"{view}/{steps[id(cp)]}", (*apart.copy, k))
                    yield from _arrays(cp.body, f"{here}/{first + k}/", stack, at, own)
            continue
        for step, copies in inst.copy_prefixes():
            grown = (*stack, (copies.count, copies.role))
            inner = apart and _Apart(f"{view}/{step}", apart.copy)
            yield from _arrays(copies.body, f"{here}/{step}", grown, inner, own)


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
"""A stored path → the stacked view's path of its array, its index there, the view's shape."""


def cut(root: list[Inst]) -> Cut:
    """Each stored array that is one copy of an array of the stacked view: where it comes from.

    What reads the stacked layout (an importer's map, a file or checkpoint written before short
    groups kept their copies apart) cuts each copy out with it."""
    view = {a.path: a.shape for a in arrays(root, stacked=True)}
    return {a.path: (a.view, a.copy, view[a.view]) for a in arrays(root) if a.view}

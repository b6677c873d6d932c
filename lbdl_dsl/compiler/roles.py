"""Logical roles of every parameter axis, as sharding reads them: the registry's, refined.

A registry entry names the roles of its own axes, and a fully-connected box can only say
``(in, out)``: it does not know that it is the first half of a feed-forward block. Tensor
parallelism needs that: Megatron splits the first matrix by columns and the second by rows, so
the hidden width between them never has to be gathered. This pass finds those pairs in the
checked instance tree (a composite's inside included: `ffw`'s ``fc1`` and ``fc2``) and renames
the width between them ``mlp``:

    fc A (…, in → h), then boxes without parameters that keep the shape (gelu, dropout),
    then fc B (h → …) reading that shape: A's out and B's in are ``mlp``.

Everything else keeps its entry's roles; a ×N group's stacked copies add a leading ``layers``,
a mixture's stacked experts a leading ``experts``.
The JAX module's ``ROLES`` table and the sharding pass both read `logical_roles`, so a
standalone module carries the roles that ``--shard`` used.
"""

from __future__ import annotations

from collections.abc import Iterator

from lbdl_dsl.compiler.instance import Inst
from lbdl_dsl.compiler.paths import arrays
from lbdl_dsl.core.symbolic import Expr

DENSE = ("in", "out")  # the roles of a matrix that maps one width to another


def _dense(inst: Inst) -> bool:
    w = inst.params.get("w")
    return (
        inst.kind == "layer"
        and inst.output is not None
        and w is not None
        and w.roles == DENSE
        and bool(inst.inputs)
    )


def _passes_through(inst: Inst, shape: tuple[Expr, ...] | None) -> bool:
    """A box between the pair: no parameters, and it keeps the hidden tensor's shape."""
    return (
        inst.kind == "layer"
        and not inst.params
        and not inst.state
        and inst.inside is None
        and inst.output is not None
        and inst.output.shape == shape
        and len(inst.inputs) == 1
    )


def pairs(body: list[Inst]) -> Iterator[tuple[Inst, Inst]]:
    """Column-then-row pairs of dense boxes in one scope, in order, each box in one pair."""
    i = 0
    while i < len(body):
        first = body[i]
        if not _dense(first):
            i += 1
            continue
        assert first.output is not None
        hidden = first.output.shape
        j = i + 1
        while j < len(body) and _passes_through(body[j], hidden):
            j += 1
        if j < len(body) and _dense(body[j]) and body[j].inputs[0].shape == hidden:
            yield first, body[j]
            i = j + 1
        else:
            i += 1


def _scopes(root: list[Inst]) -> Iterator[list[Inst]]:
    seen: set[int] = set()
    todo = [root]
    while todo:
        body = todo.pop()
        if id(body) in seen:
            continue
        seen.add(id(body))
        yield body
        for inst in body:
            todo += [inst.body, inst.shortcut, *(c.body for c in inst.copies)]


def refined(root: list[Inst]) -> dict[tuple[int, str], tuple[str, ...]]:
    """(id of a box, parameter name) → its roles, where they differ from the entry's."""
    out: dict[tuple[int, str], tuple[str, ...]] = {}
    for body in _scopes(root):
        for a, b in pairs(body):
            out[(id(a), "w")] = (a.params["w"].roles[0], "mlp")
            if "b" in a.params:
                out[(id(a), "b")] = ("mlp",)
            out[(id(b), "w")] = ("mlp", b.params["w"].roles[1])
    return out


def logical_roles(root: list[Inst]) -> dict[str, tuple[str, ...]]:
    """Every parameter and state array's roles by path, ×N's ``layers`` axes first."""
    changed = refined(root)
    out = {}
    for arr in arrays(root):
        own = changed.get((id(arr.owner), arr.path.rsplit("/", 1)[1]), arr.spec.roles)
        out[arr.path] = arr.stack_roles + own
    return out

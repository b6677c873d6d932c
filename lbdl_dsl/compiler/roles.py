"""Logical roles of every parameter axis, as sharding reads them: the registry's, refined.

A registry entry names the roles of its own axes, and a fully-connected box can only say
``(in, out)``: it does not know that it is the first half of a feed-forward block. Tensor
parallelism needs that: Megatron splits the first matrix by columns and the second by rows, so
the hidden width between them never has to be gathered. This pass finds those pairs in the
checked instance tree (a composite's inside included: `ffw`'s ``fc1`` and ``fc2``) and renames
the width between them ``mlp``:

    fc A (…, in → h), then boxes without parameters that keep the shape (gelu, dropout),
    then fc B (h → …) reading that shape: A's out and B's in are ``mlp``.

A gated feed-forward block (LLaMA's, Mistral's: ``silu(x·W_gate) ⊙ x·W_up``, then
``W_down``) is the same with two column boxes: the row box's input is computed from both by
elementwise boxes (the activation, the product), so gate's and up's out and down's in are
``mlp``, and Megatron splits all three without gathering the hidden width.

A language model's head (a dense box of the model's scope mapping to a token input's
vocabulary) has ``vocab`` out, like the embedding. Everything else keeps its entry's roles; a
×N group's stacked copies add a leading ``layers``, a mixture's stacked experts a leading
``experts``.
The JAX module's ``ROLES`` table and the sharding pass both read `logical_roles`, so a
standalone module carries the roles that ``--shard`` used.
"""

from __future__ import annotations

from collections.abc import Iterator

from lbdl_dsl.compiler.instance import Inst, LayerInst
from lbdl_dsl.compiler.paths import Storage, arrays
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


def _elementwise(inst: Inst, shape: tuple[Expr, ...]) -> bool:
    """A box between the pair: no parameters, and every input and its output of the hidden
    tensor's shape (an activation, dropout, a gated pair's product)."""
    return (
        inst.kind == "layer"
        and not inst.params
        and not inst.state
        and isinstance(inst, LayerInst)
        and inst.inside is None
        and inst.output is not None
        and inst.output.shape == shape
        and bool(inst.inputs)
        and all(t.shape == shape for t in inst.inputs)
    )


def _columns(tensor: object, made: dict[int, Inst], shape: tuple[Expr, ...]) -> list[Inst] | None:
    """The dense boxes of this scope a hidden tensor is computed from through elementwise
    boxes only (one for a plain pair, gate and up for a gated one), or None if anything else
    (an input of the scope, a box with parameters that is not dense) feeds it."""
    inst = made.get(id(tensor))
    if inst is None:
        return None
    if _dense(inst):
        return [inst]
    if not _elementwise(inst, shape):
        return None
    out: list[Inst] = []
    for t in inst.inputs:
        found = _columns(t, made, shape)
        if found is None:
            return None
        out += [f for f in found if f not in out]
    return out


def pairs(body: list[Inst]) -> Iterator[tuple[list[Inst], Inst]]:
    """Column-then-row groups of dense boxes in one scope, in order, each box in one group:
    the dense boxes a row box's input is computed from (elementwise in between), and it."""
    made = {id(inst.output): inst for inst in body if inst.output is not None}
    used: set[int] = set()
    for last in body:
        if not _dense(last) or id(last) in used:
            continue
        hidden = last.inputs[0].shape
        firsts = _columns(last.inputs[0], made, hidden)
        if not firsts or any(id(f) in used or f is last for f in firsts):
            continue
        if any(f.output is None or f.output.shape != hidden for f in firsts):
            continue
        used |= {id(f) for f in firsts} | {id(last)}
        yield firsts, last


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
            todo += inst.parts()


def _vocab_heads(root: list[Inst]) -> Iterator[Inst]:
    """Dense boxes of the model's own scope whose width out is the vocabulary of a token
    input: a language model's output head, which Megatron splits by vocabulary like the
    embedding (``vocab``), not an ordinary ``out``."""
    vocabs = {t.vocab for inst in root for t in inst.inputs if t.vocab is not None}
    for inst in root:
        if _dense(inst) and inst.output is not None and inst.output.shape[-1] in vocabs:
            yield inst


def refined(root: list[Inst]) -> dict[tuple[int, str], tuple[str, ...]]:
    """(id of a box, parameter name) → its roles, where they differ from the entry's."""
    out: dict[tuple[int, str], tuple[str, ...]] = {}
    for head in _vocab_heads(root):
        out[(id(head), "w")] = (head.params["w"].roles[0], "vocab")
        if "b" in head.params:
            out[(id(head), "b")] = ("vocab",)
    for body in _scopes(root):
        for firsts, b in pairs(body):
            for a in firsts:
                out[(id(a), "w")] = (a.params["w"].roles[0], "mlp")
                if "b" in a.params:
                    out[(id(a), "b")] = ("mlp",)
            out[(id(b), "w")] = ("mlp", b.params["w"].roles[1])
    return out


def logical_roles(root: list[Inst], storage: Storage | None = None) -> dict[str, tuple[str, ...]]:
    """Every parameter and state array's roles by logical path (with ``storage``, by the path
    that backend stores it under), ×N's ``layers`` axes first."""
    changed = refined(root)
    out = {}
    for arr in arrays(root, storage):
        own = changed.get((id(arr.owner), arr.path.rsplit("/", 1)[1]), arr.spec.roles)
        out[arr.path] = arr.stack_roles + own
    return out

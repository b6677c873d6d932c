"""Maps by structure: a map's paths found in a spec that names its boxes otherwise.

A family's map is written against its spec's parameter paths (`specs/mixtral-8x7b.lbdl`:
``repeat_0/attn/att/wq``), which carry the box names that spec gives (``-> attn``). A spec
written independently, with the same boxes in the same order but other names, holds the same
parameters under other paths. Each path is described by its structure instead: for every box
on the way, its kind of box and its rank among the boxes of that kind in its scope, then the
array's name (``repeat#0/self-att#0/mha#0/wq``). A map's path that the spec lacks is looked up
by that description in the spec the map was written for; the spec's path with the same one
takes its place. When several of the spec's arrays would fit (the same array under boxes of
another kind at that rank), the import stops with an error naming them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lbdl_dsl.compiler.instance import Inst
from lbdl_dsl.core.errors import LbdlError

REPO = Path(__file__).resolve().parents[2]


def _kind(inst: Inst) -> str:
    return inst.node.op or inst.kind


def describe(root: list[Inst]) -> dict[str, str]:
    """Each array's path in the stacked view → its structural description."""
    return dict(_walk(root, "", ""))


def _walk(insts: Iterable[Inst], prefix: str, shape: str) -> Iterator[tuple[str, str]]:
    seen: Counter[str] = Counter()
    for inst in insts:
        kind = _kind(inst)
        here, form = f"{prefix}{inst.id}", f"{shape}{kind}#{seen[kind]}"
        seen[kind] += 1
        for name in (*inst.params, *inst.state):
            yield f"{here}/{name}", f"{form}/{name}"
        for step, part, _ in inst.scopes():
            yield from _walk(part, f"{here}/{step}", f"{form}/{step}")


def _loose(form: str) -> str:
    """A description without the kind of the array's own box (its rank kept)."""
    *boxes, name = form.split("/")
    if boxes:
        kind, _, rank = boxes[-1].rpartition("#")
        boxes[-1] = f"*#{rank}"
    return "/".join([*boxes, name])


def renames(
    model: Any, spec: str, wanted: Iterable[str], tables: Mapping[str, Any]
) -> dict[str, str]:
    """The map's paths (``wanted``) that ``model`` lacks → its paths of the same structure in
    the map's ``spec``; an error naming the candidates when more than one would fit."""
    missing = [p for p in wanted if p not in tables]
    source = REPO / spec
    if not missing or not source.is_file():
        return {}
    from lbdl_dsl.compiler.driver import compile_spec

    theirs = describe(compile_spec(source).root)
    ours = describe(model.checked.root)
    taken = set(wanted) & set(tables)
    exact: dict[str, list[str]] = {}
    loose: dict[str, list[str]] = {}
    for path, form in ours.items():
        if path in tables and path not in taken:
            exact.setdefault(form, []).append(path)
            loose.setdefault(_loose(form), []).append(path)
    out: dict[str, str] = {}
    for path in missing:
        if (shape := theirs.get(path)) is None:
            continue
        found = exact.get(shape) or loose.get(_loose(shape), [])
        if len(found) > 1:
            raise LbdlError(
                f"the map's `{path}` ({shape}) fits several arrays of the spec: "
                + ", ".join(f"`{p}`" for p in found),
                None,
                hint="name the boxes as the map's spec does, or keep one box of each kind "
                "at each place",
            )
        if found:
            out[path] = found[0]
    return out

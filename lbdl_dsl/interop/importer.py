"""The one interpreter of weight maps: bind a family's rules to a checkpoint's names, check the
result against a spec's parameter table (`fit`), then read, rearrange and write each tensor.

Everything is checked before any tensor is read, and every problem is reported at once, each at
the spec line of the box that owns the parameter, with both shapes. Then tensors are read one
at a time and written as they are made (see `writer`), a stacked parameter copy by copy, in the
layout `Model.save` writes, so that `Model.load` reads the result.

Maps are written against the stacked view of a spec's table (`paths.arrays`: the logical layout),
where every ×N group stacks its copies, so that one map serves a spec at any depth. A short
group whose copies keep their arrays apart (`storage`) gets each copy cut from the view's array.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import Diagnostic, LbdlError, Note, Span, did_you_mean
from lbdl_dsl.interop import structure
from lbdl_dsl.interop.fit import (
    Binding,
    Plan,
    Problem,
    bind,
    check,
    choose_variant,
    coverage,
    fit_widths,
)
from lbdl_dsl.interop.fit import listing as _list
from lbdl_dsl.interop.layout import FamilyMap
from lbdl_dsl.interop.maps import BUILT, MAPS
from lbdl_dsl.interop.readers import Checkpoint, open_checkpoint

MAX_LISTED = 20  # problems shown in one run, as the compiler's limit
Shape = tuple[int, ...]
__all__ = ["Imported", "choose_variant", "import_weights", "plan_import"]


@dataclass
class Imported:
    """The result: where it was written (or the arrays, when no file was asked for)."""

    family: str
    checkpoint: Path
    tensors: int  # reference tensors read
    ignored: list[str]
    unused: list[str]
    path: Path | None = None
    params: dict[str, np.ndarray] = field(default_factory=dict)  # flat, by path
    state: dict[str, np.ndarray] = field(default_factory=dict)
    note: str = ""

    def lines(self) -> list[str]:
        """What the command line says about it."""
        n_params = sum(int(np.prod(a.shape)) for a in self.params.values())
        out = [
            f"imported {self.tensors} tensors of {self.checkpoint} with --map {self.family}"
            + (f", {n_params:,} numbers" if self.params else "")
        ]
        if self.ignored:
            out.append(f"left out {len(self.ignored)} tensors the map knows: {_list(self.ignored)}")
        if self.unused:
            out.append(f"left out {len(self.unused)} unknown tensors: {_list(self.unused)}")
        if self.path is not None:
            out.append(f"wrote {self.path}")
        if self.note:
            out.append(f"note: {self.note}")
        return out


# -- reading and writing ---------------------------------------------------------------------


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (a symlink loop names none)."""
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # Python 3.11 reports a symlink loop as a RuntimeError
        return False


@dataclass(frozen=True)
class Copy:
    """A stored array that is one copy of an array of the stacked view."""

    view: str  # its path in the stacked view
    index: tuple[int, ...]  # which copy along the view's leading axes
    shape: Shape  # the view's shape


def copies(model: Any) -> dict[str, Copy]:
    """Each stored array of ``model`` that is a copy cut from the stacked view, by its path."""
    return {p: Copy(*entry) for p, entry in model.cut().items()}


def view_table(model: Any) -> dict[str, Shape]:
    """The stacked view's path → shape of every array (what maps are written against)."""
    from lbdl_dsl.compiler import paths

    return {a.path: _ints(a.shape) for a in paths.arrays(model.checked.root)}


def _ints(shape: Any) -> Shape:
    return tuple(d if isinstance(d, int) else int(d.as_int()) for d in shape)


def arrays(
    plan: Plan,
    ckpt: Checkpoint,
    order: list[tuple[str, str, Shape]],
    computed: Mapping[str, Any] | None = None,
    cut: Mapping[str, Copy] | None = None,
) -> Iterator[tuple[str, np.ndarray]]:
    """``(key, array)`` for each ``(key, path, shape)`` of ``order``, the array whole or copy
    by copy (see `pieces`), reading each reference tensor once; the paths of ``computed``
    (path → its row of the state table) get their initial value, and those of ``cut`` (see
    `copies`) their copy of the view's array, read copy by copy too (a split's view is made
    whole once, as its targets are, and dropped after its last copy)."""
    from lbdl_dsl.backends.jax.runtime.inits import init_arrays

    ready: dict[str, np.ndarray] = {}
    views: dict[str, np.ndarray] = {}
    left: dict[str, int] = {}
    for c in (cut or {}).values():
        left[c.view] = left.get(c.view, 0) + 1
    for key, path, shape in order:
        if computed and path in computed:
            yield key, init_arrays(np.zeros(1, np.uint32), {path: computed[path]})[0]
        elif cut and path in cut:
            c = cut[path]
            b, _ = plan.targets[c.view]
            if len(b.rule.targets) == 1 and len(b.rule.letters) >= len(c.index):
                yield from ((key, piece) for piece in pieces(b, ckpt, c.shape, c.index))
                continue
            if c.view not in views:  # a split: every target made whole at once
                views[c.view] = _whole(plan, ckpt, c.view, c.shape, ready)
            left[c.view] -= 1
            whole = views[c.view] if left[c.view] else views.pop(c.view)
            yield key, whole[c.index]
        elif path in ready:
            yield key, ready.pop(path)
        else:
            b, _ = plan.targets[path]
            if len(b.rule.targets) > 1:
                ready |= _make(b, ckpt, shape)
                yield key, ready.pop(path)
            else:
                yield from ((key, piece) for piece in pieces(b, ckpt, shape))


def _whole(
    plan: Plan, ckpt: Checkpoint, path: str, shape: Shape, ready: dict[str, np.ndarray]
) -> np.ndarray:
    """The view's array at ``path``, whole; a split's other targets are kept in ``ready``."""
    if path in ready:
        return ready.pop(path)
    b, _ = plan.targets[path]
    if len(b.rule.targets) > 1:
        ready |= _make(b, ckpt, shape)
        return ready.pop(path)
    return np.stack(list(pieces(b, ckpt, shape))).reshape(shape)


def pieces(
    b: Binding, ckpt: Checkpoint, shape: Shape, within: tuple[int, ...] = ()
) -> Iterator[np.ndarray]:
    """The copies of a rule of one target, in the order of their indices (layer, then
    expert), each read when it is wanted: together, in that order, the stacked ``shape``;
    or only those whose indices start with ``within`` (one copy kept apart, see `copies`)."""
    dims = shape[len(within) : len(b.rule.letters)]
    if 0 in dims:
        yield np.zeros(shape[len(within) :], np.float32)
        return
    for rest in itertools.product(*map(range, dims)):
        index = (*within, *rest)
        (part,) = b.rule.apply(ckpt.read(b.names[index]))
        yield part


def _make(b: Binding, ckpt: Checkpoint, shape: Shape) -> dict[str, np.ndarray]:
    """Every target of a rule that makes several (a split), each tensor read once and all its
    copies kept until written: the parts of one tensor go to different targets."""
    rule = b.rule
    dims = shape[: len(rule.letters)]
    if 0 in dims:
        return {t: np.zeros(shape, np.float32) for t in rule.targets}
    copies: list[list[np.ndarray]] = [[] for _ in rule.targets]
    for index in itertools.product(*map(range, dims)):
        for k, part in enumerate(rule.apply(ckpt.read(b.names[index]))):
            copies[k].append(part)
    return {
        t: np.stack(c).reshape((*dims, *c[0].shape))
        for t, c in zip(rule.targets, copies, strict=True)
    }


# -- the whole import ------------------------------------------------------------------------


def resolve_family(name: str) -> tuple[FamilyMap, ...]:
    """The variants of map ``name``; ``FAMILY@K`` builds a map made for one model (`BUILT`)."""
    base, at, arg = name.partition("@")
    if at and base in BUILT:
        built = BUILT[base]
        if not arg.isdigit() or int(arg) < 1:
            raise LbdlError(
                f"--map {name}: `{base}@` takes a whole number, {built.number}",
                None,
                hint=f"e.g. {built.example}",
            )
        return built.build(int(arg))
    if name not in MAPS:
        hint = did_you_mean(name, MAPS) or f"the maps are {', '.join(sorted(MAPS))}"
        raise LbdlError(f"--map: no map named `{name}`", None, hint=hint)
    return MAPS[name]


def suggest(names: Mapping[str, Shape], exclude: str) -> tuple[str, float] | None:
    """The map that names most of a checkpoint's tensors, if another than ``exclude`` does.
    Families that name their tensors alike (GPT-2's and GPTBigCode's) tie; the one listed
    first in `MAPS`, the older, is named."""
    scored = [
        (max(coverage(v, names) for v in variants), family)
        for family, variants in MAPS.items()
        if family != exclude and variants != MAPS.get(exclude)
    ]
    best = max(scored, key=lambda scored: scored[0], default=None)
    if best is None or best[0] < 0.5:
        return None
    return best[1], best[0]


def plan_import(
    model: Any, shapes: Mapping[str, Shape], family: str
) -> tuple[Plan, list[Problem], dict[str, Any]]:
    """What importing a checkpoint of these names and shapes into ``model`` (a compiled
    `Model`) through ``family`` would do, decided before any tensor is read: the plan, every
    problem, and the state paths the model computes rather than reads (→ their rows of the
    state table). A checkpoint's header, or a list of names and shapes, is enough."""
    variants = resolve_family(family)
    state = model.module["STATE"]
    tables = view_table(model)
    fam = choose_variant(variants, tables, shapes)
    plan = bind(fam, shapes)
    # a spec that names its boxes otherwise: the map's paths found by their structure
    moved = structure.renames(model, fam.spec, plan.targets, tables)
    if moved:
        for b in plan.bindings:
            names = tuple(moved.get(t, t) for t in b.rule.targets)
            b.rule = replace(b.rule, target=names[0] if isinstance(b.rule.target, str) else names)
        plan.targets = {t: (b, k) for b in plan.bindings for k, t in enumerate(b.rule.targets)}
    fit_widths(plan, tables)  # an uneven split's widths are its targets' in the spec
    back = {v: k for k, v in moved.items()}
    cut = copies(model)

    def computes(path: str) -> bool:
        view = cut[path].view if path in cut else path
        if fam.computes(view):
            return True
        *box, name = view.split("/")
        return any(
            fam.computes(f"{k.rsplit('/', 1)[0]}/{name}")
            for v, k in back.items()
            if v.rsplit("/", 1)[0] == "/".join(box)
        )

    computed = {k: v for k, v in state.items() if computes(k)}
    skip = {cut[k].view if k in cut else k for k in computed}
    tables = {k: v for k, v in tables.items() if k not in skip}
    return plan, check(plan, shapes, tables), computed


def import_weights(
    spec: Any,
    weights: str | os.PathLike[str],
    family: str,
    *,
    output: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    allow_unused: bool = False,
) -> Imported:
    """A reference checkpoint's tensors as the parameters of ``spec`` (a path, or a compiled
    `Model`), through the map ``family``; written to ``output`` (``.safetensors``, read by
    `Model.load`) or, without one, returned in memory as flat ``params``/``state``."""
    from lbdl_dsl.backends.jax.model import Model

    resolve_family(family)
    if isinstance(spec, Model):
        model = spec
    else:
        from lbdl_dsl.backends.jax.model import model_of

        model = model_of(spec, dict(overrides) if overrides is not None else None)
    params_table = {k: tuple(v[0]) for k, v in model.module["PARAMS"].items()}
    state_table = {k: tuple(v[0]) for k, v in model.module["STATE"].items()}
    if output is not None and Path(output).suffix != ".safetensors":
        raise LbdlError(
            f"-o {output}: an import is written as .safetensors",
            hint="name the output file NAME.safetensors (`model.load` reads it)",
        )
    if output is not None and _same_file(Path(output), Path(weights)):
        raise LbdlError(
            f"-o {output}: this is the checkpoint being read",
            hint="write the imported parameters to a file of their own",
        )
    with open_checkpoint(weights) as ckpt:
        plan, problems, computed = plan_import(model, ckpt.shapes, family)
        if allow_unused:
            problems = [p for p in problems if p.kind != "unused"]
        if problems:
            raise _error(problems, plan, ckpt, model, family)
        order = [(f"params/{k}", k, s) for k, s in params_table.items()]
        order += [(f"state/{k}", k, s) for k, s in state_table.items()]
        result = Imported(
            family,
            ckpt.path,
            sum(len(b.names) for b in plan.bindings),
            plan.ignored,
            plan.unused,
            note=note(model) if callable(note := plan.family.note) else note,
        )
        cut = copies(model)
        if output is not None:  # streamed: each tensor read once, written once
            from lbdl_dsl.interop.writer import StreamWriter

            grouped, shapes, key_of = logical_order(order, cut)
            with StreamWriter(output, shapes) as w:
                w.write_all(
                    (key_of.get(k, k), a) for k, a in arrays(plan, ckpt, grouped, computed, cut)
                )
            result.path = Path(output)
            return result
        made: dict[str, list[np.ndarray]] = {}
        for key, array in arrays(plan, ckpt, order, computed, cut):
            made.setdefault(key, []).append(array)
        for key, path, shape in order:
            whole = np.stack(made.pop(key)).reshape(shape)
            (result.params if key.startswith("params/") else result.state)[path] = whole
        return result


def logical_order(
    order: list[tuple[str, str, Shape]], cut: Mapping[str, Copy]
) -> tuple[list[tuple[str, str, Shape]], dict[str, Shape], dict[str, str]]:
    """What a weight file holds, whatever the module's layout: each copy kept apart written
    into its stacked array (the logical layout, `Model.save`'s). Returns the module's entries
    reordered so that each stack's copies come together, in index order, where its first copy
    was; the file's keys and shapes; and each copy's key → its stack's key."""
    grouped: list[tuple[str, str, Shape]] = []
    shapes: dict[str, Shape] = {}
    key_of: dict[str, str] = {}
    members: dict[str, list[tuple[tuple[int, ...], tuple[str, str, Shape]]]] = {}
    for entry in order:
        if entry[1] in cut:
            c = cut[entry[1]]
            members.setdefault(c.view, []).append((c.index, entry))
    for key, path, shape in order:
        if path not in cut:
            grouped.append((key, path, shape))
            shapes[key] = shape
            continue
        view = cut[path].view
        stacked = f"{key.partition('/')[0]}/{view}"
        if stacked in shapes:
            continue
        shapes[stacked] = cut[path].shape
        for _, entry in sorted(members[view]):
            grouped.append(entry)
            key_of[entry[0]] = stacked
    return grouped, shapes, key_of


def _error(
    problems: list[Problem], plan: Plan, ckpt: Checkpoint, model: Any, family: str
) -> LbdlError:
    """One error holding every problem, each at the box owning its parameter."""
    bound = sum(bool(b.names) for b in plan.bindings)
    spec = model.checked.file
    if bound < len(plan.bindings) / 2:  # most rules found nothing: the wrong map, or spec
        guess = suggest(ckpt.shapes, family)
        hint = (
            f"the checkpoint looks like `--map {guess[0]}` ({guess[1]:.0%} of its tensors "
            f"match that map)"
            if guess
            else f"the maps are {', '.join(sorted(MAPS))}; each is written for one spec "
            f"({plan.family.spec} for `{family}`)"
        )
        unknown = _list(plan.unused)
        return LbdlError(
            f"{ckpt.path}: `--map {family}` does not fit this checkpoint: "
            f"{len(plan.bindings) - bound} of the map's {len(plan.bindings)} rules find no "
            f"tensor, and {len(plan.unused)} of the checkpoint's {len(ckpt.shapes)} tensors "
            f"match no rule ({unknown})",
            None,
            hint=hint,
        )
    owners = _owners(model)
    diags = [
        Diagnostic(
            f"{ckpt.path} does not fit {spec} with --map {family}: "
            f"{len(problems)} problem{'s' if len(problems) > 1 else ''}",
            None,
        )
    ]
    for p in problems[:MAX_LISTED]:
        span, notes = _where(p.path, owners, group=p.kind == "count")
        diags.append(Diagnostic(p.message, span, None, notes))
    if len(problems) > MAX_LISTED:
        diags.append(Diagnostic(f"... and {len(problems) - MAX_LISTED} more", None))
    last = diags[-1]
    diags[-1] = Diagnostic(last.message, last.span, _hint(problems, plan.family), last.notes)
    return LbdlError(diagnostics=diags)


def _hint(problems: list[Problem], fam: FamilyMap) -> str:
    kinds = {p.kind for p in problems}
    if kinds & {"count", "inner", "shape"}:
        sizes = "give the spec the checkpoint's sizes with --set (depth, width, heads, vocabulary)"
        return f"{sizes}; {fam.sizes}" if fam.sizes else sizes
    if kinds == {"unused"}:
        return "--allow-unused imports anyway, leaving those tensors out"
    if kinds & {"foreign", "uncovered"}:
        return "each map is written for one spec of specs/ (or one that names its parameters alike)"
    return "is the checkpoint complete, and of this spec's family?"


def _owners(model: Any) -> dict[str, Any]:
    """Our path of each box (``repeat_0/tlayer_0/self_att_0``) → its checked instance."""
    return {"/".join(path): inst for path, inst, _ in model.checked.walk()}


def _where(
    path: str | None, owners: dict[str, Any], group: bool = False
) -> tuple[Span | None, tuple[Note, ...]]:
    """The span of the box owning a parameter (or, with ``group``, of the ×N group it is in),
    and a note at the model's line that uses it when the box is inside a block written
    elsewhere."""
    if path is None:
        return None, ()
    parts = path.split("/")[:-1]
    while parts and "/".join(parts) not in owners:
        parts.pop()
    # the primitives a composite box (self-att, ffw) expands into were written by the registry,
    # not the user: the error points at the composite's line of the spec
    for n in range(1, len(parts)):
        if getattr(owners["/".join(parts[:n])], "inside", None) is not None:
            parts = parts[:n]
            break
    if group:
        while parts and owners["/".join(parts)].node.kind != "repeat":
            parts.pop()
    if not parts:
        return None, ()
    span = owners["/".join(parts)].node.span
    top = owners.get(parts[0])
    notes: tuple[Note, ...] = ()
    if top is not None and top.node.span is not None and top.node.span != span:
        what = {"call": "block call", "repeat": "×N group"}.get(top.node.kind, "box")
        notes = (Note(f"inside this {what}", top.node.span),)
    return span, notes

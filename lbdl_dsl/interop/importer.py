"""The one interpreter of weight maps: bind a family's rules to a checkpoint's names, check the
result against a spec's parameter table, then read, rearrange and write each tensor.

Everything is checked before any tensor is read: which parameter each reference tensor fills,
that every parameter is filled and every tensor used, that the ×N groups have as many copies as
the checkpoint has layers, and that every shape fits after its layout operations. Every problem
is reported at once, each at the box that owns the parameter, with both shapes. Then tensors
are read one at a time and written as they are made (see `writer`), in the layout `Model.save`
writes, so that `Model.load` reads the result.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import Diagnostic, LbdlError, Note, Span, did_you_mean
from lbdl_dsl.interop.layout import FamilyMap, Index, Rule, pattern
from lbdl_dsl.interop.maps import MAPS
from lbdl_dsl.interop.readers import Checkpoint, open_checkpoint

MAX_LISTED = 20  # problems shown in one run, as the compiler's limit
Shape = tuple[int, ...]


@dataclass
class Binding:
    """One rule bound to a checkpoint: the name pattern that matched, and the checkpoint's
    name for each copy: ``(i,)`` of a ×N group, ``(i, j)`` of the experts of its layer i, or
    ``()`` when the rule has no index."""

    rule: Rule
    source: str
    names: dict[Index, str]


@dataclass
class Plan:
    """What an import will do, decided from names and shapes alone."""

    family: FamilyMap
    bindings: list[Binding]
    targets: dict[str, tuple[Binding, int]]  # our path → (its binding, which part of a split)
    ignored: list[str]  # checkpoint names the map leaves out on purpose
    unused: list[str]  # checkpoint names no rule and no `ignore` pattern names
    prefix: str = ""  # the map's prefix this checkpoint's names carry (``transformer.``)

    def name(self, b: Binding, index: Index, source: str | None = None) -> str:
        """The full name the checkpoint has, or would have, for copy ``index`` of a rule."""
        found = b.names.get(index)
        return found or self.prefix + b.rule.name(index, source or b.source)


@dataclass
class Problem:
    """One thing that keeps the checkpoint from fitting the spec."""

    kind: str  # foreign, uncovered, missing, extra, count, inner, shape, unused
    message: str
    path: str | None = None  # our parameter path: the error points at its box


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


def _shape(s: Shape) -> str:
    return "×".join(map(str, s)) if s else "a scalar"


def _list(names: list[str], n: int = 6) -> str:
    shown = ", ".join(f"`{x}`" for x in names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


# -- binding ---------------------------------------------------------------------------------


def bind(family: FamilyMap, names: Mapping[str, Shape]) -> Plan:
    """The rules of ``family`` matched against a checkpoint's names (prefixes stripped)."""
    stripped: dict[str, str] = {}
    for name in names:
        stripped.setdefault(family.strip(name), name)
    bindings, used = [], set()
    for rule in family.rules:
        found: dict[Index, str] = {}
        source = rule.sources[0]
        for source in rule.sources:
            rx = pattern(source)
            for short, name in stripped.items():
                m = rx.match(short)
                index = None if m is None else rule.index(m)
                if index is not None:
                    found[index] = name
            if found:
                break
        bindings.append(Binding(rule, source, dict(sorted(found.items()))))
        used |= set(found.values())
    ignore = family.ignored()
    ignored = [n for s, n in stripped.items() if n not in used and any(p.match(s) for p in ignore)]
    unused = [n for n in stripped.values() if n not in used and n not in set(ignored)]
    targets = {t: (b, k) for b in bindings for k, t in enumerate(b.rule.targets)}
    counts = {p: sum(n.startswith(p) for n in names) for p in family.prefixes}
    prefix = max(counts, key=lambda p: counts[p], default="")
    return Plan(family, bindings, targets, ignored, unused, prefix if counts.get(prefix) else "")


def coverage(family: FamilyMap, names: Mapping[str, Shape]) -> float:
    """The share of a checkpoint's tensors that a map names (by a rule or as ignored)."""
    if not names:
        return 0.0
    plan = bind(family, names)
    return 1.0 - len(plan.unused) / len(names)


def choose_variant(
    variants: tuple[FamilyMap, ...],
    tables: Mapping[str, Any],
    names: Mapping[str, Shape] | None = None,
) -> FamilyMap:
    """The variant of a family whose parameter paths this spec has most of; between variants
    that fit the spec alike (Mixtral's experts stored apart, or fused), the one that names
    most of the checkpoint's tensors."""

    def fit(v: FamilyMap) -> tuple[int, float]:
        return (
            sum(t in tables for r in v.rules for t in r.targets),
            coverage(v, names) if names is not None and len(variants) > 1 else 0.0,
        )

    return max(variants, key=fit)


# -- checking --------------------------------------------------------------------------------


def check(plan: Plan, shapes: Mapping[str, Shape], tables: Mapping[str, Shape]) -> list[Problem]:
    """Every reason the bound checkpoint does not fit ``tables`` (our path → shape)."""
    problems: list[Problem] = []
    fam = plan.family
    # a target the spec lacks is harmless while the checkpoint has nothing for it either (a
    # ×N group of zero copies, as `resblock ×(L1-1)` with L1=1, has no parameters at all)
    foreign = [t for t, (b, _) in plan.targets.items() if t not in tables and b.names]
    if foreign:
        problems.append(
            Problem(
                "foreign",
                f"`--map {fam.name}` fills parameters this spec does not have: {_list(foreign)}"
                f" (the map is written for {fam.spec})",
            )
        )
    for path in tables:
        if path not in plan.targets:
            problems.append(
                Problem("uncovered", f"`--map {fam.name}` has no rule that fills `{path}`", path)
            )
    # copy counts: when every rule of a ×N group finds the layers 0..m-1 of another m, that is
    # one problem of depth, reported once at the group; when every rule of a box finds the
    # experts 0..m-1 of each layer, of another m, one problem at the box; otherwise each rule
    # says what it lacks and what it has beyond the spec's copies
    counts: dict[tuple[str, str], list[Count]] = {}
    for b in plan.bindings:
        present = [t for t in b.rule.targets if t in tables]
        if not present:
            continue
        found = _check_binding(plan, b, present, shapes, tables)
        count = _count(b, present[0], tables[present[0]], found)
        if count is not None:
            counts.setdefault((count.letter, count.owner), []).append(count)
        else:
            problems += found
    for (letter, owner), entries in counts.items():
        problems += _count_problems(plan, letter, owner, entries)
    order = {path: i for i, path in enumerate(tables)}
    problems.sort(key=lambda p: order.get(p.path, -1) if p.path else -1)
    if plan.unused:
        problems.append(
            Problem(
                "unused",
                f"{len(plan.unused)} tensors of the checkpoint fill no parameter: "
                f"{_list(plan.unused)}",
            )
        )
    return problems


@dataclass
class Count:
    """A rule whose copies along one index are 0..m-1 where the spec stacks n: ``letter``
    (``i``, the ×N group's layers, or ``j``, a box's experts) of ``owner`` (the ×N group's
    path, or the box's)."""

    binding: Binding
    path: str  # the rule's first target the spec has
    letter: str
    owner: str
    n: int
    m: int
    problems: list[Problem]  # the rule's own, said when its group or box is not whole


def _count(b: Binding, path: str, want: Shape, problems: list[Problem]) -> Count | None:
    """The copy count of one index of ``b`` that differs from the spec's, if the copies it has
    are otherwise whole (``{i}`` first: a checkpoint one layer short says that alone)."""
    letters = b.rule.letters
    for axis, letter in enumerate(letters):
        outer = {k[:axis] for k in b.names}
        inner = [sorted({k[axis] for k in b.names if k[:axis] == o}) for o in sorted(outer)]
        if outer != set(itertools.product(*map(range, want[:axis]))):
            return None  # the outer copies do not fit: _check_binding says which
        lengths = {len(found) for found in inner}
        if len(lengths) != 1 or any(found != list(range(len(found))) for found in inner):
            return None
        m = lengths.pop()
        if m != want[axis]:
            return Count(b, path, letter, _owner(path, letter), want[axis], m, problems)
    return None


def _count_problems(plan: Plan, letter: str, owner: str, entries: list[Count]) -> list[Problem]:
    """One problem for a whole ×N group or box whose rules agree on another count (with the
    shapes that do not fit either); otherwise each rule's own problems."""
    rules = [
        b
        for b in plan.bindings
        if letter in b.rule.letters and any(_owner(t, letter) == owner for t in b.rule.targets)
    ]
    if len(entries) != len(rules) or len({c.m for c in entries}) != 1:
        return [p for c in entries for p in c.problems]
    shapes = [p for c in entries for p in c.problems if p.kind == "shape"]
    c = entries[0]
    axis = c.binding.rule.letters.index(letter)
    zeros = (0,) * len(c.binding.rule.letters)

    def copy(k: int) -> str:  # copy k along the axis, the first along every other
        return plan.name(c.binding, (*zeros[:axis], k, *zeros[axis + 1 :]))

    span = f"{c.m} (`{copy(0)}` to `{copy(c.m - 1)}`)" if c.m else f"none (no `{copy(0)}`)"
    if letter == "i":
        text = f"this ×N group has {c.n} copies, but the checkpoint has {span}"
        return [Problem("count", text, c.path), *shapes]
    per = " per layer" if axis else ""
    text = (
        f"this box has {c.n} {plan.family.inner} in this spec, but the checkpoint has {span}{per}"
    )
    return [Problem("inner", text, c.path), *shapes]


def _owner(path: str, letter: str) -> str:
    return _group(path) if letter == "i" else path.rsplit("/", 1)[0]


def _group(path: str) -> str:
    """The ×N group a stacked parameter belongs to: its path up to the last ``repeat_K``
    (the generated module's name for a ×N group)."""
    parts = path.split("/")
    cut = max((i for i, p in enumerate(parts) if re.fullmatch(r"repeat_\d+", p)), default=-1)
    return "/".join(parts[: cut + 1])


def _copies(plan: Plan, b: Binding, first: str, dims: Shape) -> list[Problem]:
    """The copies of ``b``'s rule that the spec's ``dims`` want and the checkpoint lacks, and
    those it has beyond them."""
    expected = set(itertools.product(*map(range, dims)))
    missing = [plan.name(b, k) for k in sorted(expected - b.names.keys())]
    extra = [b.names[k] for k in sorted(b.names.keys() - expected)]
    out = []
    if missing:
        text = f"the checkpoint has no {_list(missing)} for `{first}`"
        out.append(Problem("missing", text, first))
    if extra:
        words = {"i": "copies", "j": plan.family.inner}
        copies = " × ".join(f"{d} {words[x]}" for d, x in zip(dims, b.rule.letters, strict=True))
        text = f"the checkpoint has {_list(extra)} beyond the {copies} of `{first}`"
        out.append(Problem("extra", text, first))
    return out


def _check_binding(
    plan: Plan,
    b: Binding,
    present: list[str],
    shapes: Mapping[str, Shape],
    tables: Mapping[str, Shape],
) -> list[Problem]:
    rule, first = b.rule, present[0]
    depth = len(rule.letters)
    if not b.names:
        index = (0,) * depth
        alts = " nor ".join(f"`{plan.name(b, index, s)}`" for s in rule.sources)
        what = "copy 0 of " if rule.indexed else ""
        return [
            Problem(
                "missing", f"the checkpoint has no tensor for {what}`{first}`: no {alts}", first
            )
        ]
    dims, want = tables[first][:depth], tables[first][depth:]
    problems = _copies(plan, b, first, dims)
    names = [n for k, n in b.names.items() if all(x < d for x, d in zip(k, dims, strict=True))]
    by_shape: dict[Shape, list[str]] = {}
    for name in names:
        by_shape.setdefault(tuple(shapes[name]), []).append(name)
    for got, group in by_shape.items():
        every = len(group) == len(names)
        text = _misfit(rule, first, group, got, tuple(want), every)
        if text:
            problems.append(Problem("shape", text, first))
    return problems


def _misfit(rule: Rule, first: str, group: list[str], got: Shape, want: Shape, every: bool) -> str:
    """Why the tensors ``group``, all of shape ``got``, do not fill copies of ``first`` (of
    ``want`` each), or ``""`` when they do."""
    name = f"`{group[0]}`"
    if not every and len(group) > 1:
        name += f" (and {len(group) - 1} more of its copies)"
    try:
        out = rule.out_shape(got)
    except ValueError as exc:
        return f"{name} ({_shape(got)}) cannot fill `{first}`: {exc}"
    if out == want:
        return ""
    how = f", which {', then '.join(op.name for op in rule.ops)} makes {_shape(out)}"
    each = "each copy of " if rule.indexed else ""
    return f"{each}`{first}` is {_shape(want)} in this spec, but {name} is {_shape(got)}" + (
        how if rule.ops else ""
    )


# -- reading and writing ---------------------------------------------------------------------


def arrays(
    plan: Plan,
    ckpt: Checkpoint,
    order: list[tuple[str, str, Shape]],
    computed: Mapping[str, Any] | None = None,
) -> Iterator[tuple[str, np.ndarray]]:
    """``(key, array)`` for each ``(key, path, shape)`` of ``order``, the array whole or copy
    by copy (see `pieces`), reading each reference tensor once; the paths of ``computed``
    (path → its row of the state table) get their initial value."""
    from lbdl_dsl.backends.jax.runtime import init_arrays

    ready: dict[str, np.ndarray] = {}
    for key, path, shape in order:
        if computed and path in computed:
            yield key, init_arrays((0,), {path: computed[path]})[0]
        elif path in ready:
            yield key, ready.pop(path)
        else:
            b, _ = plan.targets[path]
            if len(b.rule.targets) > 1:
                ready |= _make(b, ckpt, shape)
                yield key, ready.pop(path)
            else:
                yield from ((key, piece) for piece in pieces(b, ckpt, shape))


def pieces(b: Binding, ckpt: Checkpoint, shape: Shape) -> Iterator[np.ndarray]:
    """The copies of a rule of one target, in the order of their indices (layer, then
    expert), each read when it is wanted: together, in that order, the stacked ``shape``."""
    dims = shape[: len(b.rule.letters)]
    if 0 in dims:
        yield np.zeros(shape, np.float32)
        return
    for index in itertools.product(*map(range, dims)):
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
    if name not in MAPS:
        hint = did_you_mean(name, MAPS) or f"the maps are {', '.join(sorted(MAPS))}"
        raise LbdlError(f"--map: no map named `{name}`", None, hint=hint)
    return MAPS[name]


def suggest(names: Mapping[str, Shape], exclude: str) -> tuple[str, float] | None:
    """The map that names most of a checkpoint's tensors, if another than ``exclude`` does."""
    scored = [
        (max(coverage(v, names) for v in variants), family)
        for family, variants in MAPS.items()
        if family != exclude and variants != MAPS.get(exclude)
    ]
    best = max(scored, default=None)
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
    params, state = model.module["PARAMS"], model.module["STATE"]
    tables = {k: tuple(v[0]) for k, v in (params | state).items()}
    fam = choose_variant(variants, tables, shapes)
    computed = {k: v for k, v in state.items() if fam.computes(k)}
    tables = {k: v for k, v in tables.items() if k not in computed}
    plan = bind(fam, shapes)
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
        import lbdl_dsl

        model = lbdl_dsl.compile(spec, **dict(overrides or {}))
    params_table = {k: tuple(v[0]) for k, v in model.module["PARAMS"].items()}
    state_table = {k: tuple(v[0]) for k, v in model.module["STATE"].items()}
    if output is not None and Path(output).suffix != ".safetensors":
        raise LbdlError(
            f"-o {output}: an import is written as .safetensors",
            hint="name the output file NAME.safetensors (`model.load` reads it)",
        )
    if output is not None and Path(output).resolve() == Path(weights).resolve():
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
        if output is not None:
            from lbdl_dsl.interop.writer import StreamWriter

            with StreamWriter(output, {key: s for key, _, s in order}) as w:
                w.write_all(arrays(plan, ckpt, order, computed))
            result.path = Path(output)
        else:
            made: dict[str, list[np.ndarray]] = {}
            for key, array in arrays(plan, ckpt, order, computed):
                made.setdefault(key, []).append(array)
            for key, path, shape in order:
                whole = np.stack(made.pop(key)).reshape(shape)
                (result.params if key.startswith("params/") else result.state)[path] = whole
        return result


def _error(
    problems: list[Problem], plan: Plan, ckpt: Checkpoint, model: Any, family: str
) -> LbdlError:
    """One error holding every problem, each at the box owning its parameter."""
    bound = sum(bool(b.names) for b in plan.bindings)
    spec = model.compiled.file
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
    if kinds & {"count", "shape"}:
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

"""Binding a family's map to a checkpoint's names, and checking the result against a spec's
parameter table, from names and shapes alone (a checkpoint's header is enough).

Everything is checked before any tensor is read: which parameter each reference tensor fills,
that every parameter is filled and every tensor used, that the ×N groups have as many copies as
the checkpoint has layers and each box as many experts (``{j}``) as the spec, and that every
shape fits after its layout operations. Every problem is collected, each with the parameter
path whose box the error points at, and both shapes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.interop.layout import FamilyMap, Index, Rule, pattern

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


def shape_text(s: Shape) -> str:
    return "×".join(map(str, s)) if s else "a scalar"


def listing(names: list[str], n: int = 6) -> str:
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
                f"`--map {fam.name}` fills parameters this spec does not have: {listing(foreign)}"
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
                f"{listing(plan.unused)}",
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
        text = f"the checkpoint has no {listing(missing)} for `{first}`"
        out.append(Problem("missing", text, first))
    if extra:
        words = {"i": "copies", "j": plan.family.inner}
        copies = " × ".join(f"{d} {words[x]}" for d, x in zip(dims, b.rule.letters, strict=True))
        text = f"the checkpoint has {listing(extra)} beyond the {copies} of `{first}`"
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
    dims = tables[first][:depth]
    # each target the spec has, by its part of the rule's output, and its shape per copy
    wants = [(t, k, tables[t][depth:]) for k, t in enumerate(rule.targets) if t in present]
    problems = _copies(plan, b, first, dims)
    names = [n for k, n in b.names.items() if all(x < d for x, d in zip(k, dims, strict=True))]
    by_shape: dict[Shape, list[str]] = {}
    for name in names:
        by_shape.setdefault(tuple(shapes[name]), []).append(name)
    for got, group in by_shape.items():
        every = len(group) == len(names)
        text, path = _misfit(rule, wants, group, got, every)
        if text:
            problems.append(Problem("shape", text, path))
    return problems


def _misfit(
    rule: Rule, wants: list[tuple[str, int, Shape]], group: list[str], got: Shape, every: bool
) -> tuple[str, str]:
    """Why the tensors ``group``, all of shape ``got``, do not fill copies of the targets
    ``wants`` (path, part, shape of each copy), and the first that they do not fill; ``""``
    when they fill every one (the parts of an uneven split, `layout.split_to`, each its own)."""
    name = f"`{group[0]}`"
    if not every and len(group) > 1:
        name += f" (and {len(group) - 1} more of its copies)"
    first = wants[0][0]
    try:
        outs = rule.out_shapes(got)
    except ValueError as exc:
        return f"{name} ({shape_text(got)}) cannot fill `{first}`: {exc}", first
    for path, part, want in wants:
        out = outs[part]
        if tuple(out) == tuple(want):
            continue
        how = f", which {', then '.join(op.name for op in rule.ops)} makes {shape_text(out)}"
        each = "each copy of " if rule.indexed else ""
        text = f"{each}`{path}` is {shape_text(want)} in this spec, but {name} is {shape_text(got)}"
        return text + (how if rule.ops else ""), path
    return "", first


def fit_widths(plan: Plan, tables: Mapping[str, Shape]) -> None:
    """Each bound rule with an op that depends on the spec (`layout.split_to`: an uneven split
    whose parts are as wide as its targets) made for the spec's ``tables``; a rule with a
    target the spec lacks is left as it is (the check says what is missing)."""
    for b in plan.bindings:
        rule = b.rule
        if not any(op.fit for op in rule.ops) or any(t not in tables for t in rule.targets):
            continue
        depth = len(rule.letters)
        b.rule = rule.fitted(tuple(tuple(tables[t][depth:]) for t in rule.targets))
    plan.targets = {t: (b, k) for b in plan.bindings for k, t in enumerate(b.rule.targets)}

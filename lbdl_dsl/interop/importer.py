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

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import Diagnostic, LbdlError, Note, Span, did_you_mean
from lbdl_dsl.interop.layout import FamilyMap, Rule, pattern
from lbdl_dsl.interop.maps import MAPS
from lbdl_dsl.interop.readers import Checkpoint, open_checkpoint

MAX_LISTED = 20  # problems shown in one run, as the compiler's limit
Shape = tuple[int, ...]


@dataclass
class Binding:
    """One rule bound to a checkpoint: the name pattern that matched, and the checkpoint's
    name for each copy (index) of a ×N group, or for ``None`` when the rule has no index."""

    rule: Rule
    source: str
    names: dict[int | None, str]


@dataclass
class Plan:
    """What an import will do, decided from names and shapes alone."""

    family: FamilyMap
    bindings: list[Binding]
    targets: dict[str, tuple[Binding, int]]  # our path → (its binding, which part of a split)
    ignored: list[str]  # checkpoint names the map leaves out on purpose
    unused: list[str]  # checkpoint names no rule and no `ignore` pattern names
    prefix: str = ""  # the map's prefix this checkpoint's names carry (``transformer.``)

    def name(self, b: Binding, index: int | None, source: str | None = None) -> str:
        """The full name the checkpoint has, or would have, for copy ``index`` of a rule."""
        found = b.names.get(index)
        return found or self.prefix + b.rule.name(index, source or b.source)


@dataclass
class Problem:
    """One thing that keeps the checkpoint from fitting the spec."""

    kind: str  # foreign, uncovered, missing, count, shape, unused
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
        found: dict[int | None, str] = {}
        source = rule.sources[0]
        for source in rule.sources:
            rx = pattern(source)
            for short, name in stripped.items():
                m = rx.match(short)
                if m is None:
                    continue
                index = int(m.group(1)) - rule.start if m.groups() else None
                if index is None or index >= 0:
                    found[index] = name
            if found:
                break
        bindings.append(Binding(rule, source, dict(sorted(found.items(), key=_index_key))))
        used |= set(found.values())
    ignore = family.ignored()
    ignored = [n for s, n in stripped.items() if n not in used and any(p.match(s) for p in ignore)]
    unused = [n for n in stripped.values() if n not in used and n not in set(ignored)]
    targets = {t: (b, k) for b in bindings for k, t in enumerate(b.rule.targets)}
    counts = {p: sum(n.startswith(p) for n in names) for p in family.prefixes}
    prefix = max(counts, key=lambda p: counts[p], default="")
    return Plan(family, bindings, targets, ignored, unused, prefix if counts.get(prefix) else "")


def _index_key(item: tuple[int | None, str]) -> int:
    return -1 if item[0] is None else item[0]


def coverage(family: FamilyMap, names: Mapping[str, Shape]) -> float:
    """The share of a checkpoint's tensors that a map names (by a rule or as ignored)."""
    if not names:
        return 0.0
    plan = bind(family, names)
    return 1.0 - len(plan.unused) / len(names)


def choose_variant(variants: tuple[FamilyMap, ...], tables: Mapping[str, Any]) -> FamilyMap:
    """The variant of a family whose parameter paths this spec has most of."""

    def fit(v: FamilyMap) -> int:
        return sum(t in tables for r in v.rules for t in r.targets)

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
    # layer counts: a ×N group whose every rule finds the copies 0..m-1 of another m is one
    # problem of depth, reported once at the group; otherwise each rule says what it lacks
    depth: dict[str, list[tuple[Binding, str, int, list[int]]]] = {}
    for b in plan.bindings:
        present = [t for t in b.rule.targets if t in tables]
        if not present:
            continue
        if b.rule.indexed:
            n = tables[present[0]][0]
            found = sorted(i for i in b.names if i is not None)
            if found != list(range(n)) and found == list(range(len(found))):
                depth.setdefault(_group(present[0]), []).append((b, present[0], n, found))
                continue
        problems += _check_binding(plan, b, present, shapes, tables)
    indexed = {_group(t) for b in plan.bindings if b.rule.indexed for t in b.rule.targets}
    for group, entries in depth.items():
        lengths = {len(found) for _, _, _, found in entries}
        whole = len(entries) == sum(
            1 for b in plan.bindings if b.rule.indexed and _group(b.rule.targets[0]) == group
        )
        if whole and len(lengths) == 1 and group in indexed:
            b, first, n, found = entries[0]
            have = (
                f"{len(found)} (`{plan.name(b, found[0])}` to `{plan.name(b, found[-1])}`)"
                if found
                else f"none (no `{plan.name(b, 0)}`)"
            )
            problems.append(
                Problem(
                    "count", f"this ×N group has {n} copies, but the checkpoint has {have}", first
                )
            )
            continue
        for b, first, n, found in entries:
            missing = [plan.name(b, i) for i in range(n) if i not in found]
            text = f"the checkpoint has no {_list(missing)} for `{first}`"
            problems.append(Problem("missing", text, first))
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


def _group(path: str) -> str:
    """The ×N group a stacked parameter belongs to: its path up to the last ``repeat_K``
    (the generated module's name for a ×N group)."""
    parts = path.split("/")
    cut = max((i for i, p in enumerate(parts) if re.fullmatch(r"repeat_\d+", p)), default=-1)
    return "/".join(parts[: cut + 1])


def _check_binding(
    plan: Plan,
    b: Binding,
    present: list[str],
    shapes: Mapping[str, Shape],
    tables: Mapping[str, Shape],
) -> list[Problem]:
    rule, first = b.rule, present[0]
    if not b.names:
        index = 0 if rule.indexed else None
        alts = " nor ".join(f"`{plan.name(b, index, s)}`" for s in rule.sources)
        what = "copy 0 of " if rule.indexed else ""
        return [
            Problem(
                "missing", f"the checkpoint has no tensor for {what}`{first}`: no {alts}", first
            )
        ]
    want = tables[first]
    if rule.indexed:
        n, want = want[0], want[1:]
        found = sorted(i for i in b.names if i is not None)
        if found != list(range(n)):
            missing = [plan.name(b, i) for i in range(n) if i not in b.names]
            if missing:
                text = f"the checkpoint has no {_list(missing)} for `{first}`"
                return [Problem("missing", text, first)]
    name = next(iter(b.names.values()))
    got = tuple(shapes[name])
    try:
        out = rule.out_shape(got)
    except ValueError as exc:
        text = f"`{name}` ({_shape(got)}) cannot fill `{first}`: {exc}"
        return [Problem("shape", text, first)]
    if out != tuple(want):
        how = f", which {', then '.join(op.name for op in rule.ops)} makes {_shape(out)}"
        each = "each copy of " if rule.indexed else ""
        return [
            Problem(
                "shape",
                f"{each}`{first}` is {_shape(tuple(want))} in this spec, but `{name}` is "
                f"{_shape(got)}" + (how if rule.ops else ""),
                first,
            )
        ]
    return []


# -- reading and writing ---------------------------------------------------------------------


def arrays(
    plan: Plan, ckpt: Checkpoint, order: list[tuple[str, str, Shape]]
) -> Iterator[tuple[str, np.ndarray]]:
    """``(key, array)`` for each ``(key, path, shape)`` of ``order``, reading each reference
    tensor once and keeping only the parts of one rule that are still to be written."""
    ready: dict[str, np.ndarray] = {}
    for key, path, shape in order:
        if path not in ready:
            b, _ = plan.targets[path]
            ready |= _make(b, ckpt, shape)
        yield key, ready.pop(path)


def _make(b: Binding, ckpt: Checkpoint, shape: Shape) -> dict[str, np.ndarray]:
    rule = b.rule
    if not rule.indexed:
        parts = rule.apply(ckpt.read(b.names[None]))
        return dict(zip(rule.targets, parts, strict=True))
    n = shape[0]
    copies: list[list[np.ndarray]] = [[] for _ in rule.targets]
    for i in range(n):
        for k, part in enumerate(rule.apply(ckpt.read(b.names[i]))):
            copies[k].append(part)
    if n == 0:
        return {t: np.zeros(shape, np.float32) for t in rule.targets}
    return {t: np.stack(c) for t, c in zip(rule.targets, copies, strict=True)}


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

    variants = resolve_family(family)
    if isinstance(spec, Model):
        model = spec
    else:
        import lbdl_dsl

        model = lbdl_dsl.compile(spec, **dict(overrides or {}))
    params_table = {k: tuple(v[0]) for k, v in model.module["PARAMS"].items()}
    state_table = {k: tuple(v[0]) for k, v in model.module["STATE"].items()}
    tables = params_table | state_table
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
        fam = choose_variant(variants, tables)
        plan = bind(fam, ckpt.shapes)
        problems = check(plan, ckpt.shapes, tables)
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
            note=fam.note,
        )
        if output is not None:
            from lbdl_dsl.interop.writer import StreamWriter

            with StreamWriter(output, {key: s for key, _, s in order}) as w:
                w.write_all(arrays(plan, ckpt, order))
            result.path = Path(output)
        else:
            for key, array in arrays(plan, ckpt, order):
                kind, path = key.split("/", 1)
                (result.params if kind == "params" else result.state)[path] = array
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

"""Sharding, as a table: a device mesh and rules → where each parameter axis lives.

A pass after checking, pure and without JAX, so that ``lbdl check --mesh ...`` answers in
milliseconds for GPT-3. Every parameter axis has a logical role, named by its registry entry
(`core.layers.base.ROLES`: ``embed``, ``heads``, ``mlp``, ``vocab``...; ``layers`` for the
stacked copies of a ×N group). Rules map roles, or the spec's own size symbols (``D``, ``F``),
to the axes of a mesh (``data=2,fsdp=2,tensor=2``); nothing else mentions a mesh axis, and the
runtime turns the result into ``jax.sharding.NamedSharding``s, leaving the rest to XLA's
propagation (MaxText's logical axis rules, in our vocabulary).

Resolution, per array and axis by axis: the first rule that matches the axis (by role, or by a
symbol its size is exactly) and whose mesh axes this array does not use yet takes it. Rules the
user writes come first, in their order, then the presets' structural rules (``tp``'s Megatron
split: heads, key/value heads and the feed-forward width on ``tensor``, column then row), then
``fsdp``'s preferences. A user's rule and ``tp``'s are strict: a size that does not divide over
the mesh axes is an error at the box's line. ``fsdp``'s are preferences: a parameter goes to
``fsdp`` along its first axis that divides, and one with no such axis stays replicated (and is
listed), as FSDP without padding must. The batch of every input is split over ``data`` and
``fsdp`` (the mesh axes of data parallelism), or over the axes a ``batch=`` rule names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from math import prod

from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.infer import check
from lbdl_dsl.compiler.instance import Checked, Inst, LayerInst
from lbdl_dsl.compiler.roles import logical_roles
from lbdl_dsl.core.errors import Diagnostic, LbdlError, Note, Span, did_you_mean
from lbdl_dsl.core.layers.base import ROLES, fmt_shape
from lbdl_dsl.core.symbolic import Expr, sym

Axis = str | tuple[str, ...] | None
"""One array axis of a placement: unsplit, split over one mesh axis, or over several."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
BATCH = "batch"  # the pseudo-role of every input's leading axis, for `batch=data,fsdp`
DATA_AXES = ("data", "fsdp")  # mesh axes that split the batch unless a `batch=` rule says
FSDP_ROLES = (
    "embed",
    "in",
    "out",
    "mlp",
    "heads",
    "kv",
    "vocab",
    "positions",
    "hidden",
    "norm",
)
"""The roles FSDP may split, in no order of preference: an array's first axis that divides."""


@dataclass(frozen=True)
class MeshSpec:
    """A device mesh as the user names it: axis names and sizes, in order (major first)."""

    axes: tuple[tuple[str, int], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.axes)

    @property
    def devices(self) -> int:
        return prod(self.shape)

    def size(self, axis: Axis) -> int:
        """How many pieces an array axis placed on ``axis`` is cut into."""
        sizes = dict(self.axes)
        return prod(sizes[a] for a in axis_names(axis))

    def __str__(self) -> str:
        return ",".join(f"{n}={s}" for n, s in self.axes)


@dataclass(frozen=True)
class Rule:
    """``target`` (a role or a size symbol) → ``mesh_axes``; ``source`` is what the user wrote.

    ``strict``: a size this rule matches must divide over its mesh axes (else an error);
    otherwise the rule passes over that axis (fsdp's preferences)."""

    target: str
    mesh_axes: tuple[str, ...]
    source: str
    strict: bool = True

    @property
    def is_symbol(self) -> bool:
        return self.target not in ROLES

    def __str__(self) -> str:
        return f"{self.target}={','.join(self.mesh_axes)}"


@dataclass(frozen=True)
class Rules:
    """The rules in the order they are tried, and the mesh axes that split the batch."""

    rules: tuple[Rule, ...]
    batch: tuple[str, ...]
    presets: tuple[str, ...]
    text: str  # the --shard words, for messages and the report


@dataclass(frozen=True)
class Placement:
    """Where one parameter or state array lives: its axes' roles and mesh axes."""

    path: str
    kind: str  # "param" | "state"
    shape: tuple[Expr, ...]
    roles: tuple[str, ...]
    spec: tuple[Axis, ...]  # a PartitionSpec, one entry per axis
    pieces: int  # how many pieces the array is cut into (the product of its mesh axes)
    span: Span

    @property
    def numel(self) -> Expr:
        out = Expr.lift(1)
        for d in self.shape:
            out = out * d
        return out

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return tuple(a for axis in self.spec for a in axis_names(axis))


@dataclass(frozen=True)
class Layout:
    """The result of the pass: every array's placement, the batch axes, and what to tell."""

    mesh: MeshSpec
    rules: Rules
    arrays: dict[str, Placement]  # by path ("repeat_0/self_att_0/wq"), params then state
    batch: tuple[str, ...]
    notes: tuple[str, ...] = ()  # replicated arrays, mesh axes nothing uses
    assumptions: tuple[str, ...] = ()  # divisibility of symbolic sizes, taken on trust

    @property
    def params(self) -> dict[str, Placement]:
        return {k: p for k, p in self.arrays.items() if p.kind == "param"}

    @property
    def state(self) -> dict[str, Placement]:
        return {k: p for k, p in self.arrays.items() if p.kind == "state"}

    @property
    def batch_pieces(self) -> int:
        return self.mesh.size(self.batch)


# -- flags ---------------------------------------------------------------------------------------

PRESETS: dict[str, tuple[str, str]] = {
    "dp": ("data", "data parallelism: parameters replicated, the batch split over data (+fsdp)"),
    "fsdp": ("fsdp", "fully sharded data parallelism: each parameter split along one axis"),
    "tp": ("tensor", "Megatron tensor parallelism: heads and feed-forward width on tensor"),
    "ep": ("experts", "expert parallelism: a mixture's experts on experts, the batch too"),
}
"""Preset name → (the mesh axis it needs, what it does)."""


def _preset_rules(name: str) -> tuple[Rule, ...]:
    if name == "tp":  # column-parallel in, row-parallel out: the matmuls' natural split
        strict = tuple(Rule(role, ("tensor",), "tp") for role in ("heads", "kv", "mlp"))
        return (*strict, Rule("vocab", ("tensor",), "tp", strict=False))
    if name == "ep":  # GShard: each device holds its experts, and the tokens come to them
        return (Rule("experts", ("experts",), "ep"),)
    if name == "fsdp":
        return tuple(Rule(role, ("fsdp",), "fsdp", strict=False) for role in FSDP_ROLES)
    return ()


def flag_error(flag: str, message: str, hint: str | None = None) -> LbdlError:
    """A bad value of a command-line flag: named, with a hint (exit 1, no traceback)."""
    return LbdlError(f"{flag}: {message}", None, hint)


def parse_mesh(text: str) -> MeshSpec:
    """``data=2,fsdp=2,tensor=2`` → a `MeshSpec`; a malformed one names ``--mesh``."""
    example = "name the axes and their sizes: --mesh data=2,fsdp=2,tensor=2"
    axes: list[tuple[str, int]] = []
    for item in [t.strip() for t in text.split(",")]:
        name, sep, size = (s.strip() for s in item.partition("="))
        if not sep or not _NAME.match(name):
            raise flag_error("--mesh", f"`{item}` is not NAME=SIZE", example)
        if not size.isdigit() or int(size) < 1:
            raise flag_error("--mesh", f"the size of `{name}` must be a whole number ≥ 1", example)
        if name in dict(axes):
            raise flag_error("--mesh", f"the axis `{name}` is named twice", example)
        axes.append((name, int(size)))
    if len(axes) > 8:
        raise flag_error("--mesh", f"{len(axes)} axes; at most 8", example)
    return MeshSpec(tuple(axes))


def _presets(word: str, mesh: MeshSpec) -> list[str]:
    """``fsdp+tp`` → the presets, each checked against the mesh."""
    out = []
    for name in (w.strip() for w in word.split("+")):
        if name not in PRESETS:
            hint = did_you_mean(name, PRESETS) or f"presets: {', '.join(PRESETS)}"
            raise flag_error("--shard", f"no preset `{name}`", hint)
        needs = PRESETS[name][0]
        if needs not in mesh.names:
            raise flag_error(
                "--shard",
                f"`{name}` needs a mesh axis named `{needs}`, and the mesh is {mesh}",
                f"add it to --mesh (e.g. {mesh},{needs}=2) or choose another preset",
            )
        out.append(name)
    return out


def _rule(word: str, mesh: MeshSpec) -> Rule:
    """``heads=tensor`` or ``batch=data,fsdp`` → a rule, its mesh axes checked."""
    target, _, value = (s.strip() for s in word.partition("="))
    axes = tuple(a.strip() for a in value.split(","))
    if not _NAME.match(target) or not all(_NAME.match(a) for a in axes):
        raise flag_error(
            "--shard", f"`{word}` is not TARGET=AXIS", "e.g. --shard heads=tensor D=fsdp"
        )
    for a in axes:
        if a not in mesh.names:
            hint = did_you_mean(a, mesh.names) or f"the mesh's axes are {mesh}"
            raise flag_error("--shard", f"`{word}`: the mesh has no axis `{a}`", hint)
    if len(set(axes)) != len(axes):
        raise flag_error("--shard", f"`{word}` names a mesh axis twice")
    return Rule(target, axes, word)


def parse_rules(words: Sequence[str], mesh: MeshSpec) -> Rules:
    """``--shard`` words: presets joined by ``+`` (``fsdp+tp``) and ``TARGET=AXIS[,AXIS]`` rules.

    Targets are roles (``heads``), size symbols of the spec (``D``: checked by `resolve`, which
    knows the spec) or ``batch``. Without words, the preset is ``dp``."""
    presets: list[str] = []
    user: list[Rule] = []
    batch: tuple[str, ...] | None = None
    for word in words or ["dp"]:
        if "=" not in word:
            presets += [p for p in _presets(word, mesh) if p not in presets]
            continue
        rule = _rule(word, mesh)
        if rule.target == BATCH:
            batch = rule.mesh_axes
        else:
            user.append(rule)
    ordered = [*user]
    for name in ("tp", "ep", "fsdp"):  # structural rules before preferences, whatever the order
        if name in presets:
            ordered += _preset_rules(name)
    if batch is None:
        splits = (*DATA_AXES, "experts") if "ep" in presets else DATA_AXES
        batch = tuple(a for a in mesh.names if a in splits)
    return Rules(tuple(ordered), batch, tuple(presets), " ".join(words or ["dp"]))


# -- the pass ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Array:
    """One array as the pass places it: the walker's `Array`, its refined roles, and the box
    a message names (a composite's inner box is reported at the composite, the user's line)."""

    path: str
    kind: str
    shape: tuple[Expr, ...]
    roles: tuple[str, ...]
    box: Inst  # the box of the user's spec that declares it
    name: str  # its path below that box (`att/wq`)
    calls: tuple[Note, ...]  # the block calls around it, innermost first, for messages


def placed_arrays(checked: Checked) -> Iterator[_Array]:
    """Every parameter and state array in the JAX module's order (`paths.arrays`), with the
    roles sharding reads (`roles.logical_roles`) and where a message about it points."""
    boxes = {"/".join(path): inst for path, inst, _ in checked.walk()}
    roles = logical_roles(checked.root)
    for arr in paths.arrays(checked.root):
        parts = arr.path.split("/")
        box, name = arr.owner, parts[-1]
        calls: tuple[Note, ...] = ()
        for i in range(1, len(parts)):
            inst = boxes.get("/".join(parts[:i]))
            if inst is None:  # a copy's number or `shortcut`
                continue
            if inst.kind == "call":
                calls = (Note(f"in block `{inst.node.op}`, used here", inst.node.span), *calls)
            if isinstance(inst, LayerInst) and inst.inside is not None:  # a composite: ours
                box, name = inst, "/".join(parts[i:])
                break
        kind = "param" if arr.trainable else "state"
        shape = tuple(Expr.lift(d) for d in arr.shape)
        yield _Array(arr.path, kind, shape, roles[arr.path], box, name, calls)


def _symbolic_shapes(
    checked: Checked, symbols: set[str], rules: Rules
) -> dict[str, tuple[Expr, ...]]:
    """Every array's shape with ``symbols`` left as symbols: how a ``D=fsdp`` rule finds D.

    The spec is checked again with those model parameters unknown; a spec that needs one's
    value (``self-att h=H`` must know H) cannot be split by that symbol: the error says where
    and names the role to use instead."""
    env = dict(checked.env)
    for s in symbols:
        env[s] = sym(s)
    again = check(checked.program, env, overridden=True)
    if again.diagnostics:
        first = again.diagnostics[0]
        used = sorted(s for s in symbols if s in first.message) or sorted(symbols)
        words = [r.source for r in rules.rules if r.target in used]
        raise LbdlError(
            f"--shard {' '.join(words)}: the spec needs the value of {', '.join(used)} here, "
            f"so its axes cannot be found by that symbol ({first.message})",
            first.span,
            hint="name the axes by their role instead (e.g. heads=tensor, embed=fsdp)",
            notes=[n for n in first.notes if n.message.startswith("in block")],
        )
    return {a.path: tuple(Expr.lift(d) for d in a.shape) for a in paths.arrays(again.root)}


def _divides(size: Expr, pieces: int) -> bool | None:
    """Whether ``size`` splits into ``pieces`` equal parts; None when it is still symbolic."""
    value = size.as_int()
    if value is None:
        return None
    return value % pieces == 0


_FailureKey = tuple[int, tuple[Note, ...], str, Rule]
"""A failure said once per box, call chain, role and rule, however many arrays share it."""


@dataclass
class _Resolver:
    checked: Checked
    mesh: MeshSpec
    rules: Rules
    symbolic: dict[str, tuple[Expr, ...]]
    matched: set[Rule] = field(default_factory=set)
    used_axes: set[str] = field(default_factory=set)
    failures: dict[_FailureKey, tuple[_Array, Expr, list[str]]] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)

    def matches(self, rule: Rule, role: str, symbolic: Expr | None) -> bool:
        if rule.is_symbol:
            return symbolic is not None and symbolic == sym(rule.target)
        return rule.target == role

    def place(self, arr: _Array) -> Placement:
        shape = tuple(Expr.lift(d) for d in arr.shape)
        roles = arr.roles
        symbolic = self.symbolic.get(arr.path, (None,) * len(shape))
        spec: list[Axis] = []
        taken: set[str] = set()
        for i, (size, role) in enumerate(zip(shape, roles)):
            spec.append(None)
            for rule in self.rules.rules:
                if not self.matches(rule, role, symbolic[i]):
                    continue
                self.matched.add(rule)
                if taken & set(rule.mesh_axes):
                    continue
                pieces = self.mesh.size(rule.mesh_axes)
                fits = _divides(size, pieces)
                if fits is False and not rule.strict:
                    continue
                if fits is False:
                    self.indivisible(arr, size, role, rule)
                elif fits is None:
                    self.assumptions.append(
                        f"{size} is a multiple of {pieces} ({arr.path} over "
                        f"{','.join(rule.mesh_axes)})"
                    )
                spec[i] = rule.mesh_axes[0] if len(rule.mesh_axes) == 1 else rule.mesh_axes
                taken |= set(rule.mesh_axes)
                break
        self.used_axes |= taken
        return Placement(
            arr.path,
            arr.kind,
            shape,
            roles,
            tuple(spec),
            prod(self.mesh.size(a) for a in spec if a is not None),
            arr.box.node.span,
        )

    def indivisible(self, arr: _Array, size: Expr, role: str, rule: Rule) -> None:
        """Remember a size that does not divide; one message per box, role and rule."""
        key = (id(arr.box), arr.calls, role, rule)
        if key not in self.failures:
            self.failures[key] = (arr, size, [])
        self.failures[key][2].append(arr.name)

    def failure_diagnostics(self) -> list[Diagnostic]:
        out = []
        for (_, _, role, rule), (arr, size, names) in self.failures.items():
            pieces = self.mesh.size(rule.mesh_axes)
            over = " × ".join(f"{a}={self.mesh.size(a)}" for a in rule.mesh_axes)
            value = size.as_int() or 0
            fits = [d for d in range(2, min(value, 64) + 1) if value % d == 0][:8]
            sizes = ", ".join(str(d) for d in fits) if fits else "none up to 64"
            origin = "the preset" if rule.source in PRESETS else "the rule"
            what = ", ".join(f"`{n}`" for n in names)
            out.append(
                Diagnostic(
                    f"`{arr.box.node.op or arr.box.kind}`: its {role} axis of {value:,} "
                    f"({what}) does not split over {over}: {value:,} is not a multiple of "
                    f"{pieces}",
                    arr.box.node.span,
                    f"{origin} `{rule.source}` puts {rule.target} on "
                    f"{','.join(rule.mesh_axes)}; sizes that divide {value:,}: {sizes}",
                    arr.calls,
                )
            )
        return out


def resolve(checked: Checked, mesh: MeshSpec, rules: Rules) -> Layout:
    """Place every parameter and state array of ``checked`` on ``mesh`` by ``rules``.

    Raises `LbdlError` with every independent problem at once: sizes that do not divide (at the
    box's line), rules that match nothing, symbols that are not the spec's."""
    model = checked.program.model
    header = Span.point(checked.program.main_file, model.span.line, model.span.column)
    symbols = {r.target for r in rules.rules if r.is_symbol}
    known = sorted(k for k, v in checked.env.items() if isinstance(v, Expr)) + checked.free
    for s in sorted(symbols):
        if s not in known:
            hint = did_you_mean(s, [*ROLES, *known]) or (
                f"roles: {', '.join(r for r in ROLES)}; size symbols of {model.name}: "
                f"{', '.join(known) or 'none'}"
            )
            raise LbdlError(
                f"--shard: `{s}` is neither a role nor a size symbol of `{model.name}`",
                header,
                hint=hint,
            )
    symbolic = _symbolic_shapes(checked, symbols, rules) if symbols else {}
    res = _Resolver(checked, mesh, rules, symbolic)
    placed = {a.path: res.place(a) for a in placed_arrays(checked)}
    diagnostics = res.failure_diagnostics() + _unmatched(res, model.name, header, placed)
    diagnostics += _partitioner_hazard(mesh, rules, placed, checked)
    if diagnostics:
        raise LbdlError(diagnostics=diagnostics)
    return Layout(
        mesh,
        rules,
        placed,
        rules.batch,
        tuple(_notes(mesh, rules, placed, res.used_axes)),
        tuple(dict.fromkeys(res.assumptions)),
    )


def _unmatched(
    res: _Resolver, model: str, header: Span, placed: dict[str, Placement]
) -> list[Diagnostic]:
    """A rule the user wrote, or a preset, that matches no axis of any array."""
    out = []
    seen = sorted({r for p in placed.values() for r in p.roles})
    for rule in res.rules.rules:
        if rule.source in PRESETS or rule in res.matched:
            continue
        out.append(
            Diagnostic(
                f"--shard {rule.source}: no parameter of `{model}` has an axis "
                + (f"of size {rule.target}" if rule.is_symbol else f"with the role {rule.target}"),
                header,
                f"the roles of its parameters' axes: {', '.join(seen) or 'none'}",
            )
        )
    for preset in res.rules.presets:
        own = [r for r in res.rules.rules if r.source == preset]
        if own and not any(r in res.matched for r in own):
            roles = ", ".join(r.target for r in own)
            out.append(
                Diagnostic(
                    f"--shard {preset}: `{model}` has no parameter axis that {preset} splits "
                    f"({roles})",
                    header,
                    f"the roles of its parameters' axes: {', '.join(seen) or 'none'}; "
                    "name them with explicit rules (e.g. out=tensor)",
                )
            )
    return out


def _partitioner_hazard(
    mesh: MeshSpec, rules: Rules, placed: dict[str, Placement], checked: Checked
) -> list[Diagnostic]:
    """A layout XLA's SPMD partitioner computes wrong gradients for (jax 0.10, XLA of 2026).

    A matrix whose input axis (role ``in``) lives on one of the batch's mesh axes and whose
    output axis (``out``) on another mesh axis, with the batch split over two axes: the rule
    `lbdl check` suggests for a CNN under ``tp`` (``out=tensor``) beside ``fsdp`` on a mesh
    with ``data`` as well. Two dense layers in plain JAX show it (the first gradient wrong by
    109 %: tests/compiler/test_partitioner_hazard.py keeps that reproducer, so a fixed XLA is
    noticed). Refused, with the layouts that compute the same thing correctly."""
    batch = [a for a in rules.batch if mesh.size(a) > 1]
    if len(batch) < 2:
        return []
    hits = []
    for p in placed.values():
        where = dict(zip(p.roles, p.spec, strict=True))
        inside, outside = axis_names(where.get("in")), axis_names(where.get("out"))
        if any(a in batch for a in inside) and any(a not in batch for a in outside):
            hits.append(p)
    if not hits:
        return []
    first = hits[0]
    on = "+".join(axis_names(dict(zip(first.roles, first.spec, strict=True))["in"]))
    which = (
        f"`{first.path}` and {len(hits) - 1} more have" if len(hits) > 1 else f"`{first.path}` has"
    )
    sizes = dict(mesh.axes)
    folded = ",".join(
        f"{n}={s * prod(sizes[b] for b in batch if b != n)}" if n == batch[-1] else f"{n}={s}"
        for n, s in mesh.axes
        if n not in batch[:-1]
    )
    return [
        Diagnostic(
            f"--shard {rules.text}: XLA's partitioner computes wrong gradients for this layout: "
            f"{which} the input axis on {on} and the output axis on another mesh axis, with "
            f"the batch over {','.join(batch)}",
            first.span,
            f"split the batch over one mesh axis: --mesh {folded} with the same --shard (the "
            "same devices and work), or drop the rule that splits the output; docs/scaling.md",
        )
    ]


def _notes(
    mesh: MeshSpec, rules: Rules, placed: dict[str, Placement], used: set[str]
) -> Iterator[str]:
    if "fsdp" in rules.presets:
        whole = [p.path for p in placed.values() if p.pieces == 1 and p.shape]
        if whole:
            shown = ", ".join(whole[:4]) + (f" and {len(whole) - 4} more" if len(whole) > 4 else "")
            yield f"replicated on every device (no axis divides): {shown}"
    idle = [f"{n}={s}" for n, s in mesh.axes if n not in used and n not in rules.batch and s > 1]
    if idle:
        yield f"{', '.join(idle)} split nothing: those devices repeat the same work"


def axis_names(axis: Axis) -> tuple[str, ...]:
    if axis is None:
        return ()
    return (axis,) if isinstance(axis, str) else axis


def spec_text(spec: Sequence[Axis]) -> str:
    """A placement as ``P`` writes it: ``(None, 'fsdp', 'tensor')`` → ``(·, fsdp, tensor)``."""
    return "(" + ", ".join("·" if a is None else "+".join(axis_names(a)) for a in spec) + ")"


def layout_text(layout: Layout) -> str:
    """The stable text form of a layout: one line per array, for goldens and ``--emit``."""
    lines = [
        f"mesh {layout.mesh} ({layout.mesh.devices} devices)",
        f"rules {layout.rules.text}: "
        + (" ".join(str(r) for r in layout.rules.rules if r.source not in PRESETS) or "presets")
        + (f" + {'+'.join(layout.rules.presets)}" if layout.rules.presets else ""),
        f"batch over {','.join(layout.batch) or 'no axis (replicated)'}",
    ]
    for p in layout.arrays.values():
        roles = ",".join(p.roles)
        lines.append(
            f"{p.path} {fmt_shape(p.shape)} ({roles}) -> {spec_text(p.spec)} /{p.pieces}"
            + (" state" if p.kind == "state" else "")
        )
    lines += [f"note: {n}" for n in layout.notes]
    lines += [f"assumes: {a}" for a in layout.assumptions]
    return "\n".join(lines) + "\n"

"""Two checked architectures compared at the level they were written: blocks, ×N groups, boxes.

`diff(a, b)` aligns the two instance trees scope by scope (a sequence alignment of each scope's
boxes, keyed by what a box *is*: its layer, its block, a ×N group, a residual), then descends into
pairs that are the same kind of thing but differ inside. A pair is only opened when its inside
accounts for all of its cost (a block call, a residual, a ×N group whose copies and counts are
the same on both sides); otherwise it is reported whole, as "×5 → ×22". This keeps the one
property every user relies on: the changes add up, exactly, to totals(B) − totals(A), as
formulas in the spec's symbols.

`carried` lists B's parameters that exist in A at the same path with the same shape: the weights
a fine-tuning run can start from. Paths are the logical ones, every ×N group's copies stacked on
a leading axis, as weight files hold them (the JAX module may keep a short group's copies apart:
that is its layout, not the model's). An array of a group whose depth differs (ResNet-50's ×5
against ResNet-101's ×22) is carried in part: B's first copies take A's.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass

from lbdl_dsl.boxtext import box_label
from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.infer import Checked, Inst
from lbdl_dsl.compiler.instance import RepeatInst, numel
from lbdl_dsl.core.symbolic import Expr, fmt_count, total

COUNTS = ("params", "state", "macs", "activations")
"""What a change is measured in; activations are values per sample (×4 bytes in float32)."""


@dataclass(frozen=True)
class Change:
    """One box or group that differs; ``delta`` already includes its ×N multiplicity."""

    status: str  # "added" | "removed" | "changed"
    path_a: str | None
    path_b: str | None
    label_a: str | None
    label_b: str | None
    shape_a: str | None
    shape_b: str | None
    line_a: int | None
    line_b: int | None
    times: Expr  # how many copies this change is made in (the enclosing ×N groups)
    delta: dict[str, Expr]


@dataclass(frozen=True)
class Diff:
    a: str
    b: str
    changes: tuple[Change, ...]
    delta: dict[str, Expr]  # totals(B) − totals(A)
    carried: tuple[str, ...]  # B's parameter paths that A has with the same shape
    params_b: int  # how many of B's parameter arrays there are, for "carried 40 of 62"
    in_part: tuple[str, ...] = ()  # of `carried`, those of ×N groups of another depth

    @property
    def empty(self) -> bool:
        return not self.changes


def diff(a: Checked, b: Checked) -> Diff:
    """The changes from ``a`` to ``b``; both must have checked without errors."""
    labels = _labels(a) | _labels(b)
    changes = list(_Align(labels).scope(a.root, b.root, "", "", Expr.lift(1)))
    delta = {k: b.totals[k] - a.totals[k] for k in COUNTS}
    params_a = dict(_stacked(a))
    params_b = dict(_stacked(b))
    carried, in_part = [], []
    for path, (stack, shape) in params_b.items():
        other = params_a.get(path)
        if other is None or other[1] != shape or len(other[0]) != len(stack):
            continue
        carried.append(path)
        if other[0] != stack:
            in_part.append(path)
    return Diff(
        a.program.model.name,
        b.program.model.name,
        tuple(changes),
        delta,
        tuple(carried),
        len(params_b),
        tuple(in_part),
    )


def _labels(checked: Checked) -> dict[int, str]:
    out: dict[int, str] = {}

    def visit(insts: list[Inst]) -> None:
        for inst in insts:
            out[id(inst)] = box_label(inst, checked.program.blocks)
            for part in inst.parts():
                visit(part)

    visit(checked.root)
    return out


# -- alignment --------------------------------------------------------------------------------


def _key(inst: Inst) -> tuple[str, str]:
    """What a box is, for alignment: a layer's or block's name, or the kind of group."""
    return (inst.kind, inst.node.op)


def _own(inst: Inst) -> dict[str, Expr]:
    """What a box costs by itself, without what is inside it."""
    acts = numel(inst.output.shape) if inst.output is not None and inst.kind == "layer" else Expr()
    return {
        "params": total(numel(p.shape) for p in inst.params.values()),
        "state": total(numel(p.shape) for p in inst.state.values()),
        "macs": inst.macs,
        "activations": acts,
    }


def _opens(a: Inst, b: Inst) -> bool:
    """Whether the pair's inside accounts for all of its difference (so it may be opened)."""
    if a.kind != b.kind or a.node.op != b.node.op:
        return False
    if a.kind in ("call", "residual"):
        return True
    if isinstance(a, RepeatInst) and isinstance(b, RepeatInst):
        return len(a.copies) == len(b.copies) and all(
            ca.count == cb.count for ca, cb in zip(a.copies, b.copies)
        )
    return False


@dataclass(frozen=True)
class _Align:
    """The alignment of two trees; ``labels`` holds each instance's label (`box_label`, which
    needs its own program's blocks), by identity."""

    labels: dict[int, str]

    def same(self, a: Inst, b: Inst) -> bool:
        """Nothing to report: same label, same output, same costs inside."""
        return (
            self.labels[id(a)] == self.labels[id(b)]
            and str(a.output) == str(b.output)
            and all(a.totals.get(k, Expr()) == b.totals.get(k, Expr()) for k in COUNTS)
        )

    def scope(
        self, insts_a: list[Inst], insts_b: list[Inst], pa: str, pb: str, times: Expr
    ) -> Iterator[Change]:
        matcher = difflib.SequenceMatcher(
            None, [_key(i) for i in insts_a], [_key(i) for i in insts_b], autojunk=False
        )
        for tag, a0, a1, b0, b1 in matcher.get_opcodes():
            if tag == "equal":
                for ia, ib in zip(insts_a[a0:a1], insts_b[b0:b1]):
                    yield from self.pair(ia, ib, pa, pb, times)
                continue
            for ia in insts_a[a0:a1]:
                yield self.whole("removed", ia, None, pa, pb, times)
            for ib in insts_b[b0:b1]:
                yield self.whole("added", None, ib, pa, pb, times)

    def pair(self, a: Inst, b: Inst, pa: str, pb: str, times: Expr) -> Iterator[Change]:
        if self.same(a, b):
            return
        if not _opens(a, b):
            yield self.whole("changed", a, b, pa, pb, times)
            return
        own_a, own_b = _own(a), _own(b)
        if any(own_a[k] != own_b[k] for k in COUNTS) or str(a.output) != str(b.output):
            yield self.change(
                "changed", a, b, pa, pb, times, {k: own_b[k] - own_a[k] for k in COUNTS}
            )
        path_a, path_b = _join(pa, a.id), _join(pb, b.id)
        for (step_a, part_a, count), (step_b, part_b, _) in zip(a.scopes(), b.scopes()):
            sub_a, sub_b = f"{path_a}/{step_a}".rstrip("/"), f"{path_b}/{step_b}".rstrip("/")
            yield from self.scope(part_a, part_b, sub_a, sub_b, times * count)

    def whole(
        self, status: str, a: Inst | None, b: Inst | None, pa: str, pb: str, times: Expr
    ) -> Change:
        ta = a.totals if a is not None else {}
        tb = b.totals if b is not None else {}
        delta = {k: (tb.get(k, Expr()) - ta.get(k, Expr())) for k in COUNTS}
        return self.change(status, a, b, pa, pb, times, delta)

    def change(
        self,
        status: str,
        a: Inst | None,
        b: Inst | None,
        pa: str,
        pb: str,
        times: Expr,
        delta: dict[str, Expr],
    ) -> Change:
        return Change(
            status,
            _join(pa, a.id) if a is not None else None,
            _join(pb, b.id) if b is not None else None,
            self.labels[id(a)] if a is not None else None,
            self.labels[id(b)] if b is not None else None,
            str(a.output) if a is not None and a.output is not None else None,
            str(b.output) if b is not None and b.output is not None else None,
            a.node.span.line if a is not None else None,
            b.node.span.line if b is not None else None,
            times,
            {k: v * times for k, v in delta.items()},
        )


def _join(prefix: str, step: str) -> str:
    return f"{prefix}/{step}" if prefix else step


# -- parameters -------------------------------------------------------------------------------


def parameter_shapes(checked: Checked) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Every trainable parameter array as ``(path, shape)`` by its logical path: each ×N
    group's copies stacked on a leading axis."""
    for path, (stack, shape) in _stacked(checked):
        yield path, stack + shape


def _stacked(checked: Checked) -> Iterator[tuple[str, tuple[tuple[str, ...], tuple[str, ...]]]]:
    """``(path, (stack, shape))`` of every trainable array: the copy counts of the ×N groups
    around it, and one copy's shape."""
    for arr in paths.arrays(checked.root):
        if arr.trainable and arr.path.rsplit("/", 1)[1] not in arr.owner.tied:
            stack = tuple(str(d) for d in arr.stack)
            yield arr.path, (stack, tuple(str(d) for d in arr.spec.shape))


# -- text and JSON ----------------------------------------------------------------------------


def _signed(e: Expr) -> str:
    text = fmt_count(e)
    v = e.as_int()
    if v is not None:
        return f"+{text}" if v > 0 else text
    return text if text.startswith("-") else f"+{text}"


def _where(c: Change) -> str:
    if c.status == "added":
        return f"+ {c.label_b}  (B:{c.line_b})"
    if c.status == "removed":
        return f"- {c.label_a}  (A:{c.line_a})"
    if c.label_a == c.label_b:
        return f"~ {c.label_b}  (A:{c.line_a}, B:{c.line_b})"
    return f"~ {c.label_a} → {c.label_b}  (A:{c.line_a}, B:{c.line_b})"


def render(d: Diff) -> str:
    """The diff for people: one block per change, then the totals and what carries over."""
    if d.empty:
        return f"{d.a} → {d.b}: no difference\n"
    lines = [f"{d.a} → {d.b}: {len(d.changes)} change{'s' if len(d.changes) != 1 else ''}"]
    for c in d.changes:
        path = c.path_b or c.path_a
        times = "" if c.times == Expr.lift(1) else f" ×{c.times}"
        lines.append(f"{_where(c)}  [{path}]{times}")
        if c.status == "changed" and c.shape_a != c.shape_b:
            lines.append(f"    output   {c.shape_a} → {c.shape_b}")
        elif c.status != "changed":
            lines.append(f"    output   {c.shape_b or c.shape_a}")
        lines.append(
            "    Δ params {}  Δ MACs {}  Δ activations {}".format(
                _signed(c.delta["params"]),
                _signed(c.delta["macs"]),
                _signed(c.delta["activations"]),
            )
        )
    lines.append(
        "total  Δ params {}  Δ state {}  Δ MACs {}  Δ activations {} per sample".format(
            _signed(d.delta["params"]),
            _signed(d.delta["state"]),
            _signed(d.delta["macs"]),
            _signed(d.delta["activations"]),
        )
    )
    part = f" ({len(d.in_part)} of them in part: the copies A has)" if d.in_part else ""
    lines.append(f"carried over: {len(d.carried)} of {d.params_b} parameter arrays of {d.b}{part}")
    return "\n".join(lines) + "\n"


def _num(e: Expr) -> int | str:
    v = e.as_int()
    return v if v is not None else str(e)


def to_json(d: Diff) -> dict[str, object]:
    return {
        "a": d.a,
        "b": d.b,
        "changes": [
            {
                "status": c.status,
                "a": None
                if c.path_a is None
                else {"path": c.path_a, "box": c.label_a, "output": c.shape_a, "line": c.line_a},
                "b": None
                if c.path_b is None
                else {"path": c.path_b, "box": c.label_b, "output": c.shape_b, "line": c.line_b},
                "times": _num(c.times),
                "delta": {k: _num(v) for k, v in c.delta.items()},
            }
            for c in d.changes
        ],
        "delta": {k: _num(v) for k, v in d.delta.items()},
        "carried": list(d.carried),
        "carried_in_part": list(d.in_part),
        "parameter_arrays_b": d.params_b,
    }


ADDED_FILL = "#a8dc98"
CHANGED_FILL = "#f2b45a"
REMOVED_FILL = "#ffffff"


def colours(d: Diff) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """B's boxes coloured by what happened to them (instance path → fill), and the legend; what
    A had and B has not cannot be drawn on B, so the legend names it."""
    fills: dict[str, str] = {}
    for c in d.changes:
        if c.path_b is not None:
            fills[c.path_b] = ADDED_FILL if c.status == "added" else CHANGED_FILL
    legend = [("added in B", ADDED_FILL), ("changed", CHANGED_FILL)]
    removed = [f"{c.label_a} (A:{c.line_a})" for c in d.changes if c.status == "removed"]
    if removed:
        legend.append(("removed: " + ", ".join(removed), REMOVED_FILL))
    return fills, tuple(legend)

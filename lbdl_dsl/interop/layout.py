"""The vocabulary of weight maps: rules from reference names to our parameter paths, and the
layout operations between them.

A map is data, not code: each family's module (``maps/gpt2.py``...) is a table of `Rule`s,
and one interpreter (`importer`) reads every table the same way. Each operation says what it
does to a shape as well as to an array, so that a whole map can be checked against a spec's
parameter table from the checkpoint's header alone, before a single tensor is read.

Patterns name reference tensors with ``{i}`` standing for a layer index (``h.{i}.ln_1.weight``)
and ``{i+K}`` for an index counted from K (``layer1.{i+1}.conv1.weight``: ResNet's first block
of a stage is written apart from the ×N group of the others), ``{Si+K}`` for every S-th from K
(``layers.{2i+1}.``: Gemma 2's layers alternate two kinds, a ×N/2 group of two layers, whose
second reads the odd ones), and ``{Si+K<E}`` for those before E (Gemma 3's groups of six
layers, before the layers left over). A rule with an index fills a
parameter of a ×N group, whose copies are stacked along a leading axis, one per index. A second
index, ``{j}`` (or ``{j+K}``), counts the copies stored apart inside one layer (Mixtral's
``experts.{j}.w1.weight``): they are stacked along the next axis, so that a rule with both
indices fills a parameter ``(N, E, ...)`` from N·E tensors, copy ``(i, j)`` at ``[i, j]``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Op:
    """One layout operation: its name as error messages show it, and its effect on a shape and
    on an array (which must agree: the tests check every op both ways)."""

    name: str
    shape: Callable[[Shape], Shape]
    apply: Callable[[np.ndarray], Any]  # one array, or (parts > 1) a sequence of them
    parts: int = 1  # how many arrays it makes (a split of a fused projection makes several)
    # the shape of each part, where the parts differ (`split_to`); `shape` is then the first's
    shapes: Callable[[Shape], list[Shape]] | None = None
    # for an op whose effect depends on the spec (`split_to`): the op for its rule's targets'
    # shapes there, each without the ×N group's leading axes (`Rule.fitted`)
    fit: Callable[[tuple[Shape, ...]], Op] | None = None

    def part_shapes(self, shape: Shape) -> list[Shape]:
        """The shape of each array it makes of one of ``shape``."""
        return self.shapes(shape) if self.shapes else [self.shape(shape)] * self.parts


def transpose(*axes: int) -> Op:
    """Axes permuted (reversed when none are given): PyTorch's Linear ``(out, in)`` weight is
    our fc's ``(in, out)``."""

    def perm(shape: Shape) -> tuple[int, ...]:
        return tuple(axes) if axes else tuple(reversed(range(len(shape))))

    return Op(
        "transpose" + (f"{tuple(axes)}" if axes else ""),
        lambda s: tuple(s[a] for a in perm(s)),
        lambda a: np.transpose(a, perm(a.shape)),
    )


def conv_weight() -> Op:
    """A PyTorch convolution's ``(out, in/g, *k)`` as our ``(*k, in/g, out)`` (OIHW → HWIO)."""

    def perm(n: int) -> tuple[int, ...]:
        return (*range(2, n), 1, 0)

    return Op(
        "OIHW→HWIO",
        lambda s: tuple(s[a] for a in perm(len(s))),
        lambda a: np.transpose(a, perm(a.ndim)),
    )


def tconv_weight() -> Op:
    """A PyTorch transposed convolution's ``(in, out/g, *k)`` as our ``(*k, in, out/g)``."""

    def perm(n: int) -> tuple[int, ...]:
        return (*range(2, n), 0, 1)

    return Op(
        "IOHW→HWIO",
        lambda s: tuple(s[a] for a in perm(len(s))),
        lambda a: np.transpose(a, perm(a.ndim)),
    )


def conv_as_fc() -> Op:
    """A patch embedding's convolution ``(D, C, P, P)`` as the fc on flattened patches
    ``(C·P·P, D)``: our `patches` box flattens each patch channels first, as the weight is."""

    def shape(s: Shape) -> Shape:
        return (int(np.prod(s[1:])), s[0])

    return Op("conv→fc", shape, lambda a: a.reshape(a.shape[0], -1).T)


def squeeze() -> Op:
    """Axes of size 1 dropped: ViT's class token is stored ``(1, 1, D)``, ours is ``(D,)``."""
    return Op(
        "squeeze",
        lambda s: tuple(d for d in s if d != 1),
        lambda a: a.reshape(tuple(d for d in a.shape if d != 1)),
    )


def split(parts: int, axis: int = 0) -> Op:
    """A fused tensor cut into equal parts along ``axis``: GPT-2's ``c_attn`` holds the query,
    key and value projections side by side."""

    def shape(s: Shape) -> Shape:
        ax = axis % len(s)
        if s[ax] % parts:
            raise ValueError(f"axis {axis} of size {s[ax]} does not split into {parts}")
        return (*s[:ax], s[ax] // parts, *s[ax + 1 :])

    def apply(a: np.ndarray) -> np.ndarray:
        return np.stack(np.split(a, parts, axis=axis))

    return Op(f"split into {parts} along axis {axis}", shape, apply, parts)


def split_to(parts: int, axis: int = 0, widths: tuple[int, ...] = ()) -> Op:
    """A fused tensor cut along ``axis`` into ``parts`` as wide as its rule's targets are in
    the spec: Phi-3's ``qkv_proj`` holds H·d query rows, then KV·d key rows, then KV·d value
    rows, uneven under grouped-query attention, and nothing in the tensor says where one part
    ends. A map writes it without ``widths``, as its rule's last op (the targets' shapes are
    the parts'); binding the map to a spec gives them (`Rule.fitted`, `fit.fit_widths`)."""

    def cut(s: Shape) -> list[Shape]:
        ax = axis % len(s)
        if not widths:
            raise ValueError(f"the widths of its {parts} parts are those of the spec's targets")
        if sum(widths) != s[ax]:
            sizes = " + ".join(map(str, widths))
            raise ValueError(f"axis {axis} of size {s[ax]} does not split into {sizes}")
        return [(*s[:ax], w, *s[ax + 1 :]) for w in widths]

    def apply(a: np.ndarray) -> list[np.ndarray]:
        cut(a.shape)
        return np.split(a, list(itertools.accumulate(widths))[:-1], axis=axis)

    def fit(targets: tuple[Shape, ...]) -> Op:
        return split_to(parts, axis, tuple(t[axis % len(t)] for t in targets))

    sizes = " + ".join(map(str, widths)) if widths else "the targets' widths"
    return Op(
        f"split into {sizes} along axis {axis}",
        lambda s: cut(s)[0],
        apply,
        parts,
        cut,
        None if widths else fit,
    )


def split_heads(parts: int, heads: int, axis: int = 0) -> Op:
    """A fused tensor whose ``axis`` holds, head after head, that head's ``parts`` slices
    (GPT-NeoX's ``query_key_value``: head 0's q, k, v, then head 1's...), cut into ``parts``
    tensors each holding its slice of every head, heads in order."""

    def shape(s: Shape) -> Shape:
        ax = axis % len(s)
        if s[ax] % (parts * heads):
            raise ValueError(f"axis {axis} of size {s[ax]} is not {heads} heads of {parts} parts")
        return (*s[:ax], s[ax] // parts, *s[ax + 1 :])

    def apply(a: np.ndarray) -> list[np.ndarray]:
        shape(a.shape)
        ax = axis % a.ndim
        grouped = a.reshape(*a.shape[:ax], heads, parts, -1, *a.shape[ax + 1 :])
        return [
            np.take(grouped, k, axis=ax + 1).reshape(*a.shape[:ax], -1, *a.shape[ax + 1 :])
            for k in range(parts)
        ]

    return Op(f"split {heads} heads' {parts} parts along axis {axis}", shape, apply, parts)


_INDEX = re.compile(r"\{(?P<step>\d+)?(?P<letter>[ij])(?:\+(?P<start>\d+))?(?:<(?P<end>\d+))?\}")
_TOKEN = re.compile(r"(\{\d*[ij](?:\+\d+)?(?:<\d+)?\}|\{\*\})")
LETTERS = ("i", "j")  # the indices a pattern may hold, outermost first
Index = tuple[int, ...]  # one copy of a rule: its (i,), (i, j) or (j,); () for a plain name


def pattern(source: str) -> re.Pattern[str]:
    """A name pattern as a regular expression: ``{i}`` and ``{j}`` (or ``{i+K}``...) are the
    groups named ``i`` and ``j``; ``{*}`` (only in a map's ``ignore``) matches anything."""
    text = ""
    for piece in _TOKEN.split(source):
        m = _INDEX.fullmatch(piece)
        if piece == "{*}":
            text += ".*"
        elif m:
            text += rf"(?P<{m['letter']}>\d+)"
        else:
            text += re.escape(piece)
    return re.compile(text + r"\Z")


@dataclass(frozen=True)
class Rule:
    """``source`` (a reference name pattern, or several: the names one family's checkpoints
    have had across library versions, tried in order) fills ``target`` (our parameter or state
    path; a tuple when an op splits the tensor), through ``ops`` in order."""

    source: str | tuple[str, ...]
    target: str | tuple[str, ...]
    ops: tuple[Op, ...] = ()

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source,) if isinstance(self.source, str) else self.source

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.target,) if isinstance(self.target, str) else self.target

    @cached_property
    def _axes(self) -> dict[str, tuple[int, int, int | None]]:
        """Each index letter of the first source name with its start, step and end (``None``
        for none), parsed once: `index` reads them for every name a checkpoint holds."""
        return {
            m["letter"]: (
                int(m["start"] or 0),
                int(m["step"] or 1),
                None if m["end"] is None else int(m["end"]),
            )
            for m in _INDEX.finditer(self.sources[0])
        }

    @property
    def letters(self) -> tuple[str, ...]:
        """The indices the rule's names hold, outermost first: one leading axis of the
        target each (``("i",)`` for a ×N group, ``("i", "j")`` for its experts)."""
        return tuple(x for x in LETTERS if x in self._axes)

    @property
    def indexed(self) -> bool:
        return bool(self.letters)

    @property
    def starts(self) -> dict[str, int]:
        """The reference index of each axis's first copy (``{i+1}`` → 1)."""
        return {x: start for x, (start, _, _) in self._axes.items()}

    @property
    def steps(self) -> dict[str, int]:
        """How far apart in the reference each axis's copies are (``{2i+1}`` → 2)."""
        return {x: step for x, (_, step, _) in self._axes.items()}

    @property
    def ends(self) -> dict[str, int]:
        """The reference index each axis stops before, where one is given (``{6i+1<30}``)."""
        return {x: end for x, (_, _, end) in self._axes.items() if end is not None}

    def index(self, match: re.Match[str]) -> Index | None:
        """The copy a matched name is (its indices counted from each start, in steps), or
        ``None`` for a name before a start, between steps or from an end on (another
        rule's)."""
        index = []
        for x in self.letters:
            start, step, end = self._axes[x]
            at = int(match.group(x))
            k, off = divmod(at - start, step)
            if k < 0 or off or (end is not None and at >= end):
                return None
            index.append(k)
        return tuple(index)

    def name(self, index: Index, source: str | None = None) -> str:
        """The reference name of copy ``index`` (``()`` for a rule without indices)."""
        source = source or self.sources[0]
        starts, steps = self.starts, self.steps
        at = dict(zip(self.letters, index, strict=True))
        return _INDEX.sub(
            lambda m: str(steps[m["letter"]] * at[m["letter"]] + starts[m["letter"]]), source
        )

    def out_shape(self, shape: Shape) -> Shape:
        return self.out_shapes(shape)[0]

    def out_shapes(self, shape: Shape) -> list[Shape]:
        """The shape of each target's array, from one reference tensor of ``shape``."""
        shapes = [shape]
        for op in self.ops:
            shapes = [t for s in shapes for t in op.part_shapes(s)]
        return shapes

    def fitted(self, targets: tuple[Shape, ...]) -> Rule:
        """The rule with each op that depends on the spec (`Op.fit`) made for its targets'
        shapes there (``targets``, one per target, without the ×N group's axes)."""
        if not any(op.fit for op in self.ops):
            return self
        ops = tuple(op.fit(targets) if op.fit else op for op in self.ops)
        return Rule(self.source, self.target, ops)

    def apply(self, array: np.ndarray) -> list[np.ndarray]:
        """The arrays of each target, from one reference tensor."""
        parts = [array]
        for op in self.ops:
            if op.parts > 1:
                parts = [p for a in parts for p in op.apply(a)]
            else:
                parts = [op.apply(a) for a in parts]
        return parts


@dataclass(frozen=True)
class FamilyMap:
    """One family's map: its rules, the prefixes its checkpoints may put before every name
    (``transformer.`` in a GPT2LMHeadModel, none in a GPT2Model), and the reference tensors it
    knows and leaves out on purpose (buffers, heads the spec does not have)."""

    name: str
    doc: str
    spec: str  # the spec of specs/ it is written for
    rules: tuple[Rule, ...]
    prefixes: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()  # patterns, as rules' sources
    # said after an import: what the user should know about the result (or, given the
    # compiled model, what to say about it, "" for nothing)
    note: str | Callable[[Any], str] = ""
    sizes: str = ""  # added to the hint when the checkpoint's sizes are not the spec's
    inner: str = "copies"  # what ``{j}`` counts, as errors say it ("experts")
    # our state paths (patterns, as ``ignore``'s) that the model computes rather than reads,
    # such as a mixture's load-balancing loss: written with their initial value
    computed: tuple[str, ...] = ()

    def ignored(self) -> list[re.Pattern[str]]:
        return [pattern(p) for p in self.ignore]

    def computes(self, path: str) -> bool:
        return any(pattern(p).match(path) for p in self.computed)

    def strip(self, name: str) -> str:
        """A checkpoint's name without the first of the map's prefixes it starts with."""
        for p in self.prefixes:
            if name.startswith(p):
                return name[len(p) :]
        return name

"""What a layer is, for every stage: the declaration every registry entry fills in.

One `Layer` holds everything the compiler needs to know about a kind of box: its name as the book
writes it, its hyper-parameters (types, defaults, docs), how they resolve into a frozen attribute
record (`Attrs`: pads, axis, permutation... computed once, shown by the ``shapes`` text form and
read by every backend), its shape rule, its trainable parameters (shape, initialiser, the logical
role of each axis), its non-trainable state, its multiply-accumulate count, its receptive-field
window, how the diagram draws it, its decomposition into primitive boxes when it is a composite,
and a NumPy reference of what it computes. Passes never test ``if op == "conv-2d"``; they ask
the entry. How a backend lowers an entry lives with the backend (`backends/jax/lowering/`), in a
table with one row per entry; a test checks that the table covers the registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from math import prod
from typing import Any, NoReturn, Union

from lbdl_dsl.core.symbolic import Expr

Shape = tuple[Expr, ...]
Sizes = tuple[Expr | int, ...]
"""A parameter's shape: sizes from the input (`Expr`) and from the hyper-parameters (a kernel's
whole numbers, kept as `int`)."""
REQUIRED = object()

Arrays = list[Any]
"""The input arrays of a NumPy reference (NumPy is imported lazily by `numpy()`: untyped here)."""
Weights = dict[str, Any]
"""One box's parameters or state in a NumPy reference: arrays by name, a nested dict per inner
box of a composite (``p["ln"]["scale"]``)."""


class ShapeFailure(Exception):
    """Raised by a shape rule; the checker adds the layer, its span and where inputs came from."""

    def __init__(self, message: str, hint: str | None = None, hparam: str | None = None) -> None:
        super().__init__(message)
        self.message, self.hint, self.hparam = message, hint, hparam


@dataclass(frozen=True)
class HP:
    """A hyper-parameter: ``kind`` is how the value is read and normalised.

    - ``size``: a whole number or a size expression (``C/4``); ``index`` the same, negative
      allowed (``i=-1``);
    - ``sizes``: one size or a tuple, normalised to one per spatial axis (``k=3`` → ``(3, 3)``);
    - ``padding``: like ``sizes``, or the word ``same``;
    - ``float``, ``bool``, ``choice`` (one of ``choices``), ``axis`` (an int, negative allowed),
      ``axes`` (a tuple of ints), ``name`` (a tensor name: weight sharing).
    """

    name: str
    kind: str
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple[str, ...] = ()
    # How figures write it. ``shown``: even at its default, because it says what the box does
    # (which token `take` keeps, a mixture's expert count); ``word``: the name figures write
    # instead of the short one (``experts=8`` for ``e``); ``default_from``: the default is
    # another hyper-parameter's value (a pool's stride is its window), so ``s=2`` beside
    # ``k=2`` says nothing.
    shown: bool = False
    word: str = ""
    default_from: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class FanIn:
    """Uniform with variance 1/fan (LeCun's scaling, Flax's default; PyTorch's uniform law)."""

    fan: Expr | int

    def describe(self) -> str:
        return f"uniform, std √(1/{self.fan})"


@dataclass(frozen=True)
class Std:
    """Uniform with standard deviation ``std`` (embeddings, learned positions: 0.02)."""

    std: float

    def describe(self) -> str:
        return f"uniform, std {self.std}"


@dataclass(frozen=True)
class Const:
    """Every value ``value``: zeros for biases, ones for scales, 1e-6 for a layer scale."""

    value: float

    def describe(self) -> str:
        return {0.0: "zeros", 1.0: "ones"}.get(self.value, f"constant {self.value}")


@dataclass(frozen=True)
class Normal:
    """A normal law of standard deviation ``std``; ``truncated``: cut at ±2σ (the draws
    beyond redrawn, as JAX's and TensorFlow's truncated normal), its std then ``std``·0.88."""

    std: float
    truncated: bool = False

    def describe(self) -> str:
        return f"{'truncated ' if self.truncated else ''}normal, std {self.std}"


Init = Union[FanIn, Std, Const, Normal]
"""How a parameter starts: one small family; the JAX runtime's `init_arrays` interprets it."""

ZEROS, ONES = Const(0.0), Const(1.0)

ROLES: dict[str, str] = {
    "in": "the input features of a generic fc or convolution",
    "out": "the output features of a generic fc or convolution",
    "embed": "the model's width D (a transformer's residual stream, an embedding's dimension)",
    "heads": "query heads × their dimension (attention projections)",
    "kv": "key/value heads × their dimension (attention projections)",
    "mlp": "a feed-forward block's hidden width",
    "vocab": "the rows of a token embedding",
    "positions": "the rows of a learned position table",
    "kernel": "a spatial axis of a convolution kernel",
    "norm": "the features a normalisation scales and shifts",
    "hidden": "a recurrent layer's hidden state",
    "experts": "the E experts of a mixture, stacked",
    "layers": "the copies of a ×N group, stacked (added by the parameter table, not by entries)",
    "cached": "a decoding cache's positions and per-head features (kept whole on each device)",
}
"""The logical role of each parameter axis: what sharding rules map to mesh axes."""


@dataclass(frozen=True)
class PSpec:
    """A trainable parameter or a state array: its shape, how it starts, its axes' roles."""

    shape: Sizes
    init: Init
    roles: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.roles) != len(self.shape) or not set(self.roles) <= ROLES.keys():
            raise ValueError(f"roles {self.roles} do not fit the shape {self.shape}")


@dataclass
class Ctx:
    """What a shape rule, a parameter rule or a cost rule sees of one box."""

    op: str
    ins: list[Shape]
    hp: dict[str, Any]
    dtypes: list[str] = field(default_factory=list)
    vocab: list[Expr | None] = field(default_factory=list)
    out: Shape | None = None
    a: Any = None  # the resolved `Attrs`, set before the shape rule runs

    @property
    def x(self) -> Shape:
        return self.ins[0]

    @property
    def y(self) -> Shape:
        """The output shape, for the parameter and cost rules (they run after the shape rule)."""
        if self.out is None:
            raise RuntimeError(f"`{self.op}`: the output shape is read before the shape rule ran")
        return self.out

    def fail(self, message: str, hint: str | None = None, hparam: str | None = None) -> NoReturn:
        raise ShapeFailure(message, hint, hparam)

    def rank(self, *ranks: int, what: str | None = None, i: int = 0) -> Shape:
        """Input ``i`` if its rank is one of ``ranks``; else a failure saying what was needed."""
        shape = self.ins[i]
        if len(shape) not in ranks:
            need = what or " or ".join(f"{r}-axis" for r in ranks)
            self.fail(f"`{self.op}` needs a {need} input, got {fmt_shape(shape)}")
        return shape

    def const(self, name: str) -> int:
        """A hyper-parameter that must be a known whole number here."""
        value = self.hp[name]
        v = value.as_int() if isinstance(value, Expr) else value
        if not isinstance(v, int) or isinstance(v, bool):
            self.fail(f"`{name}` must be a known whole number here, got {value}", hparam=name)
        return v


@dataclass(frozen=True)
class Attrs:
    """A box's hyper-parameters resolved once: what the shape rule, the counts and every
    backend read. Entries that derive values (pads, an axis made positive, a permutation)
    declare a frozen dataclass of their own; the others get `Given`, the hyper-parameters as
    written or defaulted. Reading a field that is not there is an AttributeError, so a
    misspelt attribute fails its entry's tests. (The base is a frozen dataclass without fields,
    so that every record is one: a record declared without ``frozen=True`` fails at import.)"""

    def items(self) -> tuple[tuple[str, Any], ...]:
        return tuple((f.name, getattr(self, f.name)) for f in fields(self))

    def text(self) -> str:
        """``k=(3, 3) pads=((1, 1), (1, 1))``: the record in the ``shapes`` text form."""
        return " ".join(f"{k}={_attr_text(v)}" for k, v in self.items())


@dataclass(frozen=True)
class Given(Attrs):
    """The hyper-parameters as the box has them, by name (entries without derived values)."""

    values: tuple[tuple[str, Any], ...] = ()

    def __getattr__(self, name: str) -> Any:
        for key, value in object.__getattribute__(self, "values"):
            if key == name:
                return value
        raise AttributeError(f"no attribute `{name}`")

    def items(self) -> tuple[tuple[str, Any], ...]:
        return self.values


@dataclass(frozen=True)
class AxisAttrs(Attrs):
    """One axis of each sample, counted from 0 (a negative axis resolved against the rank)."""

    axis: int


def resolve_axis(c: Ctx, name: str = "axis") -> int:
    """The hyper-parameter ``name`` as an axis of the input, from 0; a failure if outside."""
    a: int = c.hp[name]  # an `axis` hyper-parameter: the parser made it an int
    if not -len(c.x) <= a < len(c.x):
        c.fail(f"axis {a} is out of range for {len(c.x)} axes", hparam=name)
    return a % len(c.x)


class Numbers:
    """An `Attrs` record with every known size as a Python number: what a NumPy reference
    reads (``reference(xs, params, state, Numbers(attrs))``)."""

    def __init__(self, attrs: Attrs | None) -> None:
        self._attrs = attrs

    def __getattr__(self, name: str) -> Any:
        return _number(getattr(self._attrs, name))


def _number(value: Any) -> Any:
    if isinstance(value, Expr) and value.is_const:
        v = value.const_value
        return int(v) if v.denominator == 1 else float(v)
    if isinstance(value, tuple):
        return tuple(_number(v) for v in value)
    return value


def _attr_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return (
            "(" + ", ".join(_attr_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
        )
    return str(value)


@dataclass(frozen=True)
class Step:
    """How a box decodes a sequence a few tokens at a time (prefill, then one token per step),
    with axis 0 of each input the sequence's positions: what `lbdl generate` asks of an entry.

    - ``token``: each position alone (fc, norms over features, activations, a mixture of
      experts routing each token): a step computes what the whole sequence would, row by row;
    - ``offset``: like ``token`` once told the position of the step's first token (positional
      encodings); ``limit`` is the most positions it has (a learned table's rows), if any;
    - ``cache``: keeps arrays from step to step, ``cache(S)`` per sample for a context of ``S``
      positions (a causal attention's keys and values, a recurrent layer's carry);
    - ``""``: cannot be decoded so; ``why`` says why, for the error.
    """

    kind: str
    why: str = ""
    cache: Callable[[Expr], dict[str, PSpec]] | None = None
    limit: Expr | None = None


TOKEN = Step("token")


def _no_step(c: Ctx) -> Step:
    return Step("", f"`{c.op}` is not known to act on each position alone")


def per_token_axis(c: Ctx, axis: int) -> Step:
    """`TOKEN` when the box works on an axis other than the sequence's (axis 0)."""
    if axis == 0:
        return Step("", f"`{c.op}` works along the sequence's axis")
    return TOKEN


@dataclass(frozen=True)
class Layer:
    """One registry entry; see the module docstring."""

    name: str
    doc: str
    category: str  # the section of docs/layers.md
    hparams: tuple[HP, ...] = ()
    resolve: Callable[[Ctx], Attrs] | None = None  # None: `Given`, the hyper-parameters
    shape: Callable[[Ctx], Shape] = lambda c: c.x
    params: Callable[[Ctx], dict[str, PSpec]] = lambda c: {}
    state: Callable[[Ctx], dict[str, PSpec]] = lambda c: {}
    macs: Callable[[Ctx], Expr | int] = lambda c: 0
    arity: tuple[int, int] = (1, 1)  # min and max number of input tensors; (0, 0): a source
    aliases: tuple[str, ...] = ()
    from_annotation: tuple[tuple[str, int | None], ...] = ()  # (hyper-parameter, output axis)
    layout: str = "cf"  # "cf": spec layout; "cl": channels-last spatial; "any": elementwise;
    # "attrs": the resolved record's `layout` field, for a box whose axis is chosen per use
    out_layout: str | None = None  # the output's layout when it differs from `layout`
    spatial: int = 0  # spatial axes, for `sizes` hyper-parameters (k=3 → (3, 3) when 2)
    inside: Callable[[Mapping[str, Any], tuple[int, ...]], str] | None = None  # a composite
    # a mixture of experts: one expert as block text on a token's vector, for drawing it open
    # (from the resolved record and the token's width); the box itself lowers as one primitive
    expert: Callable[[Any, Expr], str] | None = None
    rf: bool = False  # a receptive field passes through (the map keeps its spatial axes)
    window: Callable[[Ctx], tuple[int, int, int] | None] = lambda c: None  # k, s, d for RF
    ties: tuple[tuple[str, dict[str, tuple[str, bool]]], ...] = ()  # (op, {mine: (theirs, T)})
    example: tuple[str, str] = ("", "")  # (input shape, box line) for docs and tests
    cases: tuple[tuple[str, str], ...] = ()  # more (input, box) pairs for the reference tests
    stochastic: bool = False  # needs a key in training (dropout)
    glyph: str | None = None  # drawn as this symbol in a circle (`+`), not as a box
    # drawn tall like a composite, for the structure inside a primitive (Fig. 5.6's mha: the
    # heads, their projections and the attention operator; Fig. 4.13 is its inside)
    tall: bool = False
    ident: str | None = None  # the name in node ids and code, when `name` is not one (`+`)
    keeps_dtype: bool = False  # its output has its input's type (tokens stay tokens)
    positive: bool = False  # defined for positive inputs only (log, sqrt): tests feed |x| + ½
    out_type: Callable[[Ctx], tuple[str, Expr | None]] | None = None  # (type, range) it makes
    reference: Callable[..., Any] | None = None  # NumPy: (xs, params, state, attrs) -> y
    # The named points a figure draws the box's inputs into, left to right, each with the
    # input it reads (that input if the box has it, else its first): mha's Q from the first
    # input, K and V from the second (cross-attention's Z) or the first again (§ 4.8, Fig. 5.6)
    ports: tuple[tuple[str, int], ...] = ()
    step: Callable[[Ctx], Step] = _no_step  # decoding a token at a time (`Step`)
    # values per sample its backward pass keeps inside it besides its output (a mixture's
    # dispatch buffers, attention's Q, K and V), from its attrs, its inputs' shapes and
    # whether it runs inside a ×N group's loop, which keeps only products (`keep_products`):
    # the memory checker adds them
    kept: Callable[[Any, tuple[tuple[Expr, ...], ...], bool], Expr] | None = None
    # the part of `kept` along no inner width, which tensor parallelism does not split (a
    # mixture's router probabilities and dispatch buffers); the rest splits like the box's
    # weights' inner width (attention's heads, the experts' hidden width)
    kept_whole: Callable[[Any, tuple[tuple[Expr, ...], ...], bool], Expr] | None = None

    def hparam(self, name: str) -> HP | None:
        by_name: dict[str, HP] | None = self.__dict__.get("_hparams_by_name")
        if by_name is None:  # made on first use: the checker asks for every box
            by_name = {}
            for h in self.hparams:
                by_name.setdefault(h.name, h)
            object.__setattr__(self, "_hparams_by_name", by_name)
        return by_name.get(name)

    @property
    def source(self) -> bool:
        """Reads no tensor: a constant the compiler computes from sizes (a sin-cos table)."""
        return self.arity == (0, 0)

    @property
    def composite(self) -> bool:
        """Drawn as one tall box that opens, as the book draws self-att and ffw."""
        return self.inside is not None

    def attrs(self, ctx: Ctx) -> Attrs:
        return self.resolve(ctx) if self.resolve is not None else Given(tuple(ctx.hp.items()))


def example_model(input_shape: str, box_line: str, output: str | None = None) -> str:
    """The smallest model holding one example box: its input ``X`` of ``input_shape``, the
    tensors its box names in parentheses declared before it with the same shape, the box.

    ``input_shape`` may declare inputs of their own after semicolons (``5×3; I: 4 int<5>``,
    for an index), and is empty for a constant, which reads no input: the model then passes
    an input ``X`` through as an output of its own, as a model needs an input.
    """
    first, *declared = [part.strip() for part in input_shape.split(";")]
    named = {d.split(":")[0].strip() for d in declared}
    match = re.match(r"\s*[^\s(]+(?:\s+relu)?\(([^)]*)\)", box_line)
    extra = [n.strip() for n in match.group(1).split(",")] if match else []
    lines = ["model example:"]
    lines += [f"  input {d}" for d in declared]
    lines += [f"  input {name}: {first}" for name in extra if name not in named | {"X"}]
    if first:
        lines += [f"  input X: {first}", f"  {box_line}"]
    else:  # a model has an input; a constant reads none, so X only passes through
        lines += ["  input X: 1", "  output X", f"  {box_line}"]
        output = output or "Y"
    lines += [f"  output {output}"] if output else []
    return "\n".join(lines) + "\n"


def numpy() -> Any:
    """NumPy, for the references: imported when a reference runs, so `--check` never pays."""
    import numpy as np

    return np


# -- helpers shared by the rules ---------------------------------------------------------------


def fmt_shape(shape: Sequence[Expr | int]) -> str:
    return "×".join(str(d) for d in shape) if shape else "a scalar"


def numel(shape: Sequence[Expr | int]) -> Expr:
    out = Expr.lift(1)
    for d in shape:
        out = out * d
    return out


def conv_out(size: Expr, k: int, s: int, p: tuple[int, int], d: int) -> Expr:
    """Every framework's output size: floor((n + pads − d(k−1) − 1)/s) + 1."""
    return (size + p[0] + p[1] - d * (k - 1) - 1).floordiv(s) + 1


def tconv_out(size: Expr, k: int, s: int, p: int, op: int, d: int) -> Expr:
    return (size - 1) * s - 2 * p + d * (k - 1) + op + 1


def positive(ctx: Ctx, shape: Shape) -> Shape:
    """Refuse sizes that are known to be zero or negative."""
    for d in shape:
        v = d.as_int() if isinstance(d, Expr) else d
        if v is not None and v <= 0:
            ctx.fail(
                f"`{ctx.op}` would produce the shape {fmt_shape(shape)}: sizes must be positive"
            )
    return shape


def total_size(specs: dict[str, PSpec]) -> Expr:
    out = Expr.lift(0)
    for spec in specs.values():
        out = out + numel(spec.shape)
    return out


def ints(values: Sequence[Any]) -> tuple[int, ...]:
    out = []
    for v in values:
        iv = v.as_int() if isinstance(v, Expr) else v
        if not isinstance(iv, int):
            raise ShapeFailure(f"expected a whole number, got {v}")
        out.append(iv)
    return tuple(out)


def prod_int(values: Sequence[int]) -> int:
    return prod(values)

"""What `Model.apply` checks before anything is traced: the arguments a person passes by hand.

A wrong input shape would otherwise surface as an XLA error about a convolution's dimension
numbers, channels-last images would run (wrongly) when the sizes happen to fit, and a token id
out of range would read a row of another token or NaN. Each check names the argument, what the
model expects and what it got, with a guess at the usual cause ("channels last?"). The checks
read only shapes and dtypes, so they hold for tracers too and cost nothing per call once a
signature has passed (`Model` keeps the ones it has seen); only the token range needs values,
and is checked when the values are there (not under ``jax.jit``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import ArgumentError
from lbdl_dsl.core.symbolic import Expr


@dataclass(frozen=True)
class InputSpec:
    """One input as the spec declares it: per-sample dims (ints or symbols), kind, range."""

    name: str
    dims: tuple[Expr, ...]
    kind: str  # "float", "int" (tokens) or "bool"
    vocab: int | None  # tokens lie in [0, vocab)

    def shown(self) -> str:
        return "(B, " + ", ".join(str(d) for d in self.dims) + ")" if self.dims else "(B,)"


def _guess(spec: InputSpec, shape: tuple[int | None, ...]) -> str | None:
    """The usual reason a shape is wrong, when the numbers say it."""
    want = [d.as_int() for d in spec.dims]
    if any(w is None for w in want):
        return None
    if list(shape) == want:
        return "no batch axis? add one: x[None]"
    if len(shape) == len(want) + 1:
        per = list(shape[1:])
        if len(want) >= 2 and per == want[1:] + want[:1]:
            return "channels last? the spec's layout is channels first: jnp.moveaxis(x, -1, 1)"
        if Counter(per) == Counter(want):
            return "the sizes are right but not in the spec's order (channels first)"
    if len(shape) == len(want) + 2 and list(shape[2:]) == want:
        return "an extra axis? the batch is the only axis before the spec's"
    return None


def check_inputs(model: str, specs: Sequence[InputSpec], arrays: Sequence[Any]) -> None:
    """Shapes and dtypes of a batch of inputs; raises `ArgumentError` naming the input."""
    if len(arrays) != len(specs):
        names = ", ".join(s.name for s in specs)
        raise ArgumentError(
            f"model `{model}` takes {len(specs)} input{'s' if len(specs) != 1 else ''} "
            f"({names}), got {len(arrays)}",
            hint=f"apply(params, state, {names}, train=..., key=...)",
        )
    bound: dict[str, int] = {}
    batch = None
    for spec, x in zip(specs, arrays, strict=True):
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None:
            raise ArgumentError(
                f"input {spec.name} must be an array, got {type(x).__name__}",
                hint="pass a jax.Array or a numpy array, with a leading batch axis",
            )
        shape = tuple(_concrete(s) for s in shape)
        if not _fits(spec, shape, bound):
            raise ArgumentError(
                f"input {spec.name} expects {spec.shown()}, channels first; got {shape}",
                hint=_guess(spec, shape),
            )
        if batch is None:
            batch = shape[0]
        elif None not in (shape[0], batch) and shape[0] != batch:
            raise ArgumentError(
                f"input {spec.name} has a batch of {shape[0]}, the one before {batch}",
                hint="every input of a call has the same batch size",
            )
        _check_dtype(spec, np.dtype(dtype))


def _concrete(size: Any) -> int | None:
    """A dimension's value, or None for a symbolic one (`jax.export`'s batch ``b``), which
    only the trace itself can check."""
    try:
        return int(size)
    except Exception:  # noqa: BLE001 - jax's InconclusiveDimensionOperation and kin
        return None


def _fits(spec: InputSpec, shape: tuple[int | None, ...], bound: dict[str, int]) -> bool:
    """Whether a shape is (B, *dims), binding the spec's symbols (T...) to what it has."""
    if len(shape) != len(spec.dims) + 1 or (shape[0] is not None and shape[0] < 1):
        return False
    for dim, size in zip(spec.dims, shape[1:], strict=True):
        if size is None:
            continue
        value = dim.subs({k: Expr.lift(v) for k, v in bound.items()})
        if value.is_const:
            if value.as_int() != size:
                return False
            continue
        symbols = sorted(value.free_symbols)
        if len(symbols) == 1 and value == Expr({((symbols[0], 1),): Fraction(1)}):
            bound[symbols[0]] = size  # a size the spec leaves free: whatever the input has
        if size < 1:
            return False
    return True


def _check_dtype(spec: InputSpec, dtype: np.dtype) -> None:
    kind = dtype.kind  # f (and bfloat16's V), i/u, b
    is_float = kind == "f" or dtype.name == "bfloat16"
    if spec.kind == "float" and not is_float:
        raise ArgumentError(
            f"input {spec.name} holds floats, got {dtype.name}",
            hint="convert it: x.astype(jnp.float32)",
        )
    if spec.kind == "int" and kind not in "iu":
        raise ArgumentError(
            f"input {spec.name} holds token ids (integers in [0, {spec.vocab})), got {dtype.name}",
            hint="convert it: x.astype(jnp.int32)",
        )
    if spec.kind == "bool" and kind != "b":
        raise ArgumentError(f"input {spec.name} holds booleans, got {dtype.name}")


def check_tokens(specs: Sequence[InputSpec], arrays: Sequence[Any]) -> None:
    """Token ids inside [0, vocab), where the values are there to read (not under jit)."""
    import jax

    for spec, x in zip(specs, arrays, strict=True):
        if spec.kind != "int" or spec.vocab is None or isinstance(x, jax.core.Tracer):
            continue
        if getattr(x, "size", 0) == 0:
            continue
        try:
            lo, hi = int(x.min()), int(x.max())
        except jax.errors.JAXTypeError:  # traced after all (inside a transformation): no values
            continue
        if lo < 0 or hi >= spec.vocab:
            raise ArgumentError(
                f"input {spec.name} holds token ids in [0, {spec.vocab}), "
                f"got ids from {lo} to {hi}",
                hint="is it tokenised with another vocabulary? (under jax.jit, an id out "
                "of range gives NaN rows)",
            )


def check_tree(
    tree: Any, table: Mapping[str, Any], what: str, flatten: Callable[[Any], dict[str, Any]]
) -> None:
    """Params (or state) with exactly the paths and shapes of the module's table."""
    from lbdl_dsl.backends.jax.weights import mismatches

    if not isinstance(tree, Mapping):
        if not table and tree in (None, (), []):
            return
        raise ArgumentError(
            f"{what} must be the nested dictionary init returns, got {type(tree).__name__}",
            hint="params, state = model.init(jax.random.key(0))",
        )
    problems = mismatches(flatten(tree), table, "parameter" if what == "params" else "state")
    if problems:
        more = [f"... and {len(problems) - 8} more"] if len(problems) > 8 else []
        raise ArgumentError(
            f"these {what} do not fit the model:\n  " + "\n  ".join(problems[:8] + more),
            hint="were they made by another model's init, or with other sizes (--set)?",
        )

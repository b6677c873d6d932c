"""Memory per device of a sharded model, in bytes: what training keeps on each accelerator.

A pass after `sharding.resolve`, pure arithmetic on the checked program, so ``--check`` answers
without JAX. Per device, for each box and in total:

- parameters: each array's float32 bytes over the number of pieces its placement cuts it into;
- gradients: the same again (they have the parameters' shapes and placement);
- optimiser state: the optimiser's moments, each shaped and placed like the parameters (Adam:
  2, mu and nu), plus its int32 step counters (Adam: 1), replicated;
- model state (batchnorm's running averages), placed like parameters;
- activations: what the backward pass needs, for the per-device batch ``B`` (the global batch
  over the mesh axes that split it), float32: every box's output, and what a composite box keeps
  inside (its registry entry's ``kept``: attention's Q, K and V, a feed-forward block's hidden
  layer), split like its inner width (tensor parallelism splits it); symbolic in ``B`` and in
  the spec's free sizes (a sequence's ``T``);
- inputs: the batch's own bytes on the device (int32 tokens, float32 values, one-byte masks).

Parameters + optimiser state + model state + inputs are the arguments of a training step
``step(params, state, opt_state, inputs)``: XLA's ``compiled.memory_analysis()`` reports the
same ``argument_size_in_bytes`` to the byte (a test checks it on 4 devices, replicated and
FSDP). Activations are an estimate; docs/scaling.md says how close it comes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from lbdl_dsl.compiler.instance import Checked, Inst
from lbdl_dsl.compiler.sharding import Layout, arrays
from lbdl_dsl.core.layers import Ctx, lookup
from lbdl_dsl.core.symbolic import Expr, sym, total

FLOAT = 4  # bytes of a float32 parameter, gradient, moment or activation
COUNTER = 4  # bytes of an int32 step counter
DTYPE_BYTES = {"float": 4, "int": 4, "bool": 1}
BATCH = "B"  # the symbol of the per-device batch

OPTIMIZERS: dict[str, tuple[int, int, str]] = {
    "adam": (2, 1, "Adam ×2"),
    "adamw": (2, 1, "AdamW ×2"),
    "lion": (1, 1, "Lion ×1"),
    "momentum": (1, 0, "momentum ×1"),
    "rmsprop": (1, 0, "RMSprop ×1"),
    "sgd": (0, 0, "SGD, none"),
}
"""Name → (moments shaped like the parameters, int32 counters, how the report names it), as
optax builds each with a constant learning rate (a schedule adds one counter)."""


@dataclass(frozen=True)
class Bytes:
    """Bytes on one device; each figure an `Expr` (symbolic in B, T... where the spec is)."""

    params: Expr
    grads: Expr
    optimizer: Expr
    state: Expr
    activations: Expr
    inputs: Expr

    @property
    def arguments(self) -> Expr:
        """What a training step is given: XLA's argument bytes of ``step(params, state,
        opt_state, inputs)``."""
        return self.params + self.optimizer + self.state + self.inputs

    @property
    def total(self) -> Expr:
        return self.arguments + self.grads + self.activations

    def items(self) -> Iterator[tuple[str, Expr]]:
        yield from (
            ("params", self.params),
            ("grads", self.grads),
            ("optimizer", self.optimizer),
            ("state", self.state),
            ("activations", self.activations),
            ("inputs", self.inputs),
            ("total", self.total),
        )


@dataclass(frozen=True)
class BoxBytes:
    """One row of the summary (a box at some depth) and its bytes on one device."""

    path: str
    bytes: Bytes


INNER_ROLES = frozenset({"heads", "kv", "mlp", "hidden"})
"""The roles of a composite box's inner width: where what it keeps inside lives, so that tensor
parallelism, which splits these axes of its weights, splits what it keeps the same way (a mesh
axis that splits the batch does not: FSDP gathers each weight whole before using it)."""


def inner_pieces(checked: Checked, layout: Layout) -> dict[int, int]:
    """Per instance (by id), how many pieces its inner width is cut into."""
    out: dict[int, int] = {}
    for arr in arrays(checked.root):
        placement = layout.arrays[arr.path]
        axes = {
            a
            for role, axis in zip(placement.roles, placement.spec)
            if role in INNER_ROLES and axis is not None
            for a in ((axis,) if isinstance(axis, str) else axis)
            if a not in layout.batch  # FSDP gathers the weights: the batch was split already
        }
        out[id(arr.inst)] = max(out.get(id(arr.inst), 1), layout.mesh.size(tuple(sorted(axes))))
    return out


def kept(inst: Inst, memo: dict[int, Expr], inner: dict[int, int]) -> Expr:
    """Values kept for the backward pass, per sample and device, by a box and all inside it:
    its output, and what a composite keeps inside, over the pieces of its inner width."""
    key = id(inst)
    if key in memo:
        return memo[key]
    out = Expr()
    if inst.kind == "layer" and inst.output is not None:
        shapes = [t.shape for t in inst.inputs]
        ctx = Ctx(inst.node.op, shapes, dict(inst.hp), out=inst.output.shape)
        layer = lookup(inst.node.op)
        inside = Expr.lift(layer.kept(ctx) if layer else 0) / inner.get(key, 1)
        out = _numel(inst.output.shape) + inside
    for _, child, copies in inst.children():
        out = out + kept(child, memo, inner) * copies
    memo[key] = out
    return out


def per_array(layout: Layout) -> dict[str, Expr]:
    """Each array's bytes on one device: float32, over the pieces of its placement."""
    return {path: p.numel * FLOAT / p.pieces for path, p in layout.arrays.items()}


def _box(
    row: tuple[str, Inst, Expr],
    layout: Layout,
    arrays: dict[str, Expr],
    moments: int,
    b: Expr,
    memo: dict[int, Expr],
    inner: dict[int, int],
) -> Bytes:
    """A row's bytes, all copies counted: a ×N group's arrays are stacked, one array each."""
    path, inst, copies = row
    prefix = path + "/"
    params = total(b for k, b in arrays.items() if k.startswith(prefix) and _kind(layout, k))
    state = total(b for k, b in arrays.items() if k.startswith(prefix) and not _kind(layout, k))
    acts = kept(inst, memo, inner) * copies * FLOAT * b
    return Bytes(params, params, params * moments, state, acts, Expr())


def _kind(layout: Layout, path: str) -> bool:
    return layout.arrays[path].kind == "param"


def per_device(
    checked: Checked,
    layout: Layout,
    rows: list[tuple[str, Inst, Expr]],
    *,
    optimizer: str = "adam",
    batch: Expr | int | None = None,
) -> tuple[Bytes, list[BoxBytes]]:
    """The whole model's bytes on one device, and each row's.

    ``rows`` are (path, instance, copies): a box inside a ×N group stands for all its copies.

    ``batch`` is the per-device batch, the symbol ``B`` when not given."""
    moments, counters, _ = OPTIMIZERS[optimizer]
    b = sym(BATCH) if batch is None else Expr.lift(batch)
    arrays = per_array(layout)
    params = total(v for k, v in arrays.items() if _kind(layout, k))
    state = total(v for k, v in arrays.items() if not _kind(layout, k))
    memo: dict[int, Expr] = {}
    inner = inner_pieces(checked, layout)
    acts = total(kept(inst, memo, inner) for inst in checked.root) * FLOAT * b
    inputs = total(
        _numel(t.shape) * DTYPE_BYTES.get(t.dtype, FLOAT) * b for t in checked.inputs.values()
    )
    whole = Bytes(params, params, params * moments + counters * COUNTER, state, acts, inputs)
    boxes = [BoxBytes(row[0], _box(row, layout, arrays, moments, b, memo, inner)) for row in rows]
    return whole, boxes


def _numel(shape: tuple[Expr, ...]) -> Expr:
    out = Expr.lift(1)
    for d in shape:
        out = out * d
    return out

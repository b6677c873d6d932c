"""Memory per device of a sharded model, in bytes: what training keeps on each accelerator.

A pass after `sharding.resolve`, pure arithmetic on the checked program, so ``--check`` answers
without JAX. Per device, for each box and in total:

- parameters: each array's float32 bytes over the number of pieces its placement cuts it into;
- gradients: the same again (they have the parameters' shapes and placement);
- optimiser state: the optimiser's moments, each shaped and placed like the parameters (Adam:
  2, mu and nu), plus its int32 step counters (Adam: 1), replicated;
- model state (batchnorm's running averages), placed like parameters;
- activations: what the backward pass needs, for the per-device batch ``B`` (the global batch
  over the mesh axes that split it), float32: every primitive box's output (a composite's are
  those of its inside: a feed-forward block's hidden layer is its ``fc1``'s output) and the Q,
  K and V attention keeps; inside a ×N group, whose copies compute the rest again in the
  backward pass (the runtime's ``keep_products``, stacked or kept apart alike), only matrix
  products' and convolutions' outputs, Q, K and V, and each copy's input. Split like their
  inner width where tensor parallelism splits it; symbolic in ``B`` and in the spec's free
  sizes (a sequence's ``T``);
- inputs: the batch's own bytes on the device (int32 tokens, float32 values, one-byte masks);
- recomputed: what the backward pass of a ×N group holds besides, while it computes one copy's
  forward pass again (all that copy's values but the products its loop kept), the largest
  copy once;
- backward: the gradients the backward pass holds at once going back through a box, that of
  its output and that of its input (the output of the box before it), or those of the values
  the box keeps inside where they are larger, the largest box once;
- gathered: under fsdp, the largest weight gathered whole for its layer, and its gradient
  whole before it is summed and split, less the device's own piece of each.

Parameters + optimiser state + model state + inputs are the arguments of a training step
``step(params, state, opt_state, inputs)``: XLA's ``compiled.memory_analysis()`` reports the
same ``argument_size_in_bytes`` to the byte (a test checks it on 4 devices, replicated and
FSDP). Activations are an estimate; docs/scaling.md says how close it comes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lbdl_dsl.compiler import paths
from lbdl_dsl.compiler.instance import Checked, GroupInst, Inst, LayerInst, ScanInst
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.symbolic import Expr, sym, total

if TYPE_CHECKING:  # the command line reads `OPTIMIZERS` on every run, a layout only with a mesh
    from lbdl_dsl.compiler.sharding import Layout

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

Memo = dict[tuple[int, bool], Expr]
"""`kept` per (instance, inside a loop), so that a block used many times is counted once."""


@dataclass(frozen=True)
class Bytes:
    """Bytes on one device; each figure an `Expr` (symbolic in B, T... where the spec is)."""

    params: Expr
    grads: Expr
    optimizer: Expr
    state: Expr
    activations: Expr
    inputs: Expr
    recomputed: Expr = Expr()  # one copy's values its checkpointed backward pass makes again
    backward: Expr = Expr()  # the gradients of one box's output and input, held at once
    gathered: Expr = Expr()  # fsdp: the largest weight, and its gradient, whole on the device

    @property
    def arguments(self) -> Expr:
        """What a training step is given: XLA's argument bytes of ``step(params, state,
        opt_state, inputs)``."""
        return self.params + self.optimizer + self.state + self.inputs

    @property
    def total(self) -> Expr:
        held = self.recomputed + self.backward + self.gathered
        return self.arguments + self.grads + self.activations + held

    def items(self) -> Iterator[tuple[str, Expr]]:
        yield from (
            ("params", self.params),
            ("grads", self.grads),
            ("optimizer", self.optimizer),
            ("state", self.state),
            ("activations", self.activations),
            ("inputs", self.inputs),
            ("recomputed", self.recomputed),
            ("backward", self.backward),
            ("gathered", self.gathered),
            ("total", self.total),
        )


@dataclass(frozen=True)
class BoxBytes:
    """One row of the summary (a box at some depth) and its bytes on one device."""

    path: str
    bytes: Bytes


INNER_ROLES = frozenset({"heads", "kv", "mlp", "hidden"})
"""The roles of an inner width (attention's heads, a feed-forward pair's hidden width): tensor
parallelism splits these axes of the weights, and with them the values computed along them (a
mesh axis that splits the batch does not split them again: FSDP gathers each weight whole
before using it, and the batch was split already)."""


SPLIT_ROLES = INNER_ROLES | {"out"}
"""The roles of a weight's last axis whose split splits the box's output with it: an inner
width, or the output width itself where a rule splits it (a convolution's channels under the
`out=tensor` rule `lbdl check` suggests for a CNN under tp: each device computes its share of
the channels)."""


@dataclass(frozen=True)
class _Splits:
    """How many pieces tensor parallelism cuts a box's output, and what it keeps inside, into."""

    output: dict[int, int]  # by id of the box: its weight `w`'s last axis is an inner width
    inside: dict[int, int]  # by id of the box: another array's last axis is an inner width


def _splits(checked: Checked, layout: Layout) -> _Splits:
    from lbdl_dsl.compiler.sharding import axis_names

    output: dict[int, int] = {}
    inside: dict[int, int] = {}
    for arr in paths.arrays(checked.root):
        name = arr.path.rsplit("/", 1)[1]
        target = output if name == "w" else inside  # a weight matrix, or any other array
        placement = layout.arrays[arr.path]
        if not placement.roles:  # a scalar (a mixture's auxiliary loss weight)
            continue
        last = placement.spec[-1] if placement.spec else None
        axes = tuple(a for a in axis_names(last) if a not in layout.batch)
        if placement.roles[-1] in SPLIT_ROLES and axes:
            target[id(arr.owner)] = layout.mesh.size(axes)
    return _Splits(output, inside)


def _held(inst: Inst, looped: bool, splits: _Splits) -> Expr:
    """What a layer's own entry says its backward pass keeps inside it, per sample and device
    (`Layer.kept`: attention's Q, K and V, a mixture's dispatch buffers, a state-space scan's
    states): over the pieces tensor parallelism cuts its weights' inner width into, but for
    what lies along no inner width (`Layer.kept_whole`)."""
    if not isinstance(inst, LayerInst):
        return Expr()
    layer = lookup(inst.node.op)
    if layer is None or layer.kept is None or not inst.inputs or inst.attrs is None:
        return Expr()
    shapes = tuple(tuple(t.shape) for t in inst.inputs)
    whole = layer.kept_whole(inst.attrs, shapes, looped) if layer.kept_whole else Expr()
    inner = layer.kept(inst.attrs, shapes, looped) - whole
    return whole + inner / splits.inside.get(id(inst), 1)


def _product(inst: Inst) -> bool:
    """A box whose output is a matrix product or a convolution (it has a weight matrix): what
    a ×N group's loop keeps for its backward pass (the runtime's ``keep_products``)."""
    return any(len(p.shape) >= 2 for p in inst.params.values()) and bool(inst.macs)


def _outputs(body: list[Inst], splits: _Splits) -> Iterator[tuple[Inst, Expr]]:
    """The boxes of one scope that have an output, in order, each with its output's values
    per sample and device: over the pieces tensor parallelism cuts it into; a box without
    parameters that keeps the shape of what it reads (gelu, dropout) is split like that."""
    before: tuple[tuple[Expr, ...], int] = ((), 1)  # the last output's shape and its pieces
    for inst in body:
        if inst.output is None:
            continue
        shape = inst.output.shape
        pieces = splits.output.get(id(inst), 1)
        if not inst.params and inst.inputs and inst.inputs[0].shape == before[0] == shape:
            pieces = before[1]
        yield inst, _numel(shape) / pieces
        before = (shape, pieces)


def _primitive(inst: Inst) -> bool:
    return isinstance(inst, LayerInst) and inst.inside is None


def _scope(body: list[Inst], memo: Memo, splits: _Splits, looped: bool) -> Expr:
    """Values kept by the boxes of one scope, in order.

    Outside a ×N group, every primitive box's output. Inside one (``looped``), only products
    and what attention keeps: the loop computes the rest again."""
    out = Expr()
    for inst in body:
        out = out + kept(inst, memo, splits, looped)
    for inst, values in _outputs(body, splits):
        if _primitive(inst) and (not looped or _product(inst)):
            out = out + values
    return out


def backward(root: list[Inst], splits: _Splits) -> Expr:
    """Values per sample the backward pass holds besides what was kept: going back through a
    box, it reads the gradient of the box's output and writes the gradient of its input, the
    output of the box before it in the same scope, so both are held at once; inside a box
    that keeps values of its own (`Layer.kept`: attention's Q, K, V and weights, a mixture's
    dispatch buffers and experts' values, all at once), their gradients, where they are
    larger. The largest of any box counts, once. (The first box of the model has no gradient
    of its input: nothing differentiates the data.)"""
    candidates = []
    stack = [root]
    while stack:
        body = stack.pop()
        stack.extend(part for inst in body for part in inst.parts())
        last: Expr | None = None
        for inst, values in _outputs(body, splits):
            if _primitive(inst):
                candidates.append(values + (last if last is not None else Expr()))
                candidates.append(_held(inst, False, splits))
            last = values
    return _largest(candidates)


def _largest(counts: list[Expr]) -> Expr:
    """The largest of several counts, term by term: where the sizes decide which (T·D against
    T², say), the sum of those no other one bounds, which bounds them all, in any order."""
    top: list[Expr] = []
    for c in counts:
        if any(_bounds(t, c) for t in top):
            continue
        top = [t for t in top if not _bounds(c, t)] + [c]
    return total(top)


def _bounds(a: Expr, b: Expr) -> bool:
    return all(c >= 0 for _, c in (a - b).terms)


def kept(inst: Inst, memo: Memo, splits: _Splits, looped: bool = False) -> Expr:
    """Values kept for the backward pass, per sample and device, inside a box (its own output
    is its scope's to count): what attention keeps, and every box of its body, over the pieces
    tensor parallelism cuts them into; a ×N group's loop keeps each copy's input besides."""
    key = (id(inst), looped)
    if key in memo:
        return memo[key]
    out = _held(inst, looped, splits)
    if isinstance(inst, ScanInst):  # a recurrence keeps every step's values
        out = out + _scope(inst.body, memo, splits, looped) * inst.steps
    elif not isinstance(inst, GroupInst):
        for part in inst.parts():
            out = out + _scope(part, memo, splits, looped)
    for cp in inst.copies if isinstance(inst, GroupInst) else ():
        carry = _numel(inst.inputs[0].shape) if inst.inputs else Expr()
        if cp.work is not None:  # a mixture's experts: each run keeps its token, no loop
            token = Expr.lift(inst.inputs[0].shape[-1]) if inst.inputs else Expr()
            out = out + (_scope(cp.body, memo, splits, looped) + token) * cp.runs
            continue
        out = out + (_scope(cp.body, memo, splits, True) + carry) * cp.runs
    memo[key] = out
    return out


def recomputed(root: list[Inst], memo: Memo, splits: _Splits) -> Expr:
    """Values per sample a ×N group's backward pass holds on top of what its loops keep: it
    computes one copy's forward pass again (norms, activations, attention's weights: all
    that copy's values, less the products the loop kept) before going back through it, one
    copy at a time, so the largest copy of any group counts, once."""
    best = Expr()
    stack = list(root)
    while stack:
        inst = stack.pop()
        stack.extend(i for part in inst.parts() for i in part)
        for cp in inst.copies if isinstance(inst, GroupInst) else ():
            if cp.work is not None:
                continue
            extra = _scope(cp.body, memo, splits, False) - _scope(cp.body, memo, splits, True)
            best = _larger(best, extra)
    return best


def gathered(layout: Layout) -> Expr:
    """Bytes a device holds besides its pieces where a mesh axis that splits the batch also
    splits weights (fsdp): a layer runs with its weight whole, gathered from every device's
    piece, and the backward pass makes that weight's gradient whole from the device's own
    samples before it is summed over the devices and split again. Layer by layer (one copy of a
    stacked ×N group's weight at a time: its loop gathers a slice), the largest weight counts,
    twice (weight and gradient), less the piece the device holds anyway."""
    from lbdl_dsl.compiler.sharding import axis_names

    best = Expr()
    for p in layout.arrays.values():
        over = [a for axis in p.spec for a in axis_names(axis) if a in layout.batch]
        if p.kind != "param" or not over:
            continue
        one = _numel(tuple(d for d, r in zip(p.shape, p.roles) if r != "layers")) * FLOAT
        whole = one / (p.pieces // layout.mesh.size(tuple(over)))
        best = _larger(best, (whole - one / p.pieces) * 2)
    return best


def _larger(a: Expr, b: Expr) -> Expr:
    """The larger of two counts, term by term; where neither bounds the other (the sizes
    decide), their sum, which bounds both."""
    if all(c >= 0 for _, c in (a - b).terms):
        return a
    if all(c >= 0 for _, c in (b - a).terms):
        return b
    return a + b


def _box_kept(inst: Inst, memo: Memo, splits: _Splits, looped: bool) -> Expr:
    """A row's values: what is inside it, and its own output."""
    return _scope([inst], memo, splits, looped)


def per_array(layout: Layout) -> dict[str, Expr]:
    """Each array's bytes on one device: float32, over the pieces of its placement."""
    return {path: p.numel * FLOAT / p.pieces for path, p in layout.arrays.items()}


def _box(
    row: tuple[str, Inst, Expr],
    layout: Layout,
    arrays: dict[str, Expr],
    moments: int,
    b: Expr,
    memo: Memo,
    splits: _Splits,
    looped: bool,
) -> Bytes:
    """A row's bytes, all copies counted: the arrays under its logical path (a row of a ×N
    group stands for every copy, however a backend stores them)."""
    path, inst, copies = row
    prefix = path + "/"
    mine = [k for k in arrays if k.startswith(prefix)]
    params = total(arrays[k] for k in mine if _kind(layout, k))
    state = total(arrays[k] for k in mine if not _kind(layout, k))
    acts = _box_kept(inst, memo, splits, looped) * copies * FLOAT * b
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
    memo: Memo = {}
    splits = _splits(checked, layout)
    acts = _scope(checked.root, memo, splits, False) * FLOAT * b
    again = recomputed(checked.root, memo, splits) * FLOAT * b
    back = backward(checked.root, splits) * FLOAT * b
    inputs = total(
        _numel(t.shape) * DTYPE_BYTES.get(t.dtype, FLOAT) * b for t in checked.inputs.values()
    )
    opt_bytes = params * moments + counters * COUNTER
    whole = Bytes(params, params, opt_bytes, state, acts, inputs, again, back, gathered(layout))
    groups = {"/".join(p) for p, inst, _ in checked.walk() if inst.kind == "repeat"}
    boxes = [
        BoxBytes(
            row[0],
            _box(row, layout, arrays, moments, b, memo, splits, _in(row[0], groups)),
        )
        for row in rows
    ]
    return whole, boxes


def _in(path: str, groups: set[str]) -> bool:
    """Whether the box at ``path`` is inside a ×N group (its copies keep only products)."""
    parts = path.split("/")
    return any("/".join(parts[:i]) in groups for i in range(1, len(parts)))


def _numel(shape: tuple[Expr, ...]) -> Expr:
    out = Expr.lift(1)
    for d in shape:
        out = out * d
    return out


@dataclass(frozen=True)
class KvCache:
    """What decoding keeps (`compiler.decoding`), float32, per sample or, with a layout, per
    device for ``B`` samples there: ``per_token`` bytes each position adds (until a sliding
    window is full), ``fixed`` bytes whatever the length (a recurrent carry), and ``full``
    bytes at ``context`` positions (the model's limit, or the symbol of its length)."""

    per_token: Expr
    fixed: Expr
    full: Expr
    context: Expr


def kv_cache(
    checked: Checked, layout: Layout | None = None, batch: int | None = None
) -> KvCache | None:
    """The decoding cache's bytes, counted from each box's registry entry like the other
    figures (no JAX); None for a model that does not generate. Under a mesh, each array is
    split where a rule puts one of its roles (tensor parallelism's kv heads) and the batch
    over the axes that split it."""
    from lbdl_dsl.compiler import decoding
    from lbdl_dsl.core.errors import LbdlError

    try:
        plan = decoding.plan(checked)
    except LbdlError:
        return None
    context = Expr.lift(plan.limit) if plan.limit is not None else sym(plan.seq or "T")
    samples = Expr.lift(1) if layout is None else sym(BATCH) if batch is None else Expr.lift(batch)

    def size(s: Expr | int) -> Expr:
        out = Expr.lift(0)
        for array in decoding.cache_arrays(checked.root, s):
            n = Expr.lift(FLOAT) * samples
            for d in array.shape:
                n = n * d
            out = out + n / _pieces(array, layout)
        return out

    one, two = size(1), size(2)
    return KvCache(two - one, one - (two - one), size(context), context)


def _pieces(array: paths.Array, layout: Layout | None) -> int:
    """How many pieces the rules cut a cache array into (the batch aside)."""
    if layout is None:
        return 1
    pieces, taken = 1, set[str]()
    for d, role in zip(array.shape, array.roles):
        for rule in layout.rules.rules:
            if rule.is_symbol or rule.target != role or taken & set(rule.mesh_axes):
                continue
            n = layout.mesh.size(rule.mesh_axes)
            v = Expr.lift(d).as_int()
            if v is not None and v % n == 0:
                pieces *= n
                taken |= set(rule.mesh_axes)
                break
    return pieces

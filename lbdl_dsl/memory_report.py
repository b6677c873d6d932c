"""Memory per device as the user reads it: the table ``--check --mesh`` prints, and its JSON.

Rows follow the summary's (`report`): the figure's boxes at depth 1, deeper with ``--depth``;
a ×N group's row counts all its copies, and so does a box inside it. Bytes are in binary units
(KiB, MiB, GiB); a figure still symbolic in the per-device batch ``B`` or a free size ``T``
reads ``37.3 MiB × B·T``. Only rich is imported, so ``--check`` stays fast.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.boxtext import box_label
from lbdl_dsl.bytes_text import fmt_bytes, kv_cache_text
from lbdl_dsl.compiler import memory
from lbdl_dsl.compiler.instance import Checked, Inst
from lbdl_dsl.compiler.memory import Bytes
from lbdl_dsl.compiler.sharding import Layout
from lbdl_dsl.core.symbolic import Expr

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


@dataclass(frozen=True)
class Plan:
    """What the mesh flags ask for: a layout, an optimiser and the batch it runs."""

    layout: Layout
    optimizer: str = "adam"
    global_batch: int | None = None

    @property
    def per_device_batch(self) -> int | None:
        if self.global_batch is None:
            return None
        return self.global_batch // self.layout.batch_pieces


def _value(e: Expr) -> int | str:
    v = e.as_int()
    return v if v is not None else str(e)


def rows(checked: Checked, depth: int | None) -> Iterator[tuple[int, str, Inst, Expr]]:
    """(depth, path, instance, copies) in the summary's order; copies multiply inside ×N."""

    def visit(
        insts: list[Inst], level: int, prefix: str, copies: Expr
    ) -> Iterator[tuple[int, str, Inst, Expr]]:
        for inst in insts:
            path = f"{prefix}/{inst.id}" if prefix else inst.id
            yield level, path, inst, copies
            if depth is None or level + 1 < depth:
                for step, part, count in inst.scopes():
                    sub = f"{path}/{step}".rstrip("/")
                    yield from visit(part, level + 1, sub, copies * count)

    yield from visit(checked.root, 0, "", Expr.lift(1))


def figures(
    checked: Checked, plan: Plan, depth: int | None
) -> tuple[Bytes, list[tuple[int, str, str, Bytes]]]:
    """The totals and (depth, label, bytes) per row."""
    shown = list(rows(checked, depth))
    whole, boxes = memory.per_device(
        checked,
        plan.layout,
        [(path, inst, copies) for _, path, inst, copies in shown],
        optimizer=plan.optimizer,
        batch=plan.per_device_batch,
    )
    table = [
        (level, path, box_label(inst, checked.program.blocks), box.bytes)
        for (level, path, inst, _), box in zip(shown, boxes)
    ]
    return whole, table


def _header(plan: Plan) -> list[str]:
    layout = plan.layout
    mesh = layout.mesh
    split = " × ".join(f"{a}={mesh.size(a)}" for a in layout.batch)
    if plan.global_batch is not None:
        batch = (
            f"B = {plan.per_device_batch} samples per device "
            f"(the global batch {plan.global_batch} over {split or 'no axis'})"
        )
    else:
        batch = f"B = samples per device (the global batch over {split or 'no axis'})"
    return [
        f"memory per device: mesh {mesh} ({mesh.devices} devices), --shard {layout.rules.text}",
        batch,
    ]


def render(checked: Checked, plan: Plan, depth: int | None = 1) -> str:
    """The per-device memory table and its totals, as text."""
    from rich.console import Console
    from rich.table import Table

    whole, table = figures(checked, plan, depth)
    opt_name = memory.OPTIMIZERS[plan.optimizer][2]
    has_state = whole.state != Expr()
    grid = Table(box=None, show_edge=False, pad_edge=False)
    columns = ["box", "params", "grads", opt_name, *(["state"] if has_state else []), "activations"]
    for i, name in enumerate(columns):
        grid.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for level, _, label, b in table:
        cells = [b.params, b.grads, b.optimizer, *([b.state] if has_state else []), b.activations]
        grid.add_row("  " * level + label, *(fmt_bytes(c) for c in cells))
    console = Console(width=240, no_color=True, highlight=False, record=True, file=io.StringIO())
    for line in _header(plan):
        console.print(line)
    console.print(grid)
    console.print(f"params       {fmt_bytes(whole.params)}")
    console.print(f"grads        {fmt_bytes(whole.grads)}")
    console.print(f"optimiser    {fmt_bytes(whole.optimizer)} ({opt_name}, with its step count)")
    if has_state:
        console.print(f"state        {fmt_bytes(whole.state)}")
    console.print(
        f"activations  {fmt_bytes(whole.activations)} (what the backward pass keeps, float32)"
    )
    console.print(f"inputs       {fmt_bytes(whole.inputs)}")
    if whole.recomputed != Expr():
        console.print(
            f"recomputed   {fmt_bytes(whole.recomputed)} (one copy of a ×N group, made again "
            "by the backward pass)"
        )
    if whole.backward != Expr():
        console.print(
            f"backward     {fmt_bytes(whole.backward)} (the gradients of one box's output and "
            "input, held at once)"
        )
    if whole.gathered != Expr():
        console.print(
            f"gathered     {fmt_bytes(whole.gathered)} (the largest weight and its gradient, "
            "whole for their layer: fsdp)"
        )
    console.print(f"total        {fmt_bytes(whole.total)} per device")
    cache = memory.kv_cache(checked, plan.layout, plan.per_device_batch)
    if cache is not None:
        console.print(f"kv cache     {kv_cache_text(cache)} (decoding, float32)")
    for note in plan.layout.notes:
        console.print(f"note         {note}")
    for a in plan.layout.assumptions:
        console.print(f"assumes      {a}")
    text = console.export_text()
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def to_json(checked: Checked, plan: Plan, depth: int | None = None) -> dict[str, Any]:
    """The same figures as one JSON-ready object (bytes as numbers, or formulas as text)."""
    layout = plan.layout
    whole, table = figures(checked, plan, depth)
    return {
        "mesh": dict(layout.mesh.axes),
        "devices": layout.mesh.devices,
        "shard": layout.rules.text,
        "batch_axes": list(layout.batch),
        "global_batch": plan.global_batch,
        "per_device_batch": plan.per_device_batch,
        "optimizer": plan.optimizer,
        "per_device": {k: _value(v) for k, v in whole.items()}
        | {"arguments": _value(whole.arguments)},
        "layers": [
            {"path": path, "depth": level, "label": label}
            | {k: _value(v) for k, v in b.items() if k != "inputs"}
            for level, path, label, b in table
        ],
        "arrays": {
            p.path: {
                "kind": p.kind,
                "shape": [_value(d) for d in p.shape],
                "roles": list(p.roles),
                "spec": [a if a is None or isinstance(a, str) else list(a) for a in p.spec],
                "pieces": p.pieces,
            }
            for p in layout.arrays.values()
        },
        "notes": list(layout.notes),
        "assumptions": list(layout.assumptions),
    }

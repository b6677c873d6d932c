"""The summary of a checked model: rows for a table, the table itself, and the JSON object.

Rows follow the block tree with each ×N group collapsed to one copy (its row says ×N and its
subtotals count all N), to the depth asked for: depth 1 reads like the book's figure, one row a
box. Costs stay formulas where an input stays symbolic. Only rich is imported here, so
``--check`` stays fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.boxtext import box_label
from lbdl_dsl.compiler.infer import Checked, Inst
from lbdl_dsl.core.symbolic import Expr, fmt_count


@dataclass(frozen=True)
class Row:
    depth: int
    path: str
    label: str
    shape: str
    params: Expr
    macs: Expr
    rf: str
    count: str


def rows(checked: Checked, depth: int | None = 1) -> Iterator[Row]:
    """Summary rows, depth first; ``depth=None`` shows every level."""

    def visit(insts: list[Inst], level: int, prefix: str) -> Iterator[Row]:
        for inst in insts:
            path = f"{prefix}/{inst.id}" if prefix else inst.id
            out = inst.output
            rf = ""
            if out is not None and out.rf is not None:
                rf = f"{out.rf[0]}/{out.rf[1]}"
            yield Row(
                level,
                path,
                box_label(inst, checked.program.blocks),
                str(out) if out is not None else "?",
                inst.totals.get("params", Expr()),
                inst.totals.get("macs", Expr()),
                rf,
                str(inst.hp.get("count", "")) if inst.kind == "repeat" else "",
            )
            if depth is None or level + 1 < depth:
                for i, cp in enumerate(inst.copies):
                    yield from visit(
                        cp.body, level + 1, f"{path}/{i}" if len(inst.copies) > 1 else path
                    )
                yield from visit(inst.body, level + 1, path)
                yield from visit(inst.shortcut, level + 1, f"{path}/shortcut")

    yield from visit(checked.root, 0, "")


def _dim(d: Expr) -> int | str:
    v = d.as_int()
    return v if v is not None else str(d)


def _count(e: Expr) -> int | str:
    v = e.as_int()
    return v if v is not None else str(e)


def to_json(checked: Checked, depth: int | None = None) -> dict[str, Any]:
    """One JSON-ready object: totals, inputs, outputs and the per-layer rows."""
    return {
        "model": checked.program.model.name,
        "params": _count(checked.totals["params"]),
        "state": _count(checked.totals["state"]),
        "macs": _count(checked.totals["macs"]),
        "activations": _count(checked.totals["activations"]),
        "inputs": {k: [_dim(d) for d in t.shape] for k, t in checked.inputs.items()},
        "outputs": {
            k: [_dim(d) for d in t.shape] if t is not None else None
            for k, t in checked.outputs.items()
        },
        "symbols": checked.free,
        "parameters": {k: _env_json(v) for k, v in checked.env.items()},
        "assumptions": checked.assumptions,
        "layers": [
            {
                "path": r.path,
                "depth": r.depth,
                "label": r.label,
                "shape": r.shape,
                "params": _count(r.params),
                "macs": _count(r.macs),
                "receptive_field": r.rf or None,
            }
            for r in rows(checked, depth)
        ],
    }


def _env_json(v: Any) -> Any:
    if isinstance(v, Expr):
        return _count(v)
    return v


def dumps(checked: Checked) -> str:
    return json.dumps(to_json(checked), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def _bytes(e: Expr) -> str:
    v = e.as_int()
    if v is None:
        return f"{e} B"  # the caller has already counted 4 bytes a value
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{v:,.1f} {unit}" if unit != "B" else f"{v} B"
        v /= 1024
    return ""


def render_table(checked: Checked, depth: int | None = 1, terminal: bool = False) -> str:
    """The summary as text: a rich table on a terminal, plain aligned columns when piped."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD if terminal else None, show_edge=False, pad_edge=False)
    table.add_column("box", no_wrap=True)
    table.add_column("output", no_wrap=True)
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("MACs", justify="right", no_wrap=True)
    has_rf = False
    all_rows = list(rows(checked, depth))
    has_rf = any(r.rf for r in all_rows)
    if has_rf:
        table.add_column("RF/stride", justify="right", no_wrap=True)
    for r in all_rows:
        cells = ["  " * r.depth + r.label, r.shape, fmt_count(r.params), fmt_count(r.macs)]
        if has_rf:
            cells.append(r.rf)
        table.add_row(*cells)
    t = checked.totals
    console = Console(
        width=240,
        force_terminal=terminal,
        no_color=not terminal,
        highlight=False,
        record=True,
        file=_Null(),
    )
    model = checked.program.model
    params = ", ".join(f"{k}={_env_json(v)}" for k, v in checked.env.items())
    console.print(f"model {model.name}" + (f" ({params})" if params else ""))
    console.print(table)
    ins = ", ".join(f"{k}: {v}" for k, v in checked.inputs.items())
    outs = ", ".join(f"{k}: {v}" for k, v in checked.outputs.items())
    console.print(f"inputs   {ins}\noutputs  {outs}")
    console.print(f"params   {fmt_count(t['params'])} trainable, {fmt_count(t['state'])} state")
    console.print(f"MACs     {fmt_count(t['macs'])} per sample")
    console.print(f"memory   {_bytes(t['activations'] * 4)} of float32 activations per sample")
    if checked.free:
        console.print(f"symbols  {', '.join(checked.free)} left symbolic (give values with --set)")
    for a in checked.assumptions:
        console.print(f"assumes  {a}")
    text = console.export_text(styles=terminal)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


class _Null:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass

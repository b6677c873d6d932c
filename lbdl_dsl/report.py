"""The summary of a checked model: rows for a table, the table itself, and the JSON object.

Rows follow the block tree with each ×N group collapsed to one copy (its row says ×N and its
subtotals count all N), to the depth asked for: depth 1 reads like the book's figure, one row a
box. Costs stay formulas where an input stays symbolic. Only rich is imported here, and only
for a terminal (or a line too wide), so a piped ``--check`` stays fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

from lbdl_dsl.boxtext import box_label
from lbdl_dsl.compiler.infer import Checked, Inst
from lbdl_dsl.core.collector import fewer_collections
from lbdl_dsl.core.errors import printable
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


def _walk(
    checked: Checked, depth: int | None, paths: bool = True
) -> Iterator[tuple[int, str, Inst]]:
    """Each instance the summary shows, depth first, with its level and path (``""`` without
    ``paths``: the table shows none); ``depth=None`` goes down every level. A ×N group's
    copies come first, then a call's (or residual's) body, then the shortcut; an empty part
    costs nothing (no generator for it)."""
    return _visit(checked.root, 0, "", depth, paths)


def _visit(
    insts: list[Inst], level: int, prefix: str, depth: int | None, paths: bool
) -> Iterator[tuple[int, str, Inst]]:
    # At module level, not nested in `_walk`: a nested function that calls itself is a
    # reference cycle that would keep the checked tree alive until the cycle collector runs.
    deeper = depth is None or level + 1 < depth
    for inst in insts:
        path = (f"{prefix}/{inst.id}" if prefix else inst.id) if paths else ""
        yield level, path, inst
        if not deeper:
            continue
        for step, part, _ in inst.scopes():
            if part:
                yield from _visit(part, level + 1, f"{path}/{step}".rstrip("/"), depth, paths)


class _Texts:
    """A box's texts in the summary, made once per instance (identical calls share theirs),
    from shape and count texts made once per distinct value: a model repeats a few shapes
    and counts over and over (every `relu` on 64×56×56)."""

    def __init__(self, checked: Checked) -> None:
        self.blocks = checked.program.blocks
        self.shapes: dict[tuple[Expr, ...], str] = {}
        self.counts: dict[Expr, str] = {}

    def of(self, inst: Inst) -> tuple[str, str, str, str]:
        """Label, output shape, receptive field and ×N count of ``inst``."""
        out = inst.output
        shape, rf = "?", ""
        if out is not None:
            shape = self.shapes.get(out.shape) or self.shapes.setdefault(out.shape, str(out))
            if out.rf is not None:
                rf = f"{out.rf[0]}/{out.rf[1]}"
        count = str(inst.hp.get("count", "")) if inst.kind == "repeat" else ""
        return box_label(inst, self.blocks), shape, rf, count

    def count(self, value: Expr) -> str:
        """`fmt_count` of ``value``."""
        text = self.counts.get(value)
        if text is None:
            text = self.counts[value] = fmt_count(value)
        return text


def rows(checked: Checked, depth: int | None = 1) -> Iterator[Row]:
    """Summary rows, depth first; ``depth=None`` shows every level."""
    zero = Expr()
    texts = _Texts(checked)
    made: dict[int, tuple[str, str, str, str]] = {}  # by instance: identical calls share theirs
    for level, path, inst in _walk(checked, depth):
        known = made.get(id(inst))
        if known is None:
            known = made[id(inst)] = texts.of(inst)
        label, shape, rf, count = known
        totals = inst.totals
        params, macs = totals.get("params", zero), totals.get("macs", zero)
        yield Row(level, path, label, shape, params, macs, rf, count)


def _dim(d: Expr) -> int | str:
    v = d.as_int()
    return v if v is not None else str(d)


def _count(e: Expr) -> int | str:
    v = e.as_int()
    return v if v is not None else str(e)


@fewer_collections()
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
        "kv_cache": _kv_cache_json(checked),
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


def _type(t: Any) -> str:
    """An input's type as its declaration writes it: nothing for floats, ` int<V>`, ` bool`."""
    if t.dtype == "int":
        return f" int<{t.vocab}>" if t.vocab is not None else " int"
    return "" if t.dtype == "float" else f" {t.dtype}"


def _env_json(v: Any) -> Any:
    if isinstance(v, Expr):
        return _count(v)
    return v


def dumps(checked: Checked) -> str:
    return json.dumps(to_json(checked), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def _kv_cache_json(checked: Checked) -> dict[str, Any] | None:
    from lbdl_dsl.compiler import memory

    cache = memory.kv_cache(checked)
    if cache is None:
        return None
    return {k: _count(getattr(cache, k)) for k in ("per_token", "fixed", "full", "context")}


def _kv_cache(checked: Checked) -> str | None:
    """The decoding cache's line, for a model that generates (`compiler.memory.kv_cache`)."""
    from lbdl_dsl.compiler import memory

    cache = memory.kv_cache(checked)
    if cache is None:  # most models: the memory report (and sharding) stays unimported
        return None
    from lbdl_dsl.bytes_text import kv_cache_text

    return kv_cache_text(cache)


def _bytes(e: Expr) -> str:
    v = e.as_int()
    if v is None:
        return f"{e} B"  # the caller has already counted 4 bytes a value
    size: float = v
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.1f} {unit}" if unit != "B" else f"{v} B"
        size /= 1024
    return ""


RICH_ROWS = 2_000
"""Above this many rows a terminal gets the plain table too: rich measures and wraps every
cell of every row several times over, which made the summary of a 190,000-box model take two
thirds of its ``--check`` (issue 17). The plain layout is one pass over the cells."""


Cells = tuple[str, ...]
"""A row of the table: box, output, params, MACs and receptive field, ready to print."""


def _row_cells(level: int, label: str, shape: str, params: str, macs: str, rf: str) -> Cells:
    return tuple(printable(c) for c in ("  " * level + label, shape, params, macs, rf))


def _header(has_rf: bool) -> tuple[list[str], list[bool]]:
    """The table's header, and which columns are right-aligned."""
    header = ["box", "output", "params", "MACs"] + (["RF/stride"] if has_rf else [])
    right = [False, False, True, True] + ([True] if has_rf else [])
    return header, right


def _columns(all_rows: list[Row]) -> tuple[list[str], list[bool], list[list[str]]]:
    """The table's header, which columns are right-aligned, and its cells, row by row."""
    has_rf = any(r.rf for r in all_rows)
    header, right = _header(has_rf)
    width = len(header)
    cells = [
        list(_row_cells(r.depth, r.label, r.shape, fmt_count(r.params), fmt_count(r.macs), r.rf))[
            :width
        ]
        for r in all_rows
    ]
    return header, right, cells


def _table_cells(checked: Checked, depth: int | None) -> tuple[list[Cells], bool]:
    """The cells of each row of the summary (the receptive field always there), and whether
    any row has a receptive field. Rows with the same text are one tuple, made once: a
    shared instance at the same level, or the hundredth `relu` of the same shape."""
    zero = Expr()
    texts = _Texts(checked)
    by_inst: dict[int, tuple[str, str, str, str, str]] = {}  # identical calls share instances
    made: dict[tuple[int, tuple[str, str, str, str, str]], Cells] = {}
    out: list[Cells] = []
    for level, _, inst in _walk(checked, depth, paths=False):
        known = by_inst.get(id(inst))
        if known is None:
            label, shape, rf, _ = texts.of(inst)
            totals = inst.totals
            params = texts.count(totals.get("params", zero))
            macs = texts.count(totals.get("macs", zero))
            known = by_inst[id(inst)] = (label, shape, params, macs, rf)
        key = (level, known)
        cells = made.get(key)
        if cells is None:
            cells = made[key] = _row_cells(level, *known)
        out.append(cells)
    return out, any(cells[4] for cells in made.values())


def plain_table(all_rows: list[Row]) -> list[str]:
    """The rows as aligned columns two spaces apart, in one pass: the same text as rich's
    borderless table, which the tests hold it to, at a cost linear in the cells."""
    header, right, cells = _columns(all_rows)
    return _plain_lines(header, right, [tuple(c) for c in cells])


def _plain_lines(header: list[str], right: list[bool], cells: list[Cells]) -> list[str]:
    """`plain_table`'s lines from the cells (extra cells at a row's end are not shown). Each
    distinct row is measured and laid out once: its line is then the same string object."""
    distinct = list(dict.fromkeys(cells))
    widths = [
        max(_cells(header[i]), max((_cells(row[i]) for row in distinct), default=0))
        for i in range(len(header))
    ]

    def line(row: Cells) -> str:
        parts = [
            (text.rjust(width) if is_right else text.ljust(width))  # ASCII: a column a character
            if text.isascii()
            else _pad(text, width, is_right)
            for text, width, is_right in zip(row, widths, right)
        ]
        return "  ".join(parts).rstrip()

    lines = {row: line(row) for row in distinct}
    return [line(tuple(header)), *[lines[row] for row in cells]]


def _pad(text: str, width: int, right: bool) -> str:
    pad = " " * (width - _cells(text))
    return pad + text if right else text + pad


WIDTH = 240
"""The console's width: a line of the head or foot wider than this is wrapped (by rich)."""


@fewer_collections()
def render_table(checked: Checked, depth: int | None = 1, terminal: bool = False) -> str:
    """The summary as text: a rich table on a terminal, plain aligned columns when piped (or
    when the table is too long for rich to lay out quickly)."""
    cells, has_rf = _table_cells(checked, depth)
    header, right = _header(has_rf)
    model = checked.program.model
    params = ", ".join(f"{k}={_env_json(v)}" for k, v in checked.env.items())
    head = [printable(f"model {model.name}" + (f" ({params})" if params else ""))]
    if terminal and len(cells) <= RICH_ROWS:
        lines = _console_lines(head, terminal, _rich_table(header, right, cells))
    else:
        lines = [*_text_lines(head, terminal), *_plain_lines(header, right, cells)]
    t = checked.totals
    ins = ", ".join(f"{k}: {v}{_type(v)}" for k, v in checked.inputs.items())
    outs = ", ".join(f"{k}: {v}" for k, v in checked.outputs.items())
    foot = [
        printable(f"inputs   {ins}\noutputs  {outs}", keep_newlines=True),
        f"params   {fmt_count(t['params'])} trainable, {fmt_count(t['state'])} state",
        f"MACs     {fmt_count(t['macs'])} per sample",
        f"memory   {_bytes(t['activations'] * 4)} of float32 activations per sample",
    ]
    cache = _kv_cache(checked)
    if cache:
        foot.append(f"kv cache {cache} (decoding, float32, per sample)")
    if checked.free:
        foot.append(f"symbols  {', '.join(checked.free)} left symbolic (give values with --set)")
    foot += [printable(f"assumes  {a}") for a in checked.assumptions]
    return "\n".join([*lines, *_text_lines(foot, terminal)]) + "\n"


def _text_lines(messages: list[str], terminal: bool) -> list[str]:
    """Printable messages as the console shows them. Without styles and within its width a
    line is shown as it is (rich is then not even imported, which ``--check`` notices);
    otherwise rich lays them out (styles, or wrapping a line wider than `WIDTH`)."""
    lines = [line.rstrip() for m in messages for line in m.split("\n")]
    if terminal or any(_cells(line) > WIDTH for line in lines):
        return _console_lines(messages, terminal)
    return lines


def _cells(text: str) -> int:
    """The columns ``text`` (printable: `printable`'s) takes on a terminal, as rich counts."""
    if text.isascii():  # printable ASCII: one column a character
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _console_lines(messages: list[str], terminal: bool, table: Any = None) -> list[str]:
    """Messages (then a rich table) printed on a recording rich console, as lines."""
    from rich.console import Console

    # The text is the spec's (names, strings): never read as rich's markup (`[red]`) or emoji
    # codes (`:smile:`), and never sent to a notebook as output of its own (`force_jupyter`:
    # rich would display every print as a separate HTML fragment).
    console = Console(
        width=WIDTH,
        force_terminal=terminal,
        force_jupyter=False,
        no_color=not terminal,
        highlight=False,
        markup=False,
        emoji=False,
        record=True,
        file=cast(IO[str], _Null()),  # write and flush are all rich calls
    )
    for message in messages:
        console.print(message)
    if table is not None:
        console.print(table)
    return [line.rstrip() for line in console.export_text(styles=terminal).splitlines()]


def _rich_table(header: list[str], right: list[bool], cells: list[Cells]) -> Any:
    """The table for a terminal: rich's, with a rule under the header."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, is_right in zip(header, right):
        table.add_column(name, justify="right" if is_right else "left", no_wrap=True)
    for row in cells:
        table.add_row(*row[: len(header)])
    return table


def render_html(checked: Checked, depth: int | None = 1) -> str:
    """The summary as one HTML table, for notebooks: the rows of `render_table`, then the
    totals, in a single fragment (rich's own notebook output would be one per line)."""
    from html import escape

    def cell(text: str, right: bool = False) -> str:
        align = ' style="text-align:right"' if right else ' style="text-align:left"'
        return f"<td{align}>{escape(printable(text))}</td>"

    all_rows = list(rows(checked, depth))
    has_rf = any(r.rf for r in all_rows)
    heads = ["box", "output", "params", "MACs"] + (["RF/stride"] if has_rf else [])
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr></thead>"]
    out.append("<tbody>")
    for r in all_rows:
        cells = [
            cell("\u00a0\u00a0" * r.depth + r.label),
            cell(r.shape),
            cell(fmt_count(r.params), True),
            cell(fmt_count(r.macs), True),
        ]
        if has_rf:
            cells.append(cell(r.rf, True))
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    t = checked.totals
    model = checked.program.model
    facts = [
        ("model", model.name),
        ("inputs", ", ".join(f"{k}: {v}" for k, v in checked.inputs.items())),
        ("outputs", ", ".join(f"{k}: {v}" for k, v in checked.outputs.items())),
        ("params", f"{fmt_count(t['params'])} trainable, {fmt_count(t['state'])} state"),
        ("MACs", f"{fmt_count(t['macs'])} per sample"),
        ("memory", f"{_bytes(t['activations'] * 4)} of float32 activations per sample"),
    ]
    if checked.free:
        facts.append(("symbols", f"{', '.join(checked.free)} left symbolic"))
    facts += [("assumes", a) for a in checked.assumptions]
    lines = "".join(f'<tr><th style="text-align:left">{k}</th>{cell(v)}</tr>' for k, v in facts)
    return f'<div class="lbdl-summary"><table>{lines}</table>{"".join(out)}</div>'


class _Null:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass

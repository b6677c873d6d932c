"""The checker and the summary stay linear in the number of boxes (issue 17, item 4).

No timings here (speed targets live in ``bench/check_scale.py``): the structure is tested
instead. On the benchmark's generated spec at two sizes, the checker visits each box once, the
summary has one row a box, the general (slow) polynomial constructor runs a bounded number of
times a box, and a table too long for rich is laid out in one pass with the same text rich gives.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lbdl_dsl import report
from lbdl_dsl.compiler import infer
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.symbolic import Expr

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from bench import check_scale  # noqa: E402

SIZES = (400, 800)


def _compile(tmp_path: Path, boxes: int):
    path = tmp_path / f"big{boxes}.lbdl"
    path.write_text(check_scale.big_spec(boxes, blocks=20), "utf-8")
    return compile_spec(path, stop_after="build").program


def _counting(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[int]:
    calls = [0]
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.mark.parametrize("boxes", SIZES)
def test_each_box_is_checked_once_and_summarised_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boxes: int
) -> None:
    program = _compile(tmp_path, boxes)
    visits = _counting(monkeypatch, infer.Checker, "box")
    checked = infer.check(program, {})
    assert check_scale.count_boxes(checked) == boxes
    # a call of a block already checked on the same shapes reuses that check: the first call
    # of each of the 20 blocks is visited inside (4 boxes), the others only as one box
    calls = boxes // 2 // 5
    assert visits[0] == boxes - 4 * (calls - 20)
    rows = list(report.rows(checked, None))
    assert len(rows) == boxes
    table = report.render_table(checked, None)
    assert len(table.splitlines()) == boxes + 7  # model line, header, rows, five totals


def test_the_general_polynomial_constructor_runs_a_bounded_number_of_times_a_box(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizes that are numbers take the constant fast path: the sorting, cleaning constructor
    ran about 19 times a box before (issue 17), and its count must grow like the boxes do."""
    counts = []
    for boxes in SIZES:
        program = _compile(tmp_path, boxes)
        with monkeypatch.context() as m:
            made = _counting(m, Expr, "__init__")
            infer.check(program, {})
        counts.append(made[0])
    assert all(c <= 4 * b for c, b in zip(counts, SIZES)), counts
    assert counts[1] <= 2 * counts[0] + 50, counts


@pytest.mark.parametrize("name,depth", [("resnet18", 1), ("unet", None), ("gpt2", None)])
def test_the_plain_table_is_rich_borderless_table(repo: Path, name: str, depth: int | None) -> None:
    from rich.console import Console
    from rich.table import Table

    checked = compile_spec(repo / "specs" / f"{name}.lbdl")
    assert checked is not None
    rows = list(report.rows(checked, depth))
    header, right, cells = report._columns(rows)
    table = Table(box=None, show_edge=False, pad_edge=False)
    for title, is_right in zip(header, right):
        table.add_column(title, justify="right" if is_right else "left", no_wrap=True)
    for row in cells:
        table.add_row(*row)
    console = Console(width=240, no_color=True, record=True, file=_Null())
    console.print(table)
    want = [line.rstrip() for line in console.export_text().splitlines()]
    assert report.plain_table(rows) == want


def test_a_long_table_on_a_terminal_skips_rich(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = infer.check(_compile(tmp_path, SIZES[0]), {})
    monkeypatch.setattr(report, "RICH_ROWS", SIZES[0] - 1)
    monkeypatch.setattr(report, "_rich_table", _refuse)
    text = report.render_table(checked, None, terminal=True)
    assert len(text.splitlines()) == SIZES[0] + 7


def _refuse(*_: object) -> None:
    raise AssertionError("rich laid out a table longer than RICH_ROWS")


class _Null:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass


def test_timed_processes_run_this_checkout_with_bytecode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Table 1 times the checkout it is given, as an installed package runs (bytecode kept)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPATH", "elsewhere")
    env = check_scale.child_env(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "elsewhere"]

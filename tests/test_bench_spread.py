"""`bench/spread.py`: run.py's rows again in fresh processes, summarised per row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("flax")

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import harness, run, spread  # noqa: E402

pytestmark = pytest.mark.bench

GPT = "GPT-2 small"
KINDS = {GPT: "gpt", run.GROWTH: "growth"}


def runs_of(*figures: tuple[float, float, float]) -> list[list[harness.Row]]:
    """One run per (steady train ratio, 12-block growth of ours, the peer's growth)."""
    return [
        [
            harness.Row(GPT, "steady: training step (s)", ratio, 1.0),
            harness.Row(run.GROWTH, "compile: 1 block (s)", 1.0, 1.0),
            harness.Row(run.GROWTH, "growth, 1 to 12 blocks (s)", ours, theirs),
        ]
        for ratio, ours, theirs in figures
    ]


def test_each_rows_ratios_are_gathered_against_its_target() -> None:
    runs = runs_of((1.07, 0.3, 1.2), (1.01, 0.36, 1.2), (1.12, 0.2, -0.1))
    by_metric = {s.metric: s for s in run.spreads(runs, KINDS)}
    steady = by_metric["steady: training step (s)"]
    assert steady.ratios == (1.07, 1.01, 1.12)
    assert (steady.target, steady.met) == (1.05, 1)
    growth = by_metric["growth, 1 to 12 blocks (s)"]
    assert growth.ratios == (0.25, 0.3)  # the run where the peer's compile shrank is no ratio
    assert (growth.target, growth.met) == (0.25, 1)
    depth = by_metric["compile: 1 block (s)"]
    assert (depth.target, depth.met) == (None, 0)


def test_the_section_gives_least_median_greatest_and_how_many_met() -> None:
    runs = runs_of((1.07, 0.3, 1.2), (1.01, 0.36, 1.2), (1.12, 0.3, 1.0))
    record = {
        "runs": [[row.__dict__ for row in rows] for rows in runs],
        "kinds": KINDS,
        "machine": ["- CPU: a test"],
        "notes": "- load average: none",
    }
    lines = run.spread_section(record)
    assert lines[0] == "## Across runs"
    assert "in 3 fresh processes" in lines[2]
    assert f"| {GPT} | steady: training step | 1.01 | 1.07 | 1.12 | ≤ 1.05 | 1 of 3 |" in lines
    assert f"| {run.GROWTH} | compile: 1 block | 1.00 | 1.00 | 1.00 | — | — |" in lines
    growth = "growth, 1 to 12 blocks | 0.25 | 0.30 | 0.30 | ≤ 0.25 | 1 of 3"
    assert f"| {run.GROWTH} | {growth} |" in lines
    assert lines[-2:] == ["- CPU: a test", "- load average: none"]


def test_the_report_gains_the_section_from_the_runs_saved_beside_it(tmp_path: Path) -> None:
    record = json.loads((Path(_ROOT) / "docs" / "performance.json").read_text(encoding="utf-8"))
    out = tmp_path / "performance.md"
    run.write(out, record)
    assert "## Across runs" not in out.read_text(encoding="utf-8")
    runs = runs_of((1.07, 0.3, 1.2), (1.01, 0.36, 1.2))
    saved = {"runs": [[r.__dict__ for r in rows] for rows in runs], "kinds": KINDS}
    saved |= {"machine": ["- CPU: a test"], "notes": "- notes"}
    (tmp_path / run.SPREAD_FILE).write_text(json.dumps(saved), encoding="utf-8")
    run.write(out, record)
    text = out.read_text(encoding="utf-8")
    assert text.index("## Targets") < text.index("## Across runs") < text.index("## Analysis")
    assert "| 1.01 | 1.04 | 1.07 | ≤ 1.05 | 1 of 2 |" in text


def test_a_run_measures_compile_and_steady_rows_and_the_growth_to_the_base_depth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpt = [case for case in run.cases(True) if case.kind == "gpt"]
    monkeypatch.setattr(run, "cases", lambda quick: gpt)
    rows = spread.child(True)
    metrics = [(row.model, row.metric) for row in rows]
    name = gpt[0].name
    assert metrics == [
        (name, "compile: forward (s)"),
        (name, "compile: training step (s)"),
        (name, "steady: forward (s)"),
        (name, "steady: training step (s)"),
        (run.GROWTH, "compile: 1 block (s)"),
        (run.GROWTH, "compile: 2 blocks (s)"),
        (run.GROWTH, "growth, 1 to 2 blocks (s)"),
    ]
    assert all(row.ours is not None and row.peer is not None for row in rows)
    assert all(row.ours > 0 and row.peer > 0 for row in rows[:6])


def test_the_runs_are_saved_and_summarised(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = iter(runs_of((1.07, 0.3, 1.2), (1.01, 0.36, 1.2), (1.03, 0.3, 1.2)))
    started = []

    def one_run(quick: bool) -> list[harness.Row]:
        started.append(quick)
        return next(fresh)

    monkeypatch.setattr(spread, "one_run", one_run)
    out = tmp_path / "spread.json"
    record = spread.main(["--runs", "3", "--out", str(out)])
    assert started == [False, False, False]
    assert json.loads(out.read_text(encoding="utf-8")) == record
    assert record["command"] == "python bench/spread.py"
    assert len(record["runs"]) == 3
    assert "| 1.01 | 1.03 | 1.07 | ≤ 1.05 | 2 of 3 |" in capsys.readouterr().out


def test_one_run_is_no_spread(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        spread.main(["--runs", "1"])
    assert stop.value.code == 2
    assert "--runs must be at least 2" in capsys.readouterr().err


def test_a_target_met_once_by_luck_does_not_read_as_met() -> None:
    rows = [
        harness.Row(GPT, "compile: forward (s)", 0.45, 1.0),
        harness.Row(GPT, "steady: training step (s)", 1.07, 1.0),
        harness.Row(GPT, "steady: forward (s)", 1.0, 1.0),
    ]
    across = [
        run.Spread(GPT, "compile: forward (s)", (0.45, 0.51), 0.5),
        run.Spread(GPT, "steady: training step (s)", (1.04, 1.1), 1.05),
        run.Spread(GPT, "steady: forward (s)", (0.98, 1.01), 1.05),
    ]
    lines = run.verdicts(rows, KINDS, across)
    assert lines[0].endswith(
        "(target ≤ 0.5: met here, **not met** in 1 of 2 fresh runs, 0.45 to 0.51)"
    )
    assert lines[1].endswith("(target ≤ 1.05: **not met**; met in 1 of 2 fresh runs, 1.04 to 1.10)")
    assert lines[2].endswith("(target ≤ 1.05: met; met in 2 of 2 fresh runs, 0.98 to 1.01)")
    assert run.verdicts(rows, KINDS)[0].endswith("(target ≤ 0.5: met)")

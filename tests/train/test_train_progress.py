"""Records shown and drawn: the plain lines, the progress bar, metrics.jsonl and the plot."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from lbdl_dsl.training.plot import plot
from lbdl_dsl.training.progress import MetricsFile, PlainDisplay, RichDisplay, describe, display_for

TRAIN = {
    "kind": "train",
    "step": 40,
    "epoch": 0.9091,
    "loss": 0.123456,
    "accuracy": 0.96875,
    "lr": 0.00272,
    "grad_norm": 1.5,
    "time": 3.2,
    "samples_per_s": 12370.4,
    "eta": 75.0,
}
EVAL = {"kind": "eval", "step": 40, "loss": 0.05, "accuracy": 0.98611, "samples": 360, "time": 3.4}


def test_plain_lines_say_everything_a_record_holds() -> None:
    out = io.StringIO()
    display = PlainDisplay(out)
    display.start(total=440, done=0)
    display.show(TRAIN)
    display.show(EVAL)
    assert out.getvalue().splitlines() == [
        "train step  40/440  epoch 0.91  loss 0.1235  accuracy 96.88%  lr 0.00272  "
        "grad_norm 1.5  12,370 samples/s  eta 0:01:15",
        "eval  step  40/440  loss 0.05  accuracy 98.61%",
    ]
    assert describe({"kind": "eval", "step": 1, "loss": 123456.0}) == "loss 1.235e+05"


def test_a_terminal_gets_the_progress_bar(monkeypatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(display_for(Tty()), RichDisplay)
    assert isinstance(display_for(io.StringIO()), PlainDisplay)
    display = RichDisplay()
    display.console.file = io.StringIO()
    display.start(total=100, done=10)
    display.show(TRAIN)
    display.show(EVAL)
    display.stop()
    task = display.progress.tasks[0]
    assert (task.completed, task.total, task.fields["loss"]) == (40, 100, "0.1235")
    assert "eval  step 40  loss 0.05  accuracy 98.61%" in display.console.file.getvalue()


def test_the_metrics_file_is_cut_back_to_a_checkpoint(tmp_path: Path) -> None:
    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    metrics.reset()
    for step in (10, 20, 30):
        metrics.append(TRAIN | {"step": step})
    assert [r["step"] for r in metrics.keep_until(20)] == [10, 20]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [10, 20]


def test_the_plot_is_a_png_or_nothing_without_matplotlib(tmp_path: Path, monkeypatch) -> None:
    records = [TRAIN | {"step": s, "loss": 1.0 / s} for s in (10, 20, 30)] + [EVAL]
    path = plot(records, tmp_path / "loss.png", "a title")
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert plot(records, tmp_path / "other.png", "a title") is None
    assert not (tmp_path / "other.png").exists()

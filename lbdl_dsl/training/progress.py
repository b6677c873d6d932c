"""What a run shows and records: one record per logged step, written and displayed.

Each logged step becomes a record (a dictionary of JSON values): ``kind`` ("train" or "eval"),
``step``, ``epoch``, the loss and metrics, the learning rate, ``time`` (seconds since the run
started, resumed runs continuing from the checkpoint's), and the throughput. `MetricsFile`
appends it to ``metrics.jsonl``; a `Display` shows the same record: a rich progress bar on a
terminal, one plain line per record otherwise (logs, CI, pipes). The plot reads the file.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Protocol, TextIO

from lbdl_dsl.core.errors import os_error
from lbdl_dsl.output import write_atomic

Record = dict[str, Any]


class MetricsFile:
    """``metrics.jsonl``: one JSON object a line, flushed as written.

    Read leniently: a line that is not a record (what a power cut or a full disk leaves at the
    end, half written) is dropped, and `dropped` says which, for the run to note."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dropped: list[str] = []

    def read(self) -> list[Record]:
        try:
            text = self.path.read_bytes().decode("utf-8", "replace")
        except (FileNotFoundError, NotADirectoryError):
            return []
        except (OSError, RuntimeError) as exc:
            raise os_error(exc, "read", self.path) from None
        records, self.dropped = [], []
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            step = record.get("step") if isinstance(record, dict) else None
            if not isinstance(step, int) or isinstance(step, bool):
                where = "its last line" if number == len(lines) else f"line {number}"
                self.dropped.append(f"{where} is not a whole record and was dropped")
                continue
            records.append(record)
        return records

    def keep_until(self, step: int) -> list[Record]:
        """Drop the records after ``step`` (a resumed run redoes those steps); return the rest."""
        kept = [r for r in self.read() if r["step"] <= step]
        write_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        return kept

    def reset(self) -> None:
        write_atomic(self.path, "")

    def append(self, record: Record) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _number(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.3e}"


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def describe(record: Record) -> str:
    """A record as one line: the same words in plain logs and above the progress bar."""
    parts = []
    for key, value in record.items():
        if key in ("kind", "step", "epoch", "time", "eta", "samples_per_s", "steps"):
            continue
        if key.endswith("accuracy"):
            parts.append(f"{key} {100 * value:.2f}%")
        elif key == "lr":
            parts.append(f"lr {value:.3g}")
        elif isinstance(value, float):
            parts.append(f"{key} {_number(value)}")
    return "  ".join(parts)


class Display(Protocol):
    def start(self, total: int, done: int) -> None: ...

    def show(self, record: Record) -> None: ...

    def note(self, text: str) -> None: ...

    def stop(self) -> None: ...


class PlainDisplay:
    """One line per record, for logs: ``step 100/500  loss 0.41 ...  1,234 samples/s  eta``."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.total = 0

    def start(self, total: int, done: int) -> None:
        self.total = total

    def show(self, record: Record) -> None:
        width = len(str(self.total))
        head = f"{record['kind']:<5} step {record['step']:>{width}}/{self.total}"
        if "epoch" in record:
            head += f"  epoch {record['epoch']:.2f}"
        tail = ""
        if "samples_per_s" in record:
            tail = f"  {record['samples_per_s']:,.0f} samples/s  eta {_clock(record['eta'])}"
        print(f"{head}  {describe(record)}{tail}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def stop(self) -> None:
        pass


class RichDisplay:
    """A rich progress bar (step, loss, throughput, ETA); eval results print above it."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console()
        self.progress = Progress(
            TextColumn("[bold]training"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss [cyan]{task.fields[loss]}"),
            TextColumn("{task.fields[speed]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.task_id: Any = None

    def start(self, total: int, done: int) -> None:
        self.progress.start()
        self.task_id = self.progress.add_task(
            "train", total=total, completed=done, loss="-", speed=""
        )

    def show(self, record: Record) -> None:
        if record["kind"] == "eval":
            self.progress.console.print(f"eval  step {record['step']}  {describe(record)}")
            return
        loss = record.get("loss", math.nan)
        speed = f"{record.get('samples_per_s', 0):,.0f} samples/s"
        self.progress.update(
            self.task_id, completed=record["step"], loss=_number(loss), speed=speed
        )

    def note(self, text: str) -> None:
        self.progress.console.print(text)

    def stop(self) -> None:
        self.progress.stop()


def display_for(stream: TextIO | None = None) -> Display:
    """A progress bar on a terminal, plain lines elsewhere."""
    stream = stream or sys.stdout
    return RichDisplay() if stream.isatty() else PlainDisplay(stream)


class QuietDisplay:
    """Nothing shown: for the Python function called with ``quiet=True``."""

    def start(self, total: int, done: int) -> None:
        pass

    def show(self, record: Record) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def stop(self) -> None:
        pass

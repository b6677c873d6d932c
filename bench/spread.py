"""How far `run.py`'s ratios move from one process to the next.

``python bench/spread.py [--quick] [--runs 4] [--out JSON]`` measures the compile and steady rows
of both cases and the growth from one block to twelve (`run.measure`, `run.measure_growth`
without the 48-block depth), ``--runs`` times, each run in a fresh process of its own started
after the last one ended, so that every run pays for its own caches, page faults and
whatever else the machine was doing. It prints each row's least, median and greatest ratio and
how many runs met the target, and saves the runs (``docs/performance-spread.json`` unless
``--out`` says otherwise; ``--quick`` saves nothing unless asked), from which ``run.py``
writes the "Across runs" section of docs/performance.md.

Why: a single run's median hides how much a ratio moves between processes on a shared
two-core machine (10 to 20 %), and a target met in one run and missed in the next is not met.
The first outputs are left out: each of their samples is a fresh process already.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import harness, run  # noqa: E402


def child(quick: bool) -> list[harness.Row]:
    """One run: every case's compile and steady rows, then the growth rows."""

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows: list[harness.Row] = []
    for case in run.cases(quick):
        log(case.name)
        rows += run.measure(case, quick, log, first=False)
    return rows + run.measure_growth(quick, log, deep=False)


def one_run(quick: bool) -> list[harness.Row]:
    """`child` in a fresh process; its rows from the last line of its output."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child"] + (["--quick"] * quick)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"a run of bench/spread.py failed:\n{done.stderr[-3000:]}")
    return [harness.Row(**r) for r in json.loads(done.stdout.strip().splitlines()[-1])]


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="run.py's tiny models")
    parser.add_argument("--runs", type=int, default=4, help="fresh processes, one by one (4)")
    parser.add_argument("--out", type=Path, help="where to save the runs (a .json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps([dataclasses.asdict(r) for r in child(args.quick)]))
        return {}
    if args.runs < 2:
        parser.error("--runs must be at least 2: a spread needs two runs")
    start, load = time.perf_counter(), os.getloadavg()
    runs = []
    for i in range(args.runs):
        print(f"run {i + 1} of {args.runs}", file=sys.stderr, flush=True)
        runs.append(one_run(args.quick))
    minutes = (time.perf_counter() - start) / 60
    record = {
        "runs": [[dataclasses.asdict(r) for r in rows] for rows in runs],
        "kinds": {
            **{c.name: c.kind for c in run.cases(args.quick)},
            run.GROWTH: "growth",
        },
        "command": "python bench/spread.py" + (" --quick" if args.quick else ""),
        "machine": run.machine(),
        "notes": (
            f"- load average (1, 5, 15 min): {run.fmt_load(load)} at the start, "
            f"{run.fmt_load(os.getloadavg())} at the end; the {args.runs} runs took "
            f"{minutes:.0f} min"
        ),
    }
    print("\n".join(run.spread_section(record)))
    out = args.out or (None if args.quick else ROOT / "docs" / run.SPREAD_FILE)
    if out is not None:
        out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    return record


if __name__ == "__main__":
    main()

"""`--check`'s total per device stays within 1.25× of XLA's, on the bench's own cases.

Runs ``bench/memory_ratio.py`` (it compiles `lbdl train`'s step, Adam, the state donated, and
reads ``memory_analysis()``) for GPT on 2 virtual CPU devices under dp and tp, two of the cases
docs/scaling.md's table shows within 1.25× ("Against XLA's totals"); the full table is the
bench's, minutes long. What it guards: the training step's XLA options (`xla_options`: one
copy recomputed at a time) and the checker's figures (`compiler.memory`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpt_on_two_devices_is_within_a_quarter_of_xla() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = [sys.executable, "bench/memory_ratio.py", "2", "--family", "gpt"]
    args += ["--strategy", "dp", "--strategy", "tp"]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()[2:]]
    kib = [[float(cell.split()[0]) for cell in row[3:5]] for row in rows]  # XLA's, the checker's
    ratios = {row[1].strip(): xla / ours for row, (xla, ours) in zip(rows, kib, strict=True)}
    assert set(ratios) == {"dp", "tp"}
    for strategy, ratio in ratios.items():
        assert 0.8 <= ratio <= 1.25, f"gpt {strategy} on 2 devices: XLA ÷ checker {ratio:.3f}"

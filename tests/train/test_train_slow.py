"""The issue's promises at full size: the README's digits command, and Ctrl-C on a real
process. Marked slow; CI runs them (about 15 s together on two cores)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_helpers import TINY_BN

from lbdl_dsl import cli as main

REPO = Path(__file__).resolve().parents[2]
README_COMMAND = (
    "lbdl train specs/digits-cnn.lbdl --data digits --epochs 10 --lr 3e-3 --schedule cosine"
)


@pytest.mark.slow
def test_the_readme_digits_command_reaches_97_percent(tmp_path: Path, capsys) -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    assert README_COMMAND in readme
    args = README_COMMAND.split()[1:]
    args[1] = str(REPO / args[1])
    assert main.main([*args, "-o", str(tmp_path / "digits")]) == 0
    out = capsys.readouterr().out
    accuracy = float(re.search(r"test: accuracy ([0-9.]+)%", out).group(1))
    assert accuracy >= 97.0
    printed = re.search(r"test: accuracy [0-9.]+%, loss [0-9.]+ \(360 samples\)", readme)
    assert printed, "the README shows the command's printed accuracy"


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_resume_finishes(spec_file, tmp_path: Path) -> None:
    spec = spec_file(TINY_BN)
    run = tmp_path / "run"
    command = [sys.executable, "-m", "lbdl_dsl", "train", str(spec), "--data", "synthetic"]
    command += ["--steps", "100000", "--batch", "8", "--log-every", "1", "-o", str(run)]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    text = err.decode()
    step = int(re.search(r"interrupted at step (\d+): checkpoint saved in ", text).group(1))
    assert "hint: continue with the same command and --resume" in text and "Traceback" not in text
    assert [p.name for p in (run / "checkpoints").iterdir()] == [str(step)]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert records[-1]["step"] == step
    command[command.index("100000")] = str(step + 3)
    done = subprocess.run([*command, "--resume"], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert f"resuming from the checkpoint of step {step}" in done.stdout.decode()
    assert json.loads((run / "run.json").read_text())["step"] == step + 3

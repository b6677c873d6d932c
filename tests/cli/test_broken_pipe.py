"""`lbdl VERB ... | head`: a reader that goes away before the output is written ends the
command quietly, with 141 as a process killed by SIGPIPE, never "error: Broken pipe" (exit 1)
or Python's "Exception ignored ... BrokenPipeError" at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "lbdl_dsl", "check", str(REPO / "specs" / "gpt2.lbdl")]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the command has printed a line
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 141, err
    assert err == ""

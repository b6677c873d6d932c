"""``lbdl launch`` cleans up and multi-process runs fail fast (two processes on 127.0.0.1).

A user error in one process ends the run within seconds with that process's message and exit 1;
a peer that never starts is an error naming the coordinator; SIGTERM to the launcher reaches
every process, which checkpoint at one agreed step and exit; a peer killed mid-run is named and
the run ends; a descendant holding the output pipe cannot hang the launcher; ``-n`` is bounded
by the cores unless forced. Each process is a real ``lbdl train`` (or a shell), started apart
from the test's own (devices are configured before JAX starts).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from train_helpers import TINY_MLP

REPO = Path(__file__).resolve().parents[2]
LBDL = [sys.executable, "-m", "lbdl_dsl"]
LAUNCH = [*LBDL, "launch", "-n", "2", "--devices-per-process", "1", "--"]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), XLA_FLAGS="--xla_backend_optimization_level=0")
    env.pop("JAX_NUM_CPU_DEVICES", None)
    return env | extra


def _train(spec: Path, run: str, *more: str) -> list[str]:
    return [*LBDL, "train", str(spec), "--data", "synthetic", "--batch", "8", "--mesh",
            "data=2", "-o", run, "--eval-samples", "8", *more]  # fmt: skip


class _Watched:
    """A launcher whose output lines are read as they come, each with its arrival time."""

    def __init__(self, args: list[str], cwd: Path, **env: str) -> None:
        self.proc = subprocess.Popen(args, cwd=cwd, env=_env(**env), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)  # fmt: skip
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def until(self, text: str, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if text in line:
                    return at
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.05)
        self.proc.kill()  # the launcher's groups go with it only by signal: stop it anyway
        self.finish()
        raise AssertionError(f"no line with {text!r}:\n{self.text[-3000:]}")

    def finish(self, timeout: float = 120) -> tuple[int, float]:
        code = self.proc.wait(timeout=timeout)
        ended = time.monotonic()
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code, ended

    @property
    def text(self) -> str:
        return "".join(line for _, line in self.lines)


@pytest.mark.slow
def test_a_user_error_in_one_process_ends_the_run_within_seconds(spec_file, tmp_path) -> None:
    spec = spec_file(TINY_MLP)
    bad = " ".join(_train(spec, "run", "--steps", "100000")).replace("synthetic", "$DATA")
    script = f'if [ "$LBDL_PROCESS_ID" = 1 ]; then DATA=nope; else DATA=synthetic; fi; {bad}'
    run = _Watched([*LAUNCH, "sh", "-c", script], tmp_path)
    failed = run.until("[1] error: --data: unknown data `nope`")
    code, ended = run.finish()
    assert code == 1, run.text[-3000:]
    assert ended - failed < 10, run.text[-3000:]
    assert "lbdl launch: process 1 (pid " in run.text and "exited with code 1" in run.text


def test_a_peer_that_never_starts_is_an_error_naming_the_coordinator(spec_file, tmp_path) -> None:
    spec = spec_file(TINY_MLP)
    args = [*_train(spec, "run", "--steps", "5"), "--coordinator", "127.0.0.1:1",
            "--num-processes", "2", "--process-id", "1"]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(args, cwd=tmp_path, env=_env(LBDL_INIT_TIMEOUT="3"),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "process 1 of 2 could not join" in done.stderr and "127.0.0.1:1" in done.stderr
    assert "Check failure" not in done.stderr and time.monotonic() - started < 60


@pytest.mark.slow
def test_sigterm_to_the_launcher_checkpoints_every_process(spec_file, tmp_path) -> None:
    spec = spec_file(TINY_MLP)
    run = _Watched([*LAUNCH, *_train(spec, "run", "--steps", "1000000", "--log-every", "1")],
                   tmp_path)  # fmt: skip
    run.until("train step")
    sent = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    code, ended = run.finish()
    assert code == 130, run.text[-3000:]
    assert ended - sent < 30
    assert "interrupted at step" in run.text
    steps = [int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit()]
    assert steps, run.text[-3000:]
    assert f"interrupted at step {max(steps)}:" in run.text  # both saved the same agreed step


def _killed(spec: Path, tmp_path: Path, victim: int, *more: str) -> tuple[_Watched, float]:
    """A run of 2 processes whose process ``victim`` is killed (SIGKILL, with its shell) once
    the run has logged a few steps; the launcher's output and when it named the dead one."""
    train = " ".join(_train(spec, "run", "--steps", "1000000", "--log-every", "1", *more))
    dies = (f"{train} & while [ $(cat run/metrics.jsonl 2>/dev/null | wc -l) -lt 5 ]; "
            "do sleep 0.1; done; kill -9 0")  # the group: the shell, its training  # fmt: skip
    script = f'if [ "$LBDL_PROCESS_ID" = {victim} ]; then {dies}; else exec {train}; fi'
    run = _Watched([*LAUNCH, "sh", "-c", script], tmp_path)
    named = run.until(f"lbdl launch: process {victim} (pid ")
    return run, named


def _gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "State:\tZ" in status.read_text()


@pytest.mark.slow
def test_a_dead_peer_is_named_and_the_survivor_checkpoints(spec_file, tmp_path) -> None:
    spec = spec_file(TINY_MLP)
    run, named = _killed(spec, tmp_path, 1)
    code, ended = run.finish()
    assert code == 1 and ended - named < 25, run.text[-3000:]
    assert "was killed by SIGKILL; asking process(es) 0 to checkpoint and stop" in run.text
    assert "Traceback" not in run.text and "Check failure" not in run.text, run.text[-3000:]
    match = re.search(r"it saved the checkpoint of step (\d+) alone", run.text)
    assert match, run.text[-3000:]
    step = int(match.group(1))
    folder = tmp_path / "run"
    assert (folder / "checkpoints" / str(step)).is_dir()
    assert json.loads((folder / "run.json").read_text())["step"] == step  # where to resume
    survivor = int((folder / ".lock").read_text())  # process 0 held the folder
    assert _gone(survivor)
    resumed = subprocess.run(
        _train(spec, "run", "--steps", str(step + 2), "--resume"), cwd=tmp_path,
        env=_env(JAX_NUM_CPU_DEVICES="2"), capture_output=True, text=True, timeout=120,
        check=False)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from the checkpoint of step {step}" in resumed.stdout + resumed.stderr


@pytest.mark.full
def test_the_survivors_checkpoint_continues_as_if_nothing_happened(spec_file, tmp_path) -> None:
    """Resumed on one process, the survivor's checkpoint ends at the weights of a run that was
    never interrupted, to the bit (its step, parameters, optimiser state and data position are
    one consistent state)."""
    spec = spec_file(TINY_MLP)
    run, _ = _killed(spec, tmp_path, 1)
    run.finish()
    match = re.search(r"checkpoint of step (\d+) alone", run.text)
    assert match, run.text[-3000:]
    step = int(match.group(1))
    for folder, more in (("run", ["--resume"]), ("whole", [])):
        args = _train(spec, folder, "--steps", str(step + 5), *more)
        done = subprocess.run(args, cwd=tmp_path, env=_env(JAX_NUM_CPU_DEVICES="2"),
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    from safetensors.numpy import load_file

    resumed = load_file(tmp_path / "run" / "params.safetensors")
    whole = load_file(tmp_path / "whole" / "params.safetensors")
    assert resumed.keys() == whole.keys()
    for key in whole:
        assert (resumed[key] == whole[key]).all(), key


@pytest.mark.full
def test_a_survivor_with_part_of_the_state_names_the_last_complete_checkpoint(
    spec_file, tmp_path
) -> None:
    spec = spec_file(TINY_MLP)
    fsdp = ("--mesh", "fsdp=2", "--shard", "fsdp", "--save-every", "2")  # the last --mesh holds
    run, _ = _killed(spec, tmp_path, 1, *fsdp)
    code, _ = run.finish()
    match = re.search(r"it saved no checkpoint \(each process holds only its part of the "
                      r"state\); the newest complete one: step (\d+)", run.text)  # fmt: skip
    assert code == 1 and match, run.text[-3000:]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["step"] == int(match.group(1))


@pytest.mark.full
def test_a_dead_coordinator_leaves_the_last_complete_checkpoint(spec_file, tmp_path) -> None:
    """Process 0 hosts `jax.distributed`'s coordination service: when it dies, JAX's own agent
    ends every other process at once, before it can save. The run still ends with exit 1 and
    the dead process named, nothing left running, and the last checkpoint all processes wrote
    is where it resumes."""
    spec = spec_file(TINY_MLP)
    run, named = _killed(spec, tmp_path, 0, "--save-every", "2")
    code, ended = run.finish()
    assert code == 1 and ended - named < 25, run.text[-3000:]
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["step"]
    assert recorded > 0 and (tmp_path / "run" / "checkpoints" / str(recorded)).is_dir()
    resumed = subprocess.run(
        _train(spec, "run", "--steps", str(recorded + 2), "--resume"), cwd=tmp_path,
        env=_env(JAX_NUM_CPU_DEVICES="2"), capture_output=True, text=True, timeout=120,
        check=False)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def test_a_grandchild_holding_the_pipe_cannot_hang_the_launcher(tmp_path: Path) -> None:
    args = [*LBDL, "launch", "-n", "2", "--", "sh", "-c", "sleep 300 & echo $!"]
    started = time.monotonic()
    done = subprocess.run(args, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0 and time.monotonic() - started < 30, done.stderr
    pids = [int(line.split()[-1]) for line in done.stdout.splitlines()]
    assert len(pids) == 2
    time.sleep(0.5)
    for pid in pids:  # the sleeps went with their process groups (gone, or a zombie)
        assert _gone(pid)


def test_more_processes_than_cores_needs_force(tmp_path: Path) -> None:
    n = str((os.cpu_count() or 1) + 1)
    done = subprocess.run([*LBDL, "launch", "-n", n, "--", "true"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1 and "--force" in done.stderr and "Traceback" not in done.stderr
    forced = subprocess.run([*LBDL, "launch", "-n", n, "--force", "--", "true"], cwd=tmp_path,
                            env=_env(), capture_output=True, text=True, timeout=60,
                            check=False)  # fmt: skip
    assert forced.returncode == 0, forced.stderr

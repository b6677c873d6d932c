"""``lbdl launch -n N -- lbdl train ...``: N processes of one run on this machine.

Each process is the given command with the variables `backends.jax.distributed.initialize`
reads: the coordinator (process 0, on 127.0.0.1 and a free port), the number of processes and
this one's index, and with ``--devices-per-process K`` its K devices (accelerators K·i to
K·i + K − 1; on a CPU, K virtual devices). Process 0's output is shown as it is, the others'
lines behind ``[i]``.

Cleaning up: each process runs in a process group of its own, and every signal the launcher
sends goes to the whole group, so nothing a process started outlives the run. When one process
fails (or is killed), the launcher, its parent, notices at once and names it in one line (index,
pid, exit code or signal, its last error line). The others notice by themselves (their next
collective fails): ``lbdl train`` saves alone what it holds whole (`training.rescue`) and exits
1; whatever is left 2 s later gets SIGTERM, and SIGKILL 20 s after that. ``lbdl launch`` exits
with the failed process's code, or 1 if it was killed by a signal. SIGTERM or Ctrl-C to the
launcher becomes SIGTERM to every group: ``lbdl train`` then checkpoints at a step every
process agrees on and exits (`training.devices`). When the processes have exited, a descendant
still holding the output pipe is killed rather than waited for. ``-n`` is at most the
machine's cores unless ``--force``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from lbdl_dsl.cli.common import guarded
from lbdl_dsl.core.errors import LbdlError

HELP = "run a command as N processes of one distributed run on this machine"
_GRACE = 30.0  # seconds a process asked to stop (a signal to the launcher) has to checkpoint
_PEER_GRACE = 20.0  # after another process failed: its peers save alone, then stop
# Seconds the others get to notice a failed process by themselves (their next collective fails)
# before SIGTERM: under several processes SIGTERM goes to jax.distributed's preemption service,
# whose barrier with a dead process can get a survivor terminated by JAX before it saves.
_NOTICE = 2.0
MAX_PROCESSES = 1024  # processes (and devices of each) one machine is asked to start, forced
_DRAIN = 2.0  # seconds the output of exited processes may still take to arrive


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-n", "--processes", type=int, required=True, metavar="N", help="how many processes"
    )
    p.add_argument(
        "--devices-per-process",
        type=int,
        metavar="K",
        help="each process's devices: accelerators K·i … K·i+K−1, or K virtual CPU devices",
    )
    p.add_argument("--port", type=int, help="the coordinator's port (default: a free one)")
    p.add_argument(
        "--force", action="store_true", help="allow more processes than this machine has cores"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environments(n: int, port: int, per: int | None, base: dict[str, str]) -> list[dict[str, str]]:
    """Each process's environment (pure: what `lbdl launch` promises its processes)."""
    from lbdl_dsl.backends.jax import distributed as d

    out = []
    for i in range(n):
        env = dict(base)
        env[d.ENV_COORDINATOR] = f"127.0.0.1:{port}"
        env[d.ENV_NUM_PROCESSES] = str(n)
        env[d.ENV_PROCESS_ID] = str(i)
        if per is not None:
            env[d.ENV_LOCAL_DEVICES] = ",".join(str(per * i + k) for k in range(per))
            env["JAX_NUM_CPU_DEVICES"] = str(per)
        out.append(env)
    return out


def _pump(
    stream: IO[bytes], prefix: bytes, sink: Any, lock: threading.Lock, last: list[bytes]
) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sink.write(prefix + line)
            sink.flush()
        if line.strip():
            last[:] = [*last[-4:], line]  # its last lines, for the message if it fails


def launch(
    command: list[str],
    n: int,
    per: int | None = None,
    port: int | None = None,
    force: bool = False,
) -> int:
    """Run ``command`` as ``n`` processes; the first non-zero exit code, or 0."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LbdlError("lbdl launch: no command", None, hint="lbdl launch -n 2 -- lbdl train ...")
    if n < 1 or (per is not None and per < 1):
        raise LbdlError("-n and --devices-per-process must be at least 1", None)
    cores = os.cpu_count() or 1
    if n > cores and not force:
        raise LbdlError(
            f"lbdl launch: -n {n} is more processes than this machine's {cores} cores",
            None,
            hint=f"use -n {cores} or fewer (more devices each: --devices-per-process), or --force",
        )
    if n > MAX_PROCESSES or (per is not None and per > MAX_PROCESSES):
        raise LbdlError(
            f"-n {n} and --devices-per-process {per}: at most {MAX_PROCESSES} each on one machine",
            None,
            hint="a run over several machines starts one `lbdl train` per machine with "
            "--coordinator (docs/scaling.md)",
        )
    if port is not None and not 0 <= port <= 65535:
        raise LbdlError(f"--port {port}: a port is a number from 1 to 65535 (0: a free one)")
    envs = environments(n, port or free_port(), per, dict(os.environ))
    run = _Run(getattr(sys.stdout, "buffer", None) or _Text(sys.stdout))
    with _forwarded(run):
        try:
            for i, env in enumerate(envs):
                run.start(command, env, b"" if i == 0 else f"[{i}] ".encode())
        except OSError as exc:
            run.stop(run.procs, _PEER_GRACE)
            raise LbdlError(
                f"lbdl launch: cannot run `{command[0]}`: {exc.strerror}", None
            ) from None
        code = run.wait()
    run.drain()
    return code


class _Text:
    """Bytes written to a text stream (a ``sys.stdout`` replaced by one without a buffer)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        self.stream.flush()


class _Run:
    """The processes of one run, each the leader of its own process group, and their pumps."""

    def __init__(self, sink: Any) -> None:
        self.sink, self.lock = sink, threading.Lock()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pumps: list[threading.Thread] = []
        self.last: list[list[bytes]] = []  # each process's last non-empty lines
        self.signalled: int | None = None  # a signal the launcher received, if any

    def start(self, command: list[str], env: dict[str, str], prefix: bytes) -> None:
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own: signals reach its descendants
        )
        self.procs.append(proc)
        self.last.append([])
        pump = threading.Thread(
            target=_pump,
            args=(proc.stdout, prefix, self.sink, self.lock, self.last[-1]),
            daemon=True,
        )
        pump.start()
        self.pumps.append(pump)

    def say(self, text: str) -> None:
        with self.lock:
            self.sink.flush()
            print(f"lbdl launch: {text}", file=sys.stderr, flush=True)

    def wait(self) -> int:
        """Wait for all; the first to fail is named and stops the others. Every process is
        polled in each round, and of those that ended in the same round a process killed by
        a signal is named before one that exited with an error (its peers' errors follow
        from its death)."""
        pending = list(self.procs)
        code = 0
        while pending:
            ended = [p for p in pending if p.poll() is not None]
            if not ended:
                time.sleep(0.05)
                continue
            for proc in ended:
                pending.remove(proc)
            failed = sorted((p for p in ended if p.returncode), key=lambda p: p.returncode > 0)
            if failed and code == 0 and self.signalled is None:
                code = max(failed[0].returncode, 1)  # a process killed by a signal: 1
                self.say(self.obituary(failed[0], pending))
                self.stop(pending, _PEER_GRACE, _NOTICE)
        if self.signalled is not None and code == 0:
            codes = [p.returncode for p in self.procs]
            code = next((c if c > 0 else 128 - c for c in codes if c), 0)
        return code

    def obituary(
        self, dead: subprocess.Popen[bytes], pending: list[subprocess.Popen[bytes]]
    ) -> str:
        """One line: which process failed (index, pid), how, the last error line of its
        output when it exited with one (or its last line; a process killed outright wrote
        none), and what becomes of the others."""
        i, rc = self.procs.index(dead), dead.returncode
        how = f"exited with code {rc}" if rc > 0 else f"was killed by {_signame(-rc)}"
        text = f"process {i} (pid {dead.pid}) {how}"
        self.pumps[i].join(timeout=0.2)  # its last lines, if they are still on their way
        lines = [b.decode("utf-8", "replace").strip() for b in self.last[i]]
        last = next((x for x in reversed(lines) if "error" in x.lower()), lines[-1:] or [""])
        last = last if isinstance(last, str) else last[0]
        if last and rc > 0:
            text += f" (its last line: {last[:200]})"
        if pending:
            others = ", ".join(str(self.procs.index(p)) for p in pending)
            text += f"; asking process(es) {others} to checkpoint and stop"
        return text

    def stop(self, procs: list[subprocess.Popen[bytes]], grace: float, notice: float = 0.0) -> None:
        """After ``notice`` seconds for the processes to end by themselves, SIGTERM to each
        process's group, then, ``grace`` seconds later, SIGKILL to the groups still there."""
        _wait_all(procs, notice)
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        _wait_all(procs, grace)
        for proc in procs:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()

    def drain(self) -> None:
        """The remaining output; then what still holds a pipe (a process's descendant) is
        killed with its group, and a pipe held from outside every group is abandoned."""
        deadline = time.monotonic() + _DRAIN
        for pump in self.pumps:
            pump.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(p.is_alive() for p in self.pumps):
            for proc in self.procs:
                _signal_group(proc, signal.SIGKILL)
            for pump in self.pumps:
                pump.join(timeout=_DRAIN)
        for proc, pump in zip(self.procs, self.pumps, strict=True):
            if proc.stdout is not None and not pump.is_alive():
                proc.stdout.close()


def _wait_all(procs: list[subprocess.Popen[bytes]], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))


def _signame(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the process leads its group (start_new_session)


def _kill_all(run: _Run) -> None:
    for proc in run.procs:
        _signal_group(proc, signal.SIGKILL)


@contextlib.contextmanager
def _forwarded(run: _Run) -> Iterator[None]:
    """SIGTERM and SIGINT to the launcher: SIGTERM to every process group, once; a second
    signal kills the groups. The main thread waits; the handler only sends signals."""

    def handler(signum: int, frame: object) -> None:
        if run.signalled is not None:
            _kill_all(run)
            return
        run.signalled = signum
        run.say(f"{_signame(signum)}: asking every process to checkpoint and stop")
        for proc in run.procs:
            _signal_group(proc, signal.SIGTERM)
        late = threading.Timer(_GRACE, _kill_all, args=(run,))
        late.daemon = True
        late.start()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run(args: argparse.Namespace) -> int:
    return guarded(
        lambda: launch(
            args.command, args.processes, args.devices_per_process, args.port, args.force
        ),
        "lbdl launch",
    )

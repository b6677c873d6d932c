"""``lbdl launch -n N -- lbdl train ...``: N processes of one run on this machine.

Each process is the given command with the variables `backends.jax.distributed.initialize`
reads: the coordinator (process 0, on 127.0.0.1 and a free port), the number of processes and
this one's index, and with ``--devices-per-process K`` its K devices (accelerators K·i to
K·i + K − 1; on a CPU, K virtual devices). Process 0's output is shown as it is, the others'
lines behind ``[i]``. When one process fails, the others are stopped and its exit code is
``lbdl launch``'s; Ctrl-C reaches all of them.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import IO, Any

from lbdl_dsl.cli.common import guarded
from lbdl_dsl.core.errors import LbdlError

HELP = "run a command as N processes of one distributed run on this machine"
_GRACE = 10.0  # seconds a stopped process has before it is killed
MAX_PROCESSES = 1024  # processes (and devices of each) one machine is asked to start


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
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environments(n: int, port: int, per: int | None, base: dict[str, str]) -> list[dict]:
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


class _Text:
    """Bytes written to a text stream (a ``sys.stdout`` replaced by one without a buffer)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        self.stream.flush()


def _pump(stream: IO[bytes], prefix: bytes, sink: Any, lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sink.write(prefix + line)
            sink.flush()


def launch(command: list[str], n: int, per: int | None = None, port: int | None = None) -> int:
    """Run ``command`` as ``n`` processes; the first non-zero exit code, or 0."""
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LbdlError("lbdl launch: no command", None, hint="lbdl launch -n 2 -- lbdl train ...")
    if n < 1 or (per is not None and per < 1):
        raise LbdlError("-n and --devices-per-process must be at least 1", None)
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
    sink = getattr(sys.stdout, "buffer", None) or _Text(sys.stdout)
    lock = threading.Lock()
    procs, pumps = [], []
    try:
        for i, env in enumerate(envs):
            proc = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            procs.append(proc)
            prefix = b"" if i == 0 else f"[{i}] ".encode()
            pump = threading.Thread(target=_pump, args=(proc.stdout, prefix, sink, lock))
            pump.start()
            pumps.append(pump)
    except OSError as exc:
        _stop(procs)
        raise LbdlError(f"lbdl launch: cannot run `{command[0]}`: {exc.strerror}", None) from None
    code = _wait(procs)
    for pump in pumps:
        pump.join()
    for proc in procs:
        if proc.stdout is not None:
            proc.stdout.close()
    return code


def _wait(procs: list[subprocess.Popen]) -> int:
    """Wait for all; the first to fail stops the others."""
    pending = list(procs)
    code = 0
    while pending:
        for proc in list(pending):
            try:
                rc = proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
            pending.remove(proc)
            if rc != 0 and code == 0:
                code = rc if rc > 0 else 128 - rc
                _stop(pending)
    return code


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(args: argparse.Namespace) -> int:
    return guarded(
        lambda: launch(args.command, args.processes, args.devices_per_process, args.port),
        "lbdl launch",
    )

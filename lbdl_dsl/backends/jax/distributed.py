"""Several processes, one computation: ``jax.distributed`` set up from flags, a launcher or a
cluster.

`initialize` must run before anything else touches JAX. It takes, in order: explicit values
(``lbdl train --coordinator HOST:PORT --num-processes N --process-id I``), the variables `lbdl
launch` sets (``LBDL_COORDINATOR``, ``LBDL_NUM_PROCESSES``, ``LBDL_PROCESS_ID``,
``LBDL_LOCAL_DEVICES``), or a cluster JAX recognises by itself (SLURM, Open MPI, and the other
environments of ``jax.distributed``'s cluster detection; ``LBDL_DISTRIBUTED=auto`` asks for it
where no variable above says so, as on a TPU pod's hosts); with none of them, one process runs
alone and nothing is initialised. On CPUs, collectives between processes go through gloo.

Each process then feeds its own slice of every global batch (`process_rows`); checkpoints are
written by every process, each its own shards (orbax).

Failing fast: joining waits ``LBDL_INIT_TIMEOUT`` seconds (60) for the others, then names the
coordinator's address; a peer that stops answering is noticed after ``LBDL_HEARTBEAT_TIMEOUT``
seconds (30). A process that stops on an error leaves at once (`leave`), without
``jax.distributed``'s shutdown barrier, which would wait five minutes for peers that are
themselves waiting; a collective whose peer is gone is an error naming it (`peer_error`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lbdl_dsl.core.errors import LbdlError

ENV_COORDINATOR = "LBDL_COORDINATOR"
ENV_NUM_PROCESSES = "LBDL_NUM_PROCESSES"
ENV_PROCESS_ID = "LBDL_PROCESS_ID"
ENV_LOCAL_DEVICES = "LBDL_LOCAL_DEVICES"  # a launcher's per-process device ids: "0,1"
ENV_DISTRIBUTED = "LBDL_DISTRIBUTED"  # "auto": join through JAX's own detection (TPU pods)
ENV_INIT_TIMEOUT = "LBDL_INIT_TIMEOUT"  # seconds to wait for every process to join (60)
ENV_HEARTBEAT_TIMEOUT = "LBDL_HEARTBEAT_TIMEOUT"  # seconds of silence before a peer is dead (30)
_JOINED: list[Processes] = []  # this process's place once it joined others (for `leave`)
_PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "heartbeat",
    "Gloo",
    "coordination service",
    "DEADLINE_EXCEEDED",
    "UNAVAILABLE",
)
_CLUSTERS = {
    "SLURM": ("SLURM_JOB_ID", "SLURM_NTASKS"),
    "Open MPI": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    "MPICH/PMI": ("PMI_RANK", "PMI_SIZE"),
}


@dataclass(frozen=True)
class Processes:
    """How this run is spread: this process's index, their number, and where it came from."""

    index: int
    count: int
    source: str  # "flags", "lbdl launch", "SLURM", ..., or "single process"


def _int(value: str | int | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise LbdlError(f"{name}: `{value}` is not a whole number", None) from None


def detect(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], str]:
    """The arguments for ``jax.distributed.initialize`` and where they came from (pure)."""
    env = os.environ if env is None else env
    explicit = (coordinator, num_processes, process_id)
    if any(v is not None for v in explicit):
        if any(v is None for v in explicit):
            raise LbdlError(
                "--coordinator, --num-processes and --process-id go together",
                None,
                hint="give all three, or none of them to detect a launcher or a cluster",
            )
        return _checked(coordinator, num_processes, process_id, None), "flags"
    if env.get(ENV_COORDINATOR):
        count = _int(env.get(ENV_NUM_PROCESSES), ENV_NUM_PROCESSES)
        index = _int(env.get(ENV_PROCESS_ID), ENV_PROCESS_ID)
        local = env.get(ENV_LOCAL_DEVICES)
        ids = [int(i) for i in local.split(",")] if local else None
        return _checked(env[ENV_COORDINATOR], count, index, ids), "lbdl launch"
    for name, (rank, size) in _CLUSTERS.items():
        if rank in env and (_int(env.get(size), size) or 1) > 1:
            return {}, name  # jax.distributed's own cluster detection fills everything in
    if env.get(ENV_DISTRIBUTED) == "auto":  # a TPU pod, or a cluster found by JAX alone
        return {}, "auto-detected"
    return {}, "single process"


def _checked(
    coordinator: str | None, count: int | None, index: int | None, local: list[int] | None
) -> dict[str, Any]:
    host, sep, port = (coordinator or "").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise LbdlError(
            f"--coordinator: `{coordinator}` is not HOST:PORT",
            None,
            hint="the address of process 0, e.g. --coordinator 10.0.0.1:1234",
        )
    if count is None or count < 1 or index is None or not 0 <= index < count:
        raise LbdlError(
            f"--process-id {index} of --num-processes {count}: the id must be 0 to N-1",
            None,
        )
    out: dict[str, Any] = {
        "coordinator_address": coordinator,
        "num_processes": count,
        "process_id": index,
    }
    if local is not None:
        out["local_device_ids"] = local
    return out


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> Processes:
    """Join the run's processes (see the module docstring); call it before using JAX."""
    import jax

    kwargs, source = detect(coordinator, num_processes, process_id)
    if source == "single process":
        return Processes(0, 1, source)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # the CPU backend's only
    wait = _int(os.environ.get(ENV_INIT_TIMEOUT), ENV_INIT_TIMEOUT) or 60
    heartbeat = _int(os.environ.get(ENV_HEARTBEAT_TIMEOUT), ENV_HEARTBEAT_TIMEOUT) or 30
    where = kwargs.get("coordinator_address", "the cluster's coordinator")
    who = (
        f"process {kwargs['process_id']} of {kwargs['num_processes']}"
        if "process_id" in kwargs
        else "this process"
    )

    def late(detail: str = "") -> LbdlError:
        return LbdlError(
            f"{who} could not join the run's other processes at {where} within {wait} s "
            f"({source}){detail}",
            None,
            hint=f"start every process, with process 0 reachable at {where}; "
            f"{ENV_INIT_TIMEOUT}=SECONDS waits longer",
        )

    # jax.distributed aborts the process (a C++ check failure, exit 134, five minutes by
    # default) when a peer never comes: a watchdog says so first, and exits 1
    joined_in_time = threading.Event()
    watchdog = threading.Timer(wait, _give_up, args=(joined_in_time, late()))
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            **kwargs,
            initialization_timeout=wait + 60,
            heartbeat_timeout_seconds=heartbeat,
            shutdown_timeout_seconds=10,
        )
    except (RuntimeError, ValueError) as exc:
        raise late(f": {str(exc).splitlines()[0][:300]}") from None
    finally:
        joined_in_time.set()
        watchdog.cancel()
    joined = Processes(jax.process_index(), jax.process_count(), source)
    _JOINED.append(joined)
    return joined


def _give_up(joined: threading.Event, error: LbdlError) -> None:
    if joined.is_set():
        return
    import sys

    print(error.render(), file=sys.stderr, flush=True)
    os._exit(1)


def leave(code: int) -> int:
    """``code``, after which a process that joined others and fails exits at once: its output
    flushed, and without ``jax.distributed``'s shutdown barrier (at exit, it would wait for
    peers stuck in a collective that this process will never enter)."""
    if code != 0 and _JOINED:
        import sys

        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    return code


def peer_error(exc: BaseException) -> LbdlError | None:
    """A collective or the coordination service failing because another process stopped: an
    error that names this process and what it saw, or None for anything else."""
    if not _JOINED:
        return None
    text = str(exc)
    if not any(mark in text for mark in _PEER_GONE):
        return None
    me = _JOINED[-1]
    return LbdlError(
        f"process {me.index} of {me.count}: another process of the run stopped or stopped "
        f"answering: {text.splitlines()[0][:300]}",
        None,
        hint="see the first process whose error `lbdl launch` (or the cluster) reports",
    )


def process_rows(global_batch: int, index: int, count: int) -> slice:
    """The rows of a global batch that process ``index`` of ``count`` loads and feeds."""
    if global_batch % count:
        raise LbdlError(
            f"a global batch of {global_batch} does not split over {count} processes",
            None,
            hint=f"use a multiple of {count}",
        )
    per = global_batch // count
    return slice(index * per, (index + 1) * per)

"""Several processes, one computation: ``jax.distributed`` set up from flags, a launcher or a
cluster.

`initialize` must run before anything else touches JAX. It takes, in order: explicit values
(``lbdl train --coordinator HOST:PORT --num-processes N --process-id I``), the variables `lbdl
launch` sets (``LBDL_COORDINATOR``, ``LBDL_NUM_PROCESSES``, ``LBDL_PROCESS_ID``,
``LBDL_LOCAL_DEVICES``), or a cluster JAX recognises by itself (SLURM, Open MPI, and the other
environments of ``jax.distributed``'s cluster detection); with none of them, one process runs
alone and nothing is initialised. On CPUs, collectives between processes go through gloo.

Each process then feeds its own slice of every global batch (`process_rows`); checkpoints are
written by every process, each its own shards (orbax).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from lbdl_dsl.core.errors import LbdlError

ENV_COORDINATOR = "LBDL_COORDINATOR"
ENV_NUM_PROCESSES = "LBDL_NUM_PROCESSES"
ENV_PROCESS_ID = "LBDL_PROCESS_ID"
ENV_LOCAL_DEVICES = "LBDL_LOCAL_DEVICES"  # a launcher's per-process device ids: "0,1"
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
) -> tuple[dict, str]:
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
    return {}, "single process"


def _checked(coordinator, count, index, local) -> dict:
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
    out = {"coordinator_address": coordinator, "num_processes": count, "process_id": index}
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
    try:
        jax.distributed.initialize(**kwargs)
    except (RuntimeError, ValueError) as exc:
        raise LbdlError(
            f"could not join the other processes ({source}): {str(exc).splitlines()[0][:300]}",
            None,
            hint="check the coordinator's address and that every process was started",
        ) from None
    return Processes(jax.process_index(), jax.process_count(), source)


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

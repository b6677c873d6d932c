"""The mesh flags of ``lbdl check``, ``lbdl build`` and ``lbdl-compile``: one helper for all.

``--mesh data=2,fsdp=2,tensor=2`` names a device mesh, ``--shard fsdp+tp`` (presets) or
``--shard D=fsdp heads=tensor`` (rules) places the parameters on it, ``--optimizer`` and
``--global-batch`` say what training keeps; `plan` turns them into the layout and memory figures
the summary prints (`memory_report`). Bad values are errors that name the flag (exit 1).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.compiler.memory import OPTIMIZERS
from lbdl_dsl.core.errors import LbdlError

if TYPE_CHECKING:  # imported when a mesh is given: a plain `--check` has no use for them
    from lbdl_dsl.backends.jax.model import Model
    from lbdl_dsl.backends.jax.parallel import Parallel
    from lbdl_dsl.memory_report import Plan


def add_mesh_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sharding (docs/scaling.md)")
    g.add_argument(
        "--mesh",
        metavar="AXES",
        help="a device mesh, e.g. data=2,fsdp=2,tensor=2: prints the memory per device",
    )
    g.add_argument(
        "--shard",
        nargs="+",
        metavar="RULE",
        help="presets dp, fsdp, tp, ep joined by + (fsdp+tp), and/or rules ROLE=AXIS or "
        "SYMBOL=AXIS (heads=tensor D=fsdp batch=data); default dp",
    )
    g.add_argument(
        "--optimizer",
        choices=tuple(OPTIMIZERS),
        default="adam",
        help="whose state the memory counts (default adam: two moments)",
    )
    g.add_argument(
        "--global-batch",
        type=int,
        metavar="N",
        help="the batch over all devices; the memory then has numbers for B, the batch per "
        "device (default: B stays a symbol)",
    )


def plan(args: argparse.Namespace, compiled: Checked) -> Plan | None:
    """The layout the flags ask for, or None without ``--mesh``; raises `LbdlError`."""
    mesh_text = getattr(args, "mesh", None)
    shard = getattr(args, "shard", None)
    if mesh_text is None:
        if shard:
            raise _shard_without_mesh()
        return None
    from lbdl_dsl.compiler.sharding import flag_error, parse_mesh, parse_rules, resolve
    from lbdl_dsl.memory_report import Plan

    mesh = parse_mesh(mesh_text)
    rules = parse_rules(shard or [], mesh)
    layout = resolve(compiled, mesh, rules)
    batch = getattr(args, "global_batch", None)
    if batch is not None and (batch < 1 or batch % layout.batch_pieces):
        raise flag_error(
            "--global-batch",
            f"{batch} samples do not split evenly over {layout.batch_pieces} batch shards "
            f"({', '.join(layout.batch) or 'none'})",
            f"use a multiple of {layout.batch_pieces}",
        )
    return Plan(layout, getattr(args, "optimizer", "adam"), batch)


def summary(
    checked: Checked, plan: Plan | None, depth: int | None, as_json: bool, terminal: bool
) -> str:
    """The summary (`report`) and, with a mesh, the memory per device after it (or inside the
    JSON object, under ``"sharding"``)."""
    import json

    from lbdl_dsl import report

    if as_json:
        obj = report.to_json(checked)
        if plan is not None:
            from lbdl_dsl import memory_report

            obj["sharding"] = memory_report.to_json(checked, plan)
        return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    text = report.render_table(checked, depth, terminal=terminal)
    if plan is not None:
        from lbdl_dsl import memory_report

        text += "\n" + memory_report.render(checked, plan, depth)
    return text


def add_parallel_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of a command that runs on a mesh (``lbdl train``): the mesh, the rules, and
    the processes to join (none given: `lbdl launch`'s, a cluster's, or one process alone)."""
    g = p.add_argument_group("devices and processes (docs/scaling.md)")
    g.add_argument("--mesh", metavar="AXES", help="a device mesh, e.g. data=2,fsdp=4")
    g.add_argument(
        "--shard",
        nargs="+",
        metavar="RULE",
        help="presets dp, fsdp, tp, ep joined by +, and/or rules ROLE=AXIS SYMBOL=AXIS; default dp",
    )
    g.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's address")
    g.add_argument("--num-processes", type=int, metavar="N", help="how many processes")
    g.add_argument("--process-id", type=int, metavar="I", help="this process, 0 to N-1")


def parallel(args: argparse.Namespace, model: Model) -> Parallel | None:
    """The `Parallel` the flags ask for (joining the other processes first), or None without
    ``--mesh`` (one device, as before). Call it before anything else uses JAX."""
    if getattr(args, "mesh", None) is None:
        if getattr(args, "shard", None):
            raise _shard_without_mesh()
        return None
    from lbdl_dsl.backends.jax.parallel import Parallel

    return Parallel.start(
        model,
        args.mesh,
        args.shard or [],
        args.coordinator,
        args.num_processes,
        args.process_id,
    )


def _shard_without_mesh() -> LbdlError:
    from lbdl_dsl.compiler.sharding import flag_error

    return flag_error("--shard", "needs a mesh", "give one with --mesh data=2,fsdp=2")

"""``lbdl build SPEC``: check, then write the figure, the JAX module and the summary."""

from __future__ import annotations

import argparse

from lbdl_dsl import cli
from lbdl_dsl.mesh_flags import add_mesh_arguments

HELP = "check a spec and write its artefacts (figure, JAX module, summary JSON)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    cli.add_spec_arguments(p)
    cli.add_summary_arguments(p)
    add_mesh_arguments(p)
    cli.add_build_arguments(p)


def run(args: argparse.Namespace) -> int:
    args.check = False
    return cli.run_namespace(args, args.parser)

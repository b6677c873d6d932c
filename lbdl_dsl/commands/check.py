"""``lbdl check SPEC``: parse, build and check; print the summary; write nothing."""

from __future__ import annotations

import argparse

from lbdl_dsl import cli
from lbdl_dsl.mesh_flags import add_mesh_arguments

HELP = "check a spec's shapes and print its summary (no JAX, no Graphviz)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    cli.add_spec_arguments(p)
    cli.add_summary_arguments(p)
    add_mesh_arguments(p)


def run(args: argparse.Namespace) -> int:
    args.check = True
    args.emit, args.run, args.output, args.expand = None, False, None, None
    args.batch, args.dtype, args.unroll = 2, "float32", False
    return cli.run_namespace(args, args.parser)

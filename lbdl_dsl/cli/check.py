"""``lbdl check SPEC``: parse, build and check; print the summary; write nothing.

It imports neither JAX nor Graphviz, so it stays as fast as the compiler itself."""

from __future__ import annotations

import argparse

from lbdl_dsl.cli import build, common, mesh_flags

HELP = "check a spec's shapes and print its summary (no JAX, no Graphviz)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_spec_arguments(p)
    build.add_summary_arguments(p)
    mesh_flags.add_mesh_arguments(p)
    p.set_defaults(
        check=True, emit=None, run=False, output=None, expand=None, block=None, unroll=False
    )


def run(args: argparse.Namespace) -> int:
    return build.run(args)

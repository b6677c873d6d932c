"""``lbdl run SPEC``: jit the model, run it on random inputs of the spec's shapes, time it.

The summary is printed first, as ``lbdl check`` prints it, then the output shapes, the compile
time and the steady step time. Needs the ``jax`` extra."""

from __future__ import annotations

import argparse

from lbdl_dsl.cli import build, common

EXTRAS = ("jax",)
HELP = "jit a spec's model, run it on random inputs and print shapes and times (jax extra)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_spec_arguments(p)
    build.add_summary_arguments(p)
    build.add_run_arguments(p, flag=False)
    p.set_defaults(check=True, emit=None, run=True, output=None, expand=None, block=None, mesh=None)


def run(args: argparse.Namespace) -> int:
    return build.run(args)

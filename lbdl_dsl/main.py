"""``lbdl``: the command line with verbs (``check``, ``build``, ``train``, ...).

``lbdl-compile`` (`lbdl_dsl.cli`) keeps working; ``lbdl check`` and ``lbdl build`` are its two
modes under their own names. Exit codes are those of `lbdl_dsl.cli`: 0 success, 1 an error in
what the user gave (spec, flag value, file), 2 a usage error, 3 our bug, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from lbdl_dsl.cli import Parser
from lbdl_dsl.commands import VERBS


def _parser() -> argparse.ArgumentParser:
    from lbdl_dsl import __version__

    p = Parser(
        prog="lbdl",
        description="Neural architectures written as The Little Book of Deep Learning draws "
        "them: check, draw, lower to JAX, train, import and export.",
    )
    p.add_argument("--version", action="version", version=f"lbdl {__version__}")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, module_name in VERBS.items():
        module = importlib.import_module(f"lbdl_dsl.commands.{module_name}")
        sub = verbs.add_parser(verb, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(_module=module, parser=sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return int(args._module.run(args))


if __name__ == "__main__":
    sys.exit(main())

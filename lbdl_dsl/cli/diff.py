"""``lbdl diff A.lbdl B.lbdl``: what changed between two architectures, box by box."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lbdl_dsl.cli import common

HELP = "compare two specs: changed boxes, Δ shapes, Δ parameters, Δ MACs, carried weights"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="the first .lbdl file")
    p.add_argument("b", help="the second .lbdl file")
    p.add_argument("--set", nargs="+", default=[], metavar="K=V", help="overrides for both")
    p.add_argument("--set-a", nargs="+", default=[], metavar="K=V", help="overrides for A only")
    p.add_argument("--set-b", nargs="+", default=[], metavar="K=V", help="overrides for B only")
    p.add_argument("--json", action="store_true", help="print the diff as one JSON object")
    p.add_argument("--carried", action="store_true", help="list the weights B can take from A")
    p.add_argument(
        "--figure",
        metavar="FILE",
        help="write B's figure with added and changed boxes coloured (.svg, .png, .pdf or .dot)",
    )
    p.add_argument(
        "--expand",
        metavar="BLOCKS",
        help="open block calls in the figure, as lbdl build's --expand (all, or block names)",
    )


def run(args: argparse.Namespace) -> int:
    from lbdl_dsl import diff
    from lbdl_dsl.compiler.driver import compile_spec

    both = common.parse_overrides(args.set, args.parser)
    over_a = both | common.parse_overrides(args.set_a, args.parser)
    over_b = both | common.parse_overrides(args.set_b, args.parser)

    def work() -> int:
        a = compile_spec(Path(args.a), overrides=over_a)  # a path, whatever its suffix
        b = compile_spec(Path(args.b), overrides=over_b)
        result = diff.diff(a, b)
        if args.figure:
            _figure(b, result, args.figure, args.expand)
        if args.json:
            sys.stdout.write(json.dumps(diff.to_json(result), indent=2, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(diff.render(result))
            if args.carried:
                sys.stdout.write("".join(f"  {p}\n" for p in result.carried))
        return 0

    if args.figure and Path(args.figure).suffix not in FIGURE_SUFFIXES:
        args.parser.error(
            f"--figure {args.figure}: the name must end in {', '.join(FIGURE_SUFFIXES)}"
        )
    return common.guarded(work, args.b)


FIGURE_SUFFIXES = (".svg", ".png", ".pdf", ".dot")


def _figure(b: Any, result: Any, path: str, expand: str | None) -> None:
    """B's figure with the diff's colours, written atomically where the user asked."""
    from lbdl_dsl import diff
    from lbdl_dsl.backends import diagram
    from lbdl_dsl.backends.diagram import dot
    from lbdl_dsl.backends.diagram.paint import paint
    from lbdl_dsl.output import write_atomic

    fills, legend = diff.colours(result)
    text = dot.write(paint(diagram.scene(b, expand), fills, legend))
    fmt = Path(path).suffix[1:]
    write_atomic(Path(path), text if fmt == "dot" else diagram.render(text, fmt))

"""``lbdl build SPEC``: check, then write the figure, the JAX module and the summary.

The last stage it runs is chosen from what is asked for: ``--emit ast`` stops at the parse, so a
spec that fails to build still has its syntax tree written; ``--emit graph`` stops at the build;
everything else needs the checked model. ``--check`` (``lbdl check``) writes nothing and prints
the summary. ``lbdl-compile`` is this verb under its old name, with the same flags and output.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from lbdl_dsl.cli import common, mesh_flags
from lbdl_dsl.compiler.blockdef import BlockCompiled
from lbdl_dsl.compiler.driver import CheckFailed, compile_spec, spec_name
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.compiler.stages import Built, Parsed
from lbdl_dsl.core.collector import collector_off

HELP = "check a spec and write its artefacts (figure, JAX module, summary JSON)"

TEXT_FORMATS = ("ast", "graph", "shapes", "json")
DIAGRAM_FORMATS = ("dot", "svg", "png", "pdf")
CODE_FORMATS = ("py",)
ALL_FORMATS = TEXT_FORMATS + DIAGRAM_FORMATS + CODE_FORMATS
DEFAULT_FORMATS = ("svg", "png", "py", "json")
# The stage each format needs; a command stops at the latest one its formats need.
STAGE_OF = {"ast": "parse", "graph": "build"}
STAGES = ("parse", "build", "check")


def add_summary_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--depth",
        default="1",
        help="summary depth: a number or `all` (default 1, the figure's boxes)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    common.add_spec_arguments(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="parse, build and check only; print the summary and write nothing (`lbdl check`)",
    )
    add_summary_arguments(p)
    add_output_arguments(p)
    add_run_arguments(p)
    mesh_flags.add_mesh_arguments(p)


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        type=common.folder,
        metavar="OUTDIR",
        help="where to write artefacts (default: build/SPECNAME)",
    )
    p.add_argument(
        "--emit",
        metavar="FORMATS",
        help=f"comma-separated: {','.join(ALL_FORMATS)} "
        f"(default without --check: {','.join(DEFAULT_FORMATS)})",
    )
    p.add_argument(
        "--expand",
        default=None,
        metavar="WHAT",
        help="diagram: draw inside block calls: `all`, a block name, or a depth",
    )
    p.add_argument(
        "--scale",
        type=_scale,
        default=1.0,
        metavar="F",
        help="diagram: draw the PNG (and the SVG's page size) F times the default size "
        "(2: twice as wide)",
    )
    p.add_argument(
        "--dpi",
        type=_scale,
        default=None,
        metavar="N",
        help="diagram: render the PNG at N dots per inch (default 110)",
    )
    p.add_argument(
        "--block",
        default=None,
        metavar="NAME",
        help="draw the block NAME of the spec on its own, in its own symbols (C×H×W...), "
        "as the book draws resblock; the spec may be a file of blocks",
    )


def add_run_arguments(p: argparse.ArgumentParser, *, flag: bool = True) -> None:
    """The flags of a model run; ``flag``: whether ``--run`` itself is one (``lbdl build``)."""
    if flag:
        p.add_argument(
            "--run",
            action="store_true",
            help="also jit the model, run it on random inputs and time it (`lbdl run`)",
        )
    p.add_argument(
        "--batch", type=common.positive, default=2, help="batch size of a run (default 2)"
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="compute type of the generated code (parameters stay float32)",
    )
    p.add_argument(
        "--unroll", action="store_true", help="lower ×N groups as loops instead of jax.lax.scan"
    )


def _scale(value: str) -> float:
    """``--scale`` and ``--dpi``: a number above 0 (argparse reports the message as the flag's)."""
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"a number above 0, got {value!r}")
    return number


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``lbdl build`` (or ``lbdl check``, or ``lbdl-compile``) command line."""
    parser = args.parser
    overrides = common.parse_overrides(args.set, parser)
    formats = _formats(args, parser)
    depth = None if args.depth == "all" else _depth(args.depth, parser)
    if args.block:
        formats = _block_formats(args, formats, parser)

    def partial(err: CheckFailed) -> None:
        _partial_diagram(err.checked, args, formats)

    # No cycle collection while a check or a build runs: the default thresholds made the
    # collector look through every object of a big model again and again, and none of them is
    # in a cycle (tests/test_no_cycles.py), so they are freed as the command returns, before
    # the collector is back. A model run (--run) collects as usual.
    with contextlib.nullcontext() if args.run else collector_off():
        return common.guarded(lambda: _run(args, overrides, formats, depth), args.spec, partial)


def _formats(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    if args.emit is None:
        return () if args.check else DEFAULT_FORMATS
    formats = tuple(f.strip() for f in args.emit.split(",") if f.strip())
    bad = [f for f in formats if f not in ALL_FORMATS]
    if bad:
        parser.error(f"unknown format {bad[0]!r}; choose from {', '.join(ALL_FORMATS)}")
    return formats


def last_stage(formats: tuple[str, ...], summary: bool) -> str:
    """The latest stage the formats (and a printed summary, which needs counts) need."""
    needed = [STAGE_OF.get(f, "check") for f in formats] + (["check"] if summary else [])
    return max(needed, key=STAGES.index, default="parse")


def _depth(value: str, parser: argparse.ArgumentParser) -> int:
    try:
        number = int(value)
    except ValueError:
        parser.error(f"--depth takes a whole number ≥ 0 or `all`, got {value!r}")
    if number < 0:
        parser.error(f"--depth takes a whole number ≥ 0 or `all`, got {value}")
    return number


def _block_formats(
    args: argparse.Namespace, formats: tuple[str, ...], parser: argparse.ArgumentParser
) -> tuple[str, ...]:
    """What ``--block`` writes: a figure only (a block alone has no module to run)."""
    if args.run:
        parser.error("--block draws a block; --run runs a model")
    if args.emit is None:
        return () if args.check else ("svg", "png")
    other = [f for f in formats if f not in DIAGRAM_FORMATS]
    if other:
        parser.error(f"--block writes a figure: --emit takes {', '.join(DIAGRAM_FORMATS)}")
    return formats


def _compile(args: argparse.Namespace, overrides: dict[str, Any], stage: str) -> Any:
    """The spec's model up to ``stage``, or with ``--block`` one of its blocks on its own."""
    if args.block:
        from lbdl_dsl.compiler.blockdef import compile_block

        return compile_block(Path(args.spec), args.block, overrides)
    return compile_spec(Path(args.spec), overrides=overrides, stop_after=stage)


def _run(
    args: argparse.Namespace, overrides: dict[str, Any], formats: tuple[str, ...], depth: int | None
) -> int:
    summary = args.check or not (set(formats) <= set(STAGE_OF))
    result = _compile(args, overrides, last_stage(formats, summary))
    if isinstance(result, Checked):
        _print_summary(result, args, depth)
    if formats:
        outdir = Path(args.output) if args.output else Path("build") / _name(args)
        for path in write_artefacts(result, formats, outdir, args, _plan(args, result)):
            print(f"wrote {path}", file=sys.stderr)
    if args.run:
        run_model(result, args)
    return 0


def _plan(args: argparse.Namespace, result: Any) -> Any:
    if not isinstance(result, Checked) or (isinstance(result, BlockCompiled) and result.unchecked):
        return None
    return mesh_flags.plan(args, result)


def _print_summary(checked: Checked, args: argparse.Namespace, depth: int | None) -> None:
    unchecked = getattr(checked, "unchecked", ())
    if unchecked:  # a block whose parameters have no value: no counts to print
        print(
            f"{', '.join(unchecked)} without a value: the figure shows the block's annotations "
            f"past the first box that needs one; --set {unchecked[0]}=... checks and counts it",
            file=sys.stderr,
        )
        return
    plan = mesh_flags.plan(args, checked)
    terminal = sys.stdout.isatty()
    sys.stdout.write(mesh_flags.summary(checked, plan, depth, args.json, terminal))


def write_artefacts(
    result: Parsed | Built | Checked,
    formats: tuple[str, ...],
    outdir: Path,
    args: argparse.Namespace,
    plan: Any = None,
) -> list[Path]:
    """Write each requested format; returns the paths written (``plan``: a mesh's layout,
    which colours the diagram's boxes by how their parameters are split)."""
    from lbdl_dsl.output import write_atomic

    name = args.block or spec_name(result.file)
    written = []
    figure: list[str] = []  # the DOT, made once for all the diagram formats
    for fmt in formats:
        data, suffix = _artefact(result, fmt, args, plan, figure)
        written.append(write_atomic(outdir / f"{name}{suffix}", data))
    return written


def _artefact(
    result: Any, fmt: str, args: argparse.Namespace, plan: Any, figure: list[str]
) -> tuple[Any, str]:
    """One format's bytes (or text) and the file name's ending."""
    from lbdl_dsl.compiler import textform

    if fmt == "ast":
        return textform.ast_text(result.ast), ".ast.txt"
    if fmt == "graph":
        return textform.graph_text(result.program), ".graph.txt"
    if fmt == "shapes":
        return textform.shapes_text(result), ".shapes.txt"
    if fmt == "json":
        from lbdl_dsl import report

        return report.dumps(result), ".json"
    if fmt in DIAGRAM_FORMATS:
        if not figure:
            figure.append(_figure(result, args, _shading(plan)))
        return (figure[0] if fmt == "dot" else _render(figure[0], fmt, args)), f".{fmt}"
    from lbdl_dsl.backends.jax import codegen

    return codegen.generate(result, unroll=args.unroll, dtype=args.dtype), ".py"


def _figure(checked: Any, args: argparse.Namespace, shading: Any = None) -> str:
    """The figure's DOT; what ``--expand`` asked for and could not draw is said on stderr."""
    from lbdl_dsl.backends import diagram

    drawn = diagram.scene(checked, args.expand, shading)
    for warning in drawn.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return str(diagram.write(drawn))


def _render(dot: str, fmt: str, args: argparse.Namespace) -> bytes:
    from lbdl_dsl.backends import diagram

    return bytes(diagram.render(dot, fmt, getattr(args, "scale", 1.0), getattr(args, "dpi", None)))


def _shading(plan: Any) -> Any:
    """The diagram's colours by how a mesh splits each box's parameters."""
    from lbdl_dsl.backends.diagram.shading import from_layout

    return from_layout(plan.layout) if plan is not None else None


def _partial_diagram(checked: Checked, args: argparse.Namespace, formats: tuple[str, ...]) -> None:
    """When the checker failed, still draw what it could, with the failing box in red."""
    from lbdl_dsl.core.errors import LbdlError

    wanted = [f for f in formats if f in DIAGRAM_FORMATS]
    if not wanted:
        return
    try:
        from lbdl_dsl.backends import diagram
        from lbdl_dsl.output import write_atomic

        outdir = Path(args.output) if args.output else Path("build") / _name(args)
        dot = diagram.to_dot(checked, expand=args.expand)
        for fmt in wanted:
            data = dot if fmt == "dot" else _render(dot, fmt, args)
            path = write_atomic(outdir / f"{_name(args)}.{fmt}", data)
            print(f"wrote {path} (up to the error)", file=sys.stderr)
    except LbdlError as err:
        print(err.render(), file=sys.stderr)


def _name(args: argparse.Namespace) -> str:
    """The stem of what is written: the spec's name, or the block's with ``--block``."""
    return str(args.block or spec_name(args.spec))


def run_model(checked: Checked, args: argparse.Namespace) -> None:
    """Jit the model, feed it random inputs of the spec's shapes, print shapes and times."""
    from lbdl_dsl.backends.jax import runner

    result = runner.run(checked, batch=args.batch, unroll=args.unroll, dtype=args.dtype)
    for line in result.lines():
        print(line)

"""``lbdl-compile``: the command line, on top of every other floor.

Exit codes: 0 success, 1 anything the user gave that we refuse (an error in the spec, printed as
``FILE:LINE:COL: error: ...`` with the source line, a caret and a hint; a bad flag or flag value,
printed with the usage, the flag and a hint), 3 an internal error of ours. No traceback is ever
shown for anything the user wrote; ``LBDL_DEBUG=1`` shows ours.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from lbdl_dsl.compiler.driver import CheckFailed, Compiled, compile_spec, spec_name
from lbdl_dsl.compiler.imports import sources_for
from lbdl_dsl.core.collector import collector_off
from lbdl_dsl.core.errors import LbdlError, os_error
from lbdl_dsl.mesh_flags import add_mesh_arguments

TEXT_FORMATS = ("ast", "graph", "shapes", "json")
DIAGRAM_FORMATS = ("dot", "svg", "png", "pdf")
CODE_FORMATS = ("py",)
ALL_FORMATS = TEXT_FORMATS + DIAGRAM_FORMATS + CODE_FORMATS
DEFAULT_FORMATS = ("svg", "png", "py", "json")


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag treated like any other bad input: the usage, the message, a hint
    to ``--help``, and exit code 1 (argparse's own is 2, which the house keeps for nothing)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\nhint: see `{self.prog} --help`\n")
        raise SystemExit(1)


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="lbdl-compile",
        description="Compile a neural architecture written as The Little Book of Deep Learning "
        "draws it: check its shapes, count it, draw it, and lower it to JAX.",
    )
    from lbdl_dsl import __version__

    p.add_argument("--version", action="version", version=f"lbdl-compile {__version__}")
    add_spec_arguments(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="parse, build and check only; print the summary and write nothing",
    )
    add_summary_arguments(p)
    add_build_arguments(p)
    add_mesh_arguments(p)
    return p


def add_spec_arguments(p: argparse.ArgumentParser) -> None:
    """The spec and its ``--set`` overrides: every verb that reads a spec takes these."""
    p.add_argument("spec", help="the .lbdl file")
    p.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="K=V",
        help="override model parameters or give input symbols values (N=24 D=1024)",
    )


def add_summary_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--depth",
        default="1",
        help="summary depth: a number or `all` (default 1, the figure's boxes)",
    )


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        type=_folder,
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
        "--block",
        default=None,
        metavar="NAME",
        help="draw the block NAME of the spec on its own, in its own symbols (C×H×W...), "
        "as the book draws resblock; the spec may be a file of blocks",
    )
    p.add_argument(
        "--run", action="store_true", help="jit the model, run it on random inputs and time it"
    )
    p.add_argument("--batch", type=_batch, default=2, help="batch size for --run (default 2)")
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="compute type of the generated code (parameters stay float32)",
    )
    p.add_argument(
        "--unroll", action="store_true", help="lower ×N groups as loops instead of jax.lax.scan"
    )


def parse_overrides(items: list[str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()  # read as its parameter's kind by the compiler
    return out


def _formats(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    if args.emit is None:
        return () if args.check else DEFAULT_FORMATS
    formats = tuple(f.strip() for f in args.emit.split(",") if f.strip())
    bad = [f for f in formats if f not in ALL_FORMATS]
    if bad:
        parser.error(f"unknown format {bad[0]!r}; choose from {', '.join(ALL_FORMATS)}")
    return formats


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    return run_namespace(parser.parse_args(argv), parser)


def run_namespace(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run a parsed ``lbdl-compile`` (or ``lbdl check``/``lbdl build``) command line."""
    overrides = parse_overrides(args.set, parser)
    formats = _formats(args, parser)
    depth = None if args.depth == "all" else _int_arg(args.depth, "--depth", parser)
    if getattr(args, "block", None):
        formats = _block_formats(args, formats, parser)

    def partial(err: CheckFailed) -> None:
        _partial_diagram(err.compiled, args, formats)

    # No cycle collection while a check or a build runs: the default thresholds made the
    # collector look through every object of a big model again and again, and none of them is
    # in a cycle (tests/test_no_cycles.py), so they are freed as the command returns, before
    # the collector is back. A model run (--run) collects as usual.
    with contextlib.nullcontext() if args.run else collector_off():
        return guarded(lambda: _run(args, overrides, formats, depth), args.spec, partial)


def guarded(
    work: Callable[[], int],
    label: str,
    on_check_failed: Callable[[CheckFailed], None] | None = None,
) -> int:
    """Run ``work`` with the command line's promise: a user's error is exit 1 with its message
    and never a traceback; our own bug is exit 3 with a short note (``LBDL_DEBUG=1`` shows it).
    Every verb goes through here, so they all keep the promise the same way."""
    try:
        with _terminate_as_exception():
            return work()
    except CheckFailed as err:
        print(err.render(err.compiled.sources), file=sys.stderr)
        if on_check_failed is not None:
            on_check_failed(err)
        return 1
    except LbdlError as err:
        print(err.render(err.sources or sources_for(err)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    except OSError as exc:  # the system's refusal about the user's files: theirs, not ours
        print(os_error(exc, None).render(), file=sys.stderr)
        return 1
    except MemoryError as exc:  # sizes the user asked for (--batch, --set) beyond the machine
        detail = f" ({exc})" if str(exc) else ""
        print(
            f"error: out of memory{detail}\nhint: ask for smaller sizes (--batch, --set)",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # noqa: BLE001 - our bug: a short message, the traceback on demand
        if os.environ.get("LBDL_DEBUG"):
            raise
        print(
            f"{label}: internal error: {type(exc).__name__}: {exc}\n"
            "hint: this is a bug in lbdl, not in your spec; rerun with LBDL_DEBUG=1 and "
            "report the traceback",
            file=sys.stderr,
        )
        return 3


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) as an exception, so that every ``finally`` runs: a temporary file
    is removed and nothing is left half-written when a job is stopped."""


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise Terminated

    wanted = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    try:
        old = {s: signal.signal(s, stop) for s in wanted}
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _int_arg(value: str, name: str, parser: argparse.ArgumentParser) -> int:
    try:
        number = int(value)
    except ValueError:
        parser.error(f"{name} takes a whole number ≥ 0 or `all`, got {value!r}")
        raise
    if number < 0:
        parser.error(f"{name} takes a whole number ≥ 0 or `all`, got {value}")
    return number


def _batch(value: str) -> int:
    """``--batch``: a whole number ≥ 1 (argparse reports the message as the flag's)."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"a whole number ≥ 1, got {value!r}")
    return number


def _folder(value: str) -> str:
    """``-o``: a folder name, never empty (an empty one would write into the current folder)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("a folder name, got an empty one")
    return value


def _block_formats(args, formats, parser: argparse.ArgumentParser) -> tuple[str, ...]:
    """What ``--block`` writes: a figure only (a block alone has no module to run)."""
    if args.run:
        parser.error("--block draws a block; --run runs a model")
    if args.emit is None:
        return () if args.check else ("svg", "png")
    other = [f for f in formats if f not in DIAGRAM_FORMATS]
    if other:
        parser.error(f"--block writes a figure: --emit takes {', '.join(DIAGRAM_FORMATS)}")
    return formats


def _compile(args, overrides) -> Compiled:
    """The spec's model, or with ``--block`` one of its blocks on its own."""
    if getattr(args, "block", None):
        from lbdl_dsl.compiler.blockdef import compile_block

        return compile_block(Path(args.spec), args.block, overrides)
    return compile_spec(Path(args.spec), overrides=overrides)


def _run(args, overrides, formats, depth) -> int:
    compiled = _compile(args, overrides)
    checked = compiled.checked
    from lbdl_dsl import mesh_flags

    unchecked = getattr(compiled, "unchecked", ())
    plan = None if unchecked else mesh_flags.plan(args, compiled)
    if unchecked:  # a block whose parameters have no value: no counts to print
        print(
            f"{', '.join(unchecked)} without a value: the figure shows the block's annotations "
            f"past the first box that needs one; --set {unchecked[0]}=... checks and counts it",
            file=sys.stderr,
        )
    else:
        terminal = sys.stdout.isatty()
        sys.stdout.write(mesh_flags.summary(checked, plan, depth, args.json, terminal))
    if formats:
        outdir = Path(args.output) if args.output else Path("build") / _name(args)
        for path in write_artefacts(compiled, formats, outdir, args, plan):
            print(f"wrote {path}", file=sys.stderr)
    if args.run:
        _run_model(compiled, args)
    return 0


def write_artefacts(compiled: Compiled, formats, outdir: Path, args, plan=None) -> list[Path]:
    """Write each requested format; returns the paths written (``plan``: a mesh's layout,
    which colours the diagram's boxes by how their parameters are split)."""
    from lbdl_dsl.compiler import textform
    from lbdl_dsl.output import write_atomic

    name = getattr(args, "block", None) or spec_name(compiled.file)
    written = []
    for fmt in formats:
        if fmt == "ast":
            data: str | bytes = textform.ast_text(compiled.ast)
            target = outdir / f"{name}.ast.txt"
        elif fmt == "graph":
            data, target = textform.graph_text(compiled.program), outdir / f"{name}.graph.txt"
        elif fmt == "shapes":
            data, target = textform.shapes_text(compiled.checked), outdir / f"{name}.shapes.txt"
        elif fmt == "json":
            from lbdl_dsl import report

            data, target = report.dumps(compiled.checked), outdir / f"{name}.json"
        elif fmt in DIAGRAM_FORMATS:
            from lbdl_dsl.backends import diagram

            dot = diagram.to_dot(compiled, expand=args.expand, shading=_shading(plan))
            data = dot if fmt == "dot" else diagram.render(dot, fmt)
            target = outdir / f"{name}.{fmt}"
        else:
            from lbdl_dsl.backends.jax import codegen

            data = codegen.generate(compiled, unroll=args.unroll, dtype=args.dtype)
            target = outdir / f"{name}.py"
        written.append(write_atomic(target, data))
    return written


def _shading(plan):
    """The diagram's colours by how a mesh splits each box's parameters."""
    from lbdl_dsl.backends.diagram.shading import from_layout

    return from_layout(plan.layout) if plan is not None else None


def _partial_diagram(compiled: Compiled, args, formats) -> None:
    """When the checker failed, still draw what it could, with the failing box in red."""
    wanted = [f for f in formats if f in DIAGRAM_FORMATS]
    if not wanted or compiled.checked is None:
        return
    try:
        from lbdl_dsl.backends import diagram
        from lbdl_dsl.output import write_atomic

        outdir = Path(args.output) if args.output else Path("build") / _name(args)
        dot = diagram.to_dot(compiled, expand=args.expand)
        for fmt in wanted:
            data = dot if fmt == "dot" else diagram.render(dot, fmt)
            path = write_atomic(outdir / f"{_name(args)}.{fmt}", data)
            print(f"wrote {path} (up to the error)", file=sys.stderr)
    except LbdlError as err:
        print(err.render(), file=sys.stderr)


def _name(args) -> str:
    """The stem of what is written: the spec's name, or the block's with ``--block``."""
    return getattr(args, "block", None) or spec_name(args.spec)


def _run_model(compiled: Compiled, args) -> None:
    from lbdl_dsl.backends.jax import runner

    t0 = time.perf_counter()
    result = runner.run(compiled, batch=args.batch, unroll=args.unroll, dtype=args.dtype)
    for line in result.lines():
        print(line)
    del t0


if __name__ == "__main__":
    sys.exit(main())

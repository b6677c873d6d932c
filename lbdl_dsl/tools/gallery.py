"""Regenerate the gallery: the book's figures, then every spec of specs/ drawn beside its text.

``python -m lbdl_dsl.tools.gallery`` draws each of the book's figures (`book_figures`) into
``docs/gallery/book/`` with its command and its review, writes ``docs/gallery/NAME.png`` and
``NAME.svg`` for each spec that compiles, and rewrites ``docs/gallery.md``; a spec that does
not compile is skipped with a note on stderr (someone is still writing it) rather than stopping
the others. Every figure and number on the page comes from the compiler, so the page shows what
the specs say today, and since the backend is deterministic a rerun that changes nothing
rewrites the same bytes. It prints how long each figure took, from the spec's text to its PNG
and SVG (``bench/diagrams.py`` holds the time every figure must stay under).
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lbdl_dsl.backends import diagram
from lbdl_dsl.backends.diagram import geometry, run_dot
from lbdl_dsl.compiler.driver import compile_spec, spec_name
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.symbolic import fmt_count
from lbdl_dsl.output import write_atomic
from lbdl_dsl.tools.book_figures import FIGURES, OPENED, BookFigure

REPO = Path(__file__).resolve().parents[2]
MAX_WIDTH = 480  # pixels a figure may take on the page, beside its spec
PNG_DPI_TO_CSS = 96 / run_dot.PNG_DPI  # PNG pixels to CSS pixels at true size


@dataclass(frozen=True)
class Entry:
    """One spec drawn: its name, its source text, its summary line, its figure's size."""

    name: str
    source: str
    summary: str
    width: int
    height: int


def summary(compiled: Checked) -> str:
    """The line under a spec's name: parameters, MACs, inputs and outputs, as the CLI counts."""
    checked = compiled
    assert checked is not None  # compile_spec raises unless the spec checked
    totals = checked.totals
    ins = ", ".join(f"{k}: {v}" for k, v in checked.inputs.items())
    outs = ", ".join(f"{k}: {v}" for k, v in checked.outputs.items())
    return (
        f"{fmt_count(totals['params'])} trainable parameters · "
        f"{fmt_count(totals['macs'])} multiply-accumulates per sample · "
        f"in {ins} · out {outs}"
    )


def png_size(png: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header, without an image library."""
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def _write(dot: str, out: Path, name: str) -> tuple[int, int]:
    """The PNG and SVG of ``dot`` as ``out/name.*``; returns the PNG's size, and records the
    figure's measured layout in `MEASURED`."""
    png = diagram.render(dot, "png")
    write_atomic(out / f"{name}.png", png)
    write_atomic(out / f"{name}.svg", diagram.render(dot, "svg"))
    width, height = png_size(png)
    MEASURED[name] = measured(dot, width)
    return width, height


MEASURED: dict[str, str] = {}
"""Each figure's layout as measured while this run draws it, by file name, for the page."""


def measured(dot: str, width: int) -> str:
    """One line on what Graphviz drew (`geometry`): the faults a layout test holds to zero."""
    faults = geometry.measure(dot)
    return (
        f"Layout, measured: {len(faults.crossings)} arrows through a text, "
        f"{len(faults.shared_heads)} shared arrowheads, {len(faults.covered)} names covered, "
        "data path drift "
        f"{faults.drift:.0f} pt; {width} px wide."
    )


def draw(spec: Path, out: Path) -> Entry:
    """Compile one spec and write its figures (and its `OPENED` ones); raises `LbdlError` if
    it does not compile."""
    compiled = compile_spec(spec)
    name = spec_name(str(spec))
    width, height = _write(diagram.to_dot(compiled), out, name)
    for opened in (o for o in OPENED if o.spec == name):
        _write(diagram.to_dot(compiled, opened.expand), out, opened.slug)
    return Entry(name, spec.read_text("utf-8"), summary(compiled), width, height)


def opened_section(name: str) -> list[str]:
    """Under a spec's figure, its boxes opened where `OPENED` asks, each with its review."""
    lines: list[str] = []
    for opened in (o for o in OPENED if o.spec == name):
        lines += [
            f"Opened: `{opened.command}`",
            "",
            MEASURED.get(opened.slug, ""),
            "",
            '<table><tr><td valign="top">',
            "",
            f'<img src="gallery/{opened.slug}.png" width="{MAX_WIDTH}" alt="{opened.slug}">',
            "",
            f"[SVG](gallery/{opened.slug}.svg)",
            "",
            '</td><td valign="top">',
            "",
            opened.review,
            "",
            "</td></tr></table>",
            "",
        ]
    return lines


def draw_figure(fig: BookFigure, repo: Path, out: Path) -> tuple[int, int]:
    """One of the book's figures, drawn as its command draws it."""
    dot = diagram.to_dot(fig.compile(repo), fig.expand)
    return _write(dot, out, fig.slug)


def book_section(sizes: dict[str, tuple[int, int]]) -> list[str]:
    """The book's figures: for each, the one command that draws it, the picture, the review."""
    lines = [
        "## The book's figures",
        "",
        "Each figure of *The Little Book of Deep Learning*'s chapter 5, and Fig. 4.10, drawn by",
        "one command (run from the repository's root), and reviewed against the book's figure",
        "box by box (`FIGURES.md`): what matches, what differs and why.",
        "",
        "| figure | command |",
        "|---|---|",
    ]
    lines += [f"| [{f.figure} {f.title}](#{f.slug}) | `{f.command}` |" for f in FIGURES]
    lines.append("")
    for fig in FIGURES:
        width = min(round(sizes[fig.slug][0] * PNG_DPI_TO_CSS), MAX_WIDTH)
        lines += [
            f'### <a id="{fig.slug}"></a>Fig. {fig.figure}: {fig.title}',
            "",
            f"`{fig.command}`",
            "",
        ]
        if fig.pending:
            lines += [f"*Waits for {fig.pending}.*", ""]
        lines += [MEASURED.get(fig.slug, ""), ""]
        lines += [
            '<table><tr><td valign="top">',
            "",
            f'<img src="gallery/book/{fig.slug}.png" width="{width}" alt="Fig. {fig.figure}">',
            "",
            f"[SVG](gallery/book/{fig.slug}.svg)",
            "",
            '</td><td valign="top">',
            "",
            fig.review,
            "",
            "</td></tr></table>",
            "",
        ]
    return lines


def page(entries: list[Entry], skipped: list[str], sizes: dict[str, tuple[int, int]]) -> str:
    """docs/gallery.md: the book's figures, then an index and each spec beside its source."""
    lines = [
        "# Gallery",
        "",
        "The book's figures, then every spec of `specs/`, drawn by the Graphviz backend as the",
        "book draws its figures. Generated by `python -m lbdl_dsl.tools.gallery` (`make gallery`);",
        "do not edit by hand: the reviews live in `lbdl_dsl/tools/book_figures.py`.",
        "",
        *book_section(sizes),
        "## Every spec",
        "",
        "Block calls are drawn as one box; `lbdl-compile SPEC --emit png --expand all` opens them.",
        "",
        " · ".join(f"[{e.name}](#{e.name.lower()})" for e in entries),
        "",
    ]
    for e in entries:
        width = min(round(e.width * PNG_DPI_TO_CSS), MAX_WIDTH)
        lines += [
            f"## {e.name}",
            "",
            e.summary,
            "",
            MEASURED.get(e.name, ""),
            "",
            '<table><tr><td valign="top">',
            "",
            f'<img src="gallery/{e.name}.png" width="{width}" alt="{e.name}">',
            "",
            f"[SVG](gallery/{e.name}.svg)",
            "",
            '</td><td valign="top">',
            "",
            "```",
            e.source.rstrip("\n"),
            "```",
            "",
            "</td></tr></table>",
            "",
            *opened_section(e.name),
        ]
    if skipped:
        lines += [
            "Not drawn, because they do not compile yet: "
            + ", ".join(f"`{s}`" for s in skipped)
            + ".",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lbdl_dsl.tools.gallery", description=__doc__)
    parser.add_argument("--specs", type=Path, default=REPO / "specs", help="the specs' folder")
    parser.add_argument("--docs", type=Path, default=REPO / "docs", help="the docs' folder")
    args = parser.parse_args(argv)
    sizes: dict[str, tuple[int, int]] = {}
    for fig in FIGURES:
        start = time.perf_counter()
        sizes[fig.slug] = draw_figure(fig, args.specs.parent, args.docs / "gallery" / "book")
        print(f"Fig. {fig.figure}: {time.perf_counter() - start:.2f} s", file=sys.stderr)
    entries, skipped = [], []
    for spec in sorted(args.specs.glob("*.lbdl")):
        start = time.perf_counter()
        try:
            entries.append(draw(spec, args.docs / "gallery"))
        except LbdlError as err:
            first = err.diagnostics[0].message if err.diagnostics else str(err)
            print(f"skipping {spec.name}: {first}", file=sys.stderr)
            skipped.append(spec.name)
            continue
        print(f"{spec.stem}: {time.perf_counter() - start:.2f} s", file=sys.stderr)
    write_atomic(args.docs / "gallery.md", page(entries, skipped, sizes))
    print(
        f"drew {len(FIGURES)} book figures and {len(entries)} specs into {args.docs / 'gallery'}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

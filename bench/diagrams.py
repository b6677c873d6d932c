"""How long each gallery figure takes to draw, against the 2 s every figure must stay under.

``python bench/diagrams.py [--repeat 3] [--limit 2.0]`` draws each of the book's figures (the
commands of docs/gallery.md) and each spec of specs/, as ``lbdl-compile SPEC --emit png,svg``
does: parse, build and check the spec, walk and lay out the figure, write its DOT, and render
the PNG and the SVG with Graphviz. It prints a Markdown table of the median wall time of each
(and its parts) and exits with 1 if any figure takes longer than the limit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lbdl_dsl.backends import diagram  # noqa: E402
from lbdl_dsl.compiler.driver import compile_spec  # noqa: E402
from lbdl_dsl.compiler.instance import Checked  # noqa: E402
from lbdl_dsl.tools.book_figures import FIGURES  # noqa: E402


def timed(name: str, make: Callable[[], Checked], expand: str | None, repeat: int) -> list[str]:
    """One figure's row: the median seconds to compile, to write DOT, to render, in all."""
    parts: list[tuple[float, float, float]] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        compiled = make()
        t1 = time.perf_counter()
        dot = diagram.to_dot(compiled, expand)
        t2 = time.perf_counter()
        diagram.render(dot, "png")
        diagram.render(dot, "svg")
        t3 = time.perf_counter()
        parts.append((t1 - t0, t2 - t1, t3 - t2))
    med = [statistics.median(p[i] for p in parts) for i in range(3)]
    return [name, *(f"{v:.2f}" for v in med), f"{sum(med):.2f}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--limit", type=float, default=2.0, help="seconds a figure may take")
    args = parser.parse_args(argv)
    rows = [
        timed(f"Fig. {f.figure}", lambda f=f: f.compile(ROOT), f.expand, args.repeat)
        for f in FIGURES
    ]
    rows += [
        timed(s.stem, lambda s=s: compile_spec(s), None, args.repeat)
        for s in sorted((ROOT / "specs").glob("*.lbdl"))
    ]
    print("| figure | check (s) | layout + DOT (s) | PNG + SVG (s) | total (s) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    slow = [r[0] for r in rows if float(r[-1]) > args.limit]
    worst = max(rows, key=lambda r: float(r[-1]))
    print(f"\nslowest: {worst[0]}, {worst[-1]} s; limit {args.limit} s", file=sys.stderr)
    if slow:
        print(f"over the limit: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

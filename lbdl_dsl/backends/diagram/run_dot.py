"""Turning DOT into SVG, PNG or PDF with Graphviz's own ``dot`` program.

We run the program rather than a Python binding so that the only requirement is the package
every system ships (``apt-get install graphviz``), and with a timeout so that a pathological
figure cannot hang the compiler. The same DOT gives the same bytes in every format: SVG and
PNG carry no date, and the creation date cairo writes into a PDF is replaced by a fixed one of
the same length (so that the PDF's byte offsets stay right).
"""

from __future__ import annotations

import re
import shutil
import subprocess

from lbdl_dsl.core.errors import LbdlError

DOT = "dot"  # the program's name; tests point it elsewhere
TIMEOUT_S = 120
PNG_DPI = 110  # sharp on a screen without making ResNet-50's expanded figure enormous
SVG_DPI = 72  # an SVG's own unit, the point: scale 1 writes the layout's sizes as they are
_FLAGS = {
    "svg": ["-Tsvg"],
    "png": ["-Tpng"],
    "pdf": ["-Tpdf"],
    "json": ["-Tjson"],
}  # json: `geometry`
MAX_SCALE = 8.0  # a PNG 8× the default is already 40,000 px tall for ResNet-50's opened figure


def resolution(fmt: str, scale: float = 1.0, dpi: float | None = None) -> float | None:
    """The dots per inch ``fmt`` is rendered at: a PNG at 110 × ``scale`` (or ``dpi``), an SVG's
    width and height at 72 × ``scale`` (its drawing is vector; only its size on the page
    changes); None for a PDF (vector, scaled by whoever prints it) and for an SVG at scale 1,
    whose bytes stay those Graphviz writes by default."""
    if not 0 < scale <= MAX_SCALE or (dpi is not None and not 0 < dpi <= PNG_DPI * MAX_SCALE):
        raise LbdlError(
            f"a figure's scale is between 0 and {MAX_SCALE:g} (dpi up to {PNG_DPI * MAX_SCALE:g})",
            hint="--scale 2 draws a PNG twice as wide as the default; --dpi 300 prints sharp",
        )
    if fmt == "png":
        return dpi if dpi is not None else PNG_DPI * scale
    if fmt == "svg" and (scale != 1.0 or dpi is not None):
        return SVG_DPI * (dpi / PNG_DPI if dpi is not None else scale)
    return None


def render(dot: str, fmt: str, scale: float = 1.0, dpi: float | None = None) -> bytes:
    """``dot`` rendered to ``fmt`` (svg, png or pdf), ``scale`` times the default size (or at
    ``dpi`` dots per inch, for a PNG to print); raises `LbdlError` if Graphviz is missing."""
    if fmt not in _FLAGS:
        raise ValueError(f"cannot render {fmt!r}; choose from {', '.join(_FLAGS)}")
    at = resolution(fmt, scale, dpi)
    flags = _FLAGS[fmt] + ([f"-Gdpi={at:g}"] if at is not None else [])
    program = shutil.which(DOT)
    if program is None:
        raise LbdlError(
            "Graphviz's `dot` program is not installed", hint="apt-get install graphviz"
        )
    try:
        done = subprocess.run(
            [program, *flags],
            input=dot.encode("utf-8"),
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LbdlError(
            f"Graphviz took more than {TIMEOUT_S} s to draw the figure",
            hint="draw fewer boxes: leave out --expand, or expand one block by name",
        ) from None
    except OSError as exc:
        raise LbdlError(
            f"could not run Graphviz's `dot`: {exc}", hint="apt-get install graphviz"
        ) from None
    if done.returncode != 0:
        # We wrote the DOT, so a syntax error in it is our bug: say so, with Graphviz's words.
        err = done.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"Graphviz's `dot` failed on the DOT we generated: {err}")
    return _undated(done.stdout) if fmt == "pdf" else done.stdout


_PDF_DATE = re.compile(rb"/CreationDate \(D:\d{14}(?:Z|[+-]\d\d'\d\d'?)?\)")


def _undated(pdf: bytes) -> bytes:
    def fixed(match: re.Match[bytes]) -> bytes:
        old = match.group(0)
        new = b"/CreationDate (D:19700101000000Z)"
        return new + b" " * (len(old) - len(new)) if len(new) <= len(old) else old

    return _PDF_DATE.sub(fixed, pdf)

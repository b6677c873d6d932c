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
_FLAGS = {"svg": ["-Tsvg"], "png": ["-Tpng", f"-Gdpi={PNG_DPI}"], "pdf": ["-Tpdf"]}


def render(dot: str, fmt: str) -> bytes:
    """``dot`` rendered to ``fmt`` (svg, png or pdf); raises `LbdlError` if Graphviz is missing."""
    if fmt not in _FLAGS:
        raise ValueError(f"cannot render {fmt!r}; choose from {', '.join(_FLAGS)}")
    program = shutil.which(DOT)
    if program is None:
        raise LbdlError(
            "Graphviz's `dot` program is not installed", hint="apt-get install graphviz"
        )
    try:
        done = subprocess.run(
            [program, *_FLAGS[fmt]],
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

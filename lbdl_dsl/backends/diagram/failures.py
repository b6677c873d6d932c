"""Putting the checker's messages beside the boxes where checking stopped.

A diagnostic points at source: the box's line, its annotation, or, for a failure inside a block
drawn collapsed, a note "in block `dresblock`, used here" at the call. Each failure site takes
the first diagnostic whose span, or one of whose notes' spans, falls inside its own; the first
diagnostic goes to the first site if none matches it, and one that belongs to no box at all (a
failed count assertion) is written under the figure.
"""

from __future__ import annotations

from collections.abc import Sequence

from lbdl_dsl.backends.diagram.walk import Site
from lbdl_dsl.core.errors import Diagnostic, Span


def _inside(span: Span | None, outer: Span) -> bool:
    if span is None or span.file != outer.file:
        return False
    return outer.line <= span.line <= outer.end_line


def _matches(site: Site, diag: Diagnostic) -> bool:
    return _inside(diag.span, site.span) or any(_inside(n.span, site.span) for n in diag.notes)


def attach(sites: Sequence[Site], diagnostics: Sequence[Diagnostic]) -> str:
    """Write messages onto failure sites; returns the one left for under the figure, if any."""
    unplaced = ""
    for i, diag in enumerate(diagnostics):
        site = next((s for s in sites if not s.element.message and _matches(s, diag)), None)
        if site is None and i == 0:
            site = next((s for s in sites if not s.element.message), None)
        if site is not None:
            site.element.message = diag.message
        elif i == 0:
            unplaced = diag.message
    return unplaced

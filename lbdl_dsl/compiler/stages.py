"""The compiler's stage results: `Parsed` → `Built` → `Checked`, each frozen, each the result of
one function of the driver (`compiler.driver`), each holding the one before it.

A caller stops at the last stage it needs (``lbdl-compile --emit ast`` at `Parsed`, ``--emit
graph`` at `Built`), and backends take `Checked` (`compiler/instance.py`), which reaches back to
the texts and the program through these. A check that fails still yields its partial
`Checked` (inside `CheckFailed`), so the diagram can draw the model up to the error.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.graph import Program
from lbdl_dsl.compiler.imports import Loaded


@dataclass(frozen=True)
class Parsed:
    """Stage 1: the main file and every file it imports, as syntax trees, with their texts."""

    file: str
    loaded: Loaded

    @property
    def sources(self) -> dict[str, str]:
        return self.loaded.sources

    @property
    def ast(self) -> ast.Module:
        return self.loaded.main


@dataclass(frozen=True)
class Built:
    """Stage 2: the program of graphs (the model's and one per block), verified."""

    parsed: Parsed
    program: Program

    @property
    def file(self) -> str:
        return self.parsed.file

    @property
    def loaded(self) -> Loaded:
        return self.parsed.loaded

    @property
    def sources(self) -> dict[str, str]:
        return self.parsed.sources

    @property
    def ast(self) -> ast.Module:
        return self.parsed.ast

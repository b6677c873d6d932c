"""What the benchmarks that run one child process per setting share: ``--only``'s choice of
settings by key, and the table row of a setting that failed.

Kept apart from `bench/harness.py` because it must not import JAX: `bench/allocator.py`'s
parent process stays small, and Linux counts the parent's peak memory in every child's.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TypeVar

S = TypeVar("S")


def chosen(
    parser: argparse.ArgumentParser,
    settings: Mapping[str, S],
    only: str | None,
    default: Sequence[str],
) -> list[S]:
    """The settings ``--only`` names (comma-separated keys), or ``default``'s; an unknown key is
    the parser's error, naming the keys there are."""
    keys = [k.strip() for k in only.split(",")] if only else list(default)
    unknown = [k for k in keys if k not in settings]
    if unknown:
        parser.error(f"--only: no setting {unknown[0]!r} (there are {', '.join(settings)})")
    return [settings[k] for k in keys]


def failed_row(name: str, error: str, columns: int) -> str:
    """A Markdown row for a setting that failed: its error's last line, then ``columns`` empty
    cells after the first two."""
    return f"| {name} | failed: {error.strip().splitlines()[-1][:80]} |" + "|" * columns

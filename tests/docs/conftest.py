"""The documents' tests print how many examples they hold, and how many of them CI runs."""

from __future__ import annotations

import pytest
from documents import counts


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    run, long, skip, files = counts()
    terminalreporter.write_line(
        f"documents: {run + long + skip} examples in {files} files: {run} run here, "
        f"{long} long (pytest -m full), {skip} skipped with a reason"
    )

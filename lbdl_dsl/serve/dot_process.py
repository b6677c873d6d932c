"""Graphviz's ``dot -Tsvg`` started before the figure it will draw, between keystrokes.

Starting ``dot`` (loading its plugins) is a good part of drawing a small figure: GPT-2's took 50
ms with ``dot`` started for it and 40 ms with one started beforehand, ResNet-50's 59 and 37 ms
(medians of 8 on the 2-core machine of docs/performance.md). So a worker keeps one ``dot``
started and waiting for its input; a figure is written to it, and the next one is started
once the answer has gone (`prepare`), while the page draws it. Each process draws exactly one
graph, so the SVG is byte for byte what `backends.diagram.render` gives (one process fed graph
after graph would be faster still, but Graphviz then orders clusters differently and, for two
expanded figures of specs/, lays them out differently too). Anything unexpected gives None,
and the caller draws the figure the ordinary way, which reports the problem as the CLI does.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess


class DotProcess:
    def __init__(self) -> None:
        self.waiting: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes] | None:
        program = shutil.which("dot")
        if program is None:
            return None
        return subprocess.Popen(
            [program, "-Tsvg"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def svg(self, dot: str, timeout: float = 120.0) -> bytes | None:
        """The SVG of ``dot``, or None when the waiting process could not give it."""
        proc, self.waiting = self.waiting, None
        if proc is None or proc.poll() is not None:
            proc = self._start()
        if proc is None:
            return None
        try:
            out, _ = proc.communicate(dot.encode("utf-8"), timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            with contextlib.suppress(OSError):
                proc.kill()
            proc.communicate()
            return None
        return out if proc.returncode == 0 and out else None

    def prepare(self) -> None:
        """Start the process the next figure will use (after an answer is sent: off the
        clock of the keystroke that made it)."""
        if self.waiting is None or self.waiting.poll() is not None:
            self.waiting = self._start()

    def close(self) -> None:
        proc, self.waiting = self.waiting, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.communicate()

"""Source spans and the one error type of the compiler.

Every message the user sees about their spec goes through `LbdlError`, so every message has the
same form: ``FILE:LINE:COL: error: MESSAGE``, the offending source line, a caret under the whole
span, optional notes pointing at related places, and a hint. Keeping one type (rather than one
exception class per pass) means the CLI needs exactly one ``except`` to guarantee "no traceback for
anything the user wrote".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Span:
    """A region of one source file; lines and columns are 1-based, ``end_column`` exclusive."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def point(cls, file: str, line: int, column: int, width: int = 1) -> Span:
        return cls(file, line, column, line, column + max(width, 1))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Note:
    """A secondary message attached to another place ("this tensor was made here")."""

    message: str
    span: Span | None = None


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a spec."""

    message: str
    span: Span | None
    hint: str | None = None
    notes: tuple[Note, ...] = ()
    kind: str = "error"

    def render(self, sources: Mapping[str, str] | None = None) -> str:
        """The full text shown to the user; ``sources`` maps file names to their text."""
        where = f"{self.span}: " if self.span else ""
        lines = [f"{where}{self.kind}: {self.message}"]
        lines += _excerpt(self.span, sources)
        for note in self.notes:
            where = f"{note.span}: " if note.span else ""
            lines.append(f"{where}note: {note.message}")
            lines += _excerpt(note.span, sources)
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return "\n".join(lines)


def _excerpt(span: Span | None, sources: Mapping[str, str] | None) -> list[str]:
    """The source line of ``span`` and a caret line under it, or nothing if unavailable."""
    if span is None or sources is None or span.file not in sources:
        return []
    # Lines as the parser counts them: only line feeds (after CR LF and CR became LF) end a
    # line, not the form feeds or U+2028 that str.splitlines() also splits at.
    text = sources[span.file].removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    text_lines = text.split("\n")
    if not 1 <= span.line <= len(text_lines):
        return []
    line = text_lines[span.line - 1]
    end = span.end_column if span.end_line == span.line else len(line) + 1
    start = 1
    if len(line) > 200:  # a 10 MB single-line spec must not flood the terminal
        start = max(span.column - 60, 1)
        line = line[start - 1 : start + 139]
    col, end = span.column - start + 1, end - start + 1  # columns within the shown part
    width = max(1, min(end, len(line) + 1) - col)
    shown = _printable(line.replace("\t", " "))
    return [f"  {shown}", "  " + " " * (col - 1) + "^" * width]


def _printable(line: str) -> str:
    """Control characters as their visible pictures (U+2400...), one column each: the user
    must see the character the caret points at, and a quoted BEL must not ring the terminal."""
    return "".join(
        chr(0x2400 + ord(c)) if ord(c) < 32 else "\u2421" if c == "\x7f" else c for c in line
    )


@dataclass
class LbdlError(Exception):
    """An error in the user's spec: carries one or several diagnostics (independent failures)."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __init__(
        self,
        message: str | None = None,
        span: Span | None = None,
        hint: str | None = None,
        notes: Iterable[Note] = (),
        *,
        diagnostics: Iterable[Diagnostic] = (),
    ) -> None:
        diags = list(diagnostics)
        if message is not None:
            diags.insert(0, Diagnostic(message, span, hint, tuple(notes)))
        super().__init__(diags[0].message if diags else "error")
        self.diagnostics = diags

    @property
    def first(self) -> Diagnostic:
        return self.diagnostics[0]

    def render(self, sources: Mapping[str, str] | None = None) -> str:
        return "\n".join(d.render(sources) for d in self.diagnostics)

    def __str__(self) -> str:
        return self.render()


class DiagnosticSink:
    """Collects independent failures so that a pass can report them all at once."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def add(self, err: LbdlError) -> None:
        self.diagnostics.extend(err.diagnostics)

    def raise_if_any(self) -> None:
        if self.diagnostics:
            raise LbdlError(diagnostics=self.diagnostics)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """A hint naming the closest known spelling, or None when nothing is close."""
    import difflib

    pool = sorted(set(choices))
    norm = {c.replace("-", "").replace("_", "").replace(" ", "").lower(): c for c in pool}
    key = word.replace("-", "").replace("_", "").replace(" ", "").lower()
    if key in norm:
        return f"did you mean `{norm[key]}`?"
    close = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None

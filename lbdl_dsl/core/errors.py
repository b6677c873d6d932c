"""Source spans and the one error type of the compiler.

Every message the user sees about their spec goes through `LbdlError`, so every message has the
same form: ``FILE:LINE:COL: error: MESSAGE``, the offending source line, a caret under the whole
span, optional notes pointing at related places, and a hint. Keeping one type (rather than one
exception class per pass) means the CLI needs exactly one ``except`` to guarantee "no traceback for
anything the user wrote".
"""

from __future__ import annotations

import errno
import os
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
        """The full text shown to the user; ``sources`` maps file names to their text.

        Everything that may come from the user (file names, names and strings quoted in the
        message) goes through `printable` on its way out."""
        where = f"{printable(str(self.span))}: " if self.span else ""
        lines = [f"{where}{self.kind}: {printable(self.message, keep_newlines=True)}"]
        lines += _excerpt(self.span, sources)
        for note in self.notes:
            where = f"{printable(str(note.span))}: " if note.span else ""
            lines.append(f"{where}note: {printable(note.message, keep_newlines=True)}")
            lines += _excerpt(note.span, sources)
        if self.hint:
            lines.append(f"hint: {printable(self.hint, keep_newlines=True)}")
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


# Characters a terminal acts on instead of showing: C0 and C1 controls (ESC starts an escape
# sequence, U+009B is one on its own), DEL, the line and paragraph separators, and the
# bidirectional overrides that make a line read differently from its bytes.
_INVISIBLE = frozenset(
    [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029]
    + [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)


def _picture(c: str, escape: bool) -> str:
    o = ord(c)
    if o < 0x20:
        return chr(0x2400 + o)  # ␛ for ESC, ␇ for BEL: one column, as in the source
    if o == 0x7F:
        return "\u2421"
    if not escape:
        return "\ufffd"
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe to print on a terminal: what it would act on is shown instead.

    C0 controls become their pictures (U+2400...), other invisible characters an escape
    (``\\x9b``, ``\\u202e``). Names, strings and file names from the user pass through here
    on their way to the terminal, so a spec cannot move the cursor, ring the bell or reorder
    a line; ``keep_newlines`` keeps the line structure of a message of several lines.
    """
    if (text.isascii() and text.isprintable()) or not any(ord(c) in _INVISIBLE for c in text):
        return text  # the first test, in C, answers for nearly every text (a summary's cells)
    return "".join(
        c if ord(c) not in _INVISIBLE or (keep_newlines and c == "\n") else _picture(c, escape=True)
        for c in text
    )


def _printable(line: str) -> str:
    """A source line as an excerpt shows it: one column per character, so that the caret stays
    under what it points at; a character that would act on the terminal as a picture, or as
    U+FFFD where no picture exists."""
    return "".join(_picture(c, escape=False) if ord(c) in _INVISIBLE else c for c in line)


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
        self.sources: Mapping[str, str] | None = None  # the texts the spans point into

    @property
    def first(self) -> Diagnostic:
        return self.diagnostics[0]

    def render(self, sources: Mapping[str, str] | None = None) -> str:
        shown = sources if sources is not None else self.sources
        return "\n".join(d.render(shown) for d in self.diagnostics)

    def __str__(self) -> str:
        """The message as the command line prints it, source lines and carets included when
        the error carries its sources (`lbdl_dsl.check` and `compile` attach them)."""
        return self.render()


class ArgumentError(LbdlError, ValueError):
    """A bad argument of the Python API (or value of a flag): it names the argument and what
    it accepts. A `ValueError` too, as Python code expects of a bad argument."""


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


# -- the operating system's errors, as the user's -------------------------------------------

_OS_HINTS = {
    errno.EACCES: "check the permissions of the file and its folders, or choose another place",
    errno.EPERM: "check the permissions of the file and its folders, or choose another place",
    errno.EROFS: "the file system is read-only; choose another place (-o DIR)",
    errno.ENOSPC: "the disk is full; free some space or choose another place (-o DIR)",
    errno.EDQUOT: "the disk quota is used up; free some space or choose another place (-o DIR)",
    errno.EISDIR: "a folder has the name of the file; remove it or choose another place",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.ELOOP: "a symbolic link on the path points, through others, back to itself",
    errno.ENAMETOOLONG: "choose a shorter name",
    errno.ENOENT: "check the path and its spelling",
    errno.EEXIST: "a file is in the way; remove it or choose another place",
}


def os_error(
    exc: OSError | RuntimeError, action: str | None, path: str | os.PathLike[str] | None = None
) -> LbdlError:
    """An error of the operating system (a folder that cannot be written, a full disk, a
    symlink loop) as the user's error: it is about their files, never a bug of ours.

    ``action`` is what we were doing ("write", "read", "create the folder"); the path is
    ``path`` or the one the exception names. Python 3.11's ``Path.resolve`` reports a symlink
    loop as a RuntimeError, which is taken for ELOOP.
    """
    where = os.fspath(path) if path is not None else getattr(exc, "filename", None)
    if isinstance(exc, OSError):
        code, reason = exc.errno, exc.strerror or str(exc) or type(exc).__name__
    else:
        code, reason = errno.ELOOP, os.strerror(errno.ELOOP)
    target = f" {printable(os.fspath(where))}" if where is not None else ""
    message = f"cannot {action}{target}: {reason}" if action else f"{target.strip()}: {reason}"
    return LbdlError(message.removeprefix(": "), hint=_OS_HINTS.get(code or 0))

"""The examples of README.md and docs/*.md, read as tests: what runs, what it must print.

A document is a test (Rust's doctests): each fence is an example of one kind, by its info string.

- ```` ```console ````: shell commands, each on a line starting with ``$ `` (a line ending in
  ``\\`` continues it), each followed by the output it must print (stdout and stderr together).
  ``...`` alone on a line matches any number of lines; ``...`` inside a line matches any text
  there (a timing, a path). The commands run with bash, one document's in order, in a
  temporary folder where the repository's ``specs/``, ``tests/`` and ``docs/`` are linked and
  ``lbdl`` is on the PATH.
- A fence whose info string has ``file=NAME`` (```` ```lbdl spec file=m.lbdl ````, ```` ```python
  file=train.py ````): written as NAME in that folder, for the commands after it, not run.
- ```` ```python ````: run in order, one namespace per document, in that same folder; what it
  prints must be the ```` ```output ```` fence that follows it, if one does.

An HTML comment on the line before a fence says how it runs: ``<!-- doctest: skip: WHY -->``
never (it needs a GPU, a download, another machine), ``<!-- doctest: long: WHY -->`` only under
``pytest -m full`` (minutes of training). Every other fence of those kinds runs in CI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^( *)```([^\n`]*)\n(.*?)^\1```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*doctest:\s*(skip|long)\s*:\s*(.*?)\s*-->\s*$")
RUNNABLE = ("console", "python")
PLAIN = ("", "text", "sh", "bash", "shell")
# Fences of other kinds whose first line reads as a command: a command must be an example.
COMMANDISH = re.compile(r"^\s*(\$ |lbdl |lbdl-compile |make |pip |python |\.venv/)")


@dataclass(frozen=True)
class Example:
    """One fence: where it is, its kind, its text, how it runs, and its expected output."""

    document: str
    line: int
    kind: str
    text: str
    mode: str = "run"  # run, skip, long
    why: str = ""
    output: str | None = None  # a python fence's ```output fence
    file: str | None = None  # an ```lbdl fence's file=NAME: written where the commands run


@dataclass
class Document:
    path: Path
    examples: list[Example] = field(default_factory=list)
    commandish: list[int] = field(default_factory=list)  # lines of unmarked command-like fences

    @property
    def name(self) -> str:
        if self.path.is_relative_to(REPO):
            return self.path.relative_to(REPO).as_posix()
        return self.path.as_posix()


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def read(path: Path) -> Document:
    text = path.read_text("utf-8")
    doc = Document(path)
    fences = list(FENCE.finditer(text))
    taken: set[int] = set()
    for i, m in enumerate(fences):
        if i in taken:
            continue
        info, body = m.group(2).strip(), _dedent(m.group(3), len(m.group(1)))
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rpartition("\n")[2]
        mark = MARK.search(before)
        mode, why = (mark.group(1), mark.group(2)) if mark else ("run", "")
        kind = info.split()[0] if info else ""
        named = [w.removeprefix("file=") for w in info.split()[1:] if w.startswith("file=")]
        if named:
            doc.examples.append(Example(doc.name, line, "file", body, file=named[0]))
            continue
        if kind not in RUNNABLE:
            if mode == "skip":  # a command that cannot run here, and why
                doc.examples.append(Example(doc.name, line, kind, body, mode, why))
            elif kind in PLAIN and COMMANDISH.match(body.partition("\n")[0]):
                doc.commandish.append(line)
            continue
        output = None
        if kind == "python" and i + 1 < len(fences):
            nxt = fences[i + 1]
            if nxt.group(2).strip() == "output" and not text[m.end() : nxt.start()].strip():
                output = _dedent(nxt.group(3), len(nxt.group(1)))
                taken.add(i + 1)
        doc.examples.append(Example(doc.name, line, kind, body, mode, why, output))
    return doc


def stray_fences(path: Path) -> list[int]:
    """Lines with a fence mark that opens or closes no fence: a closing mark with text after it
    swallows the prose up to the next fence, so the example there would silently never run."""
    text = path.read_text("utf-8")
    used: set[int] = set()
    for m in FENCE.finditer(text):
        used.add(text.count("\n", 0, m.start()) + 1)
        used.add(text.count("\n", 0, m.end()) + 1)
    marks = [n for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith("```")]
    return [n for n in marks if n not in used]


def counts() -> tuple[int, int, int, int]:
    """(run, long, skipped) examples of all documents, and the number of documents."""
    examples = [e for p in documents() for e in read(p).examples if e.kind != "file"]
    modes = [e.mode for e in examples]
    return modes.count("run"), modes.count("long"), modes.count("skip"), len(documents())


def _dedent(body: str, indent: int) -> str:
    if not indent:
        return body
    return "".join(
        line if not line.strip() else line[indent:] if line[:indent].isspace() else line
        for line in body.splitlines(keepends=True)
    )


def commands(example: Example) -> list[tuple[str, str]]:
    """A console fence's (command, expected output) pairs."""
    pairs: list[tuple[str, list[str]]] = []
    lines = example.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command + "\n" + lines[i]  # bash reads the backslash-newline
            pairs.append((command, []))
        elif pairs:
            pairs[-1][1].append(line)
        i += 1
    return [(c, "\n".join(out)) for c, out in pairs]


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` is ``expected`` with its ``...`` filled in (trailing spaces aside)."""
    want = [line.rstrip() for line in expected.strip("\n").splitlines()]
    got = [line.rstrip() for line in actual.strip("\n").splitlines()]
    return _match(want, got)


def _match(want: list[str], got: list[str]) -> bool:
    memo: dict[tuple[int, int], bool] = {}

    def go(i: int, j: int) -> bool:
        if (i, j) in memo:
            return memo[i, j]
        if i == len(want):
            result = j == len(got)
        elif want[i].strip() == "...":
            result = any(go(i + 1, k) for k in range(j, len(got) + 1))
        else:
            result = j < len(got) and _line(want[i], got[j]) and go(i + 1, j + 1)
        memo[i, j] = result
        return result

    return go(0, 0)


def _line(want: str, got: str) -> bool:
    if "..." not in want:
        return want == got
    pattern = ".*".join(re.escape(part) for part in want.split("..."))
    return re.fullmatch(pattern, got) is not None

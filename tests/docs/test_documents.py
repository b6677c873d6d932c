"""Every example of README.md and docs/*.md runs, and prints what the document shows.

One test per document (its examples depend on each other, in order); the conventions are in
`documents`. ``LBDL_DOCS_UPDATE=1 pytest tests/docs`` (``make docs``) writes what the examples
print back into the documents, where it differs, for a change made on purpose.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from documents import (
    REPO,
    Document,
    Example,
    commands,
    counts,
    documents,
    matches,
    read,
    stray_fences,
)

UPDATE = bool(os.environ.get("LBDL_DOCS_UPDATE"))
LINKED = ("specs", "tests", "docs", "grammar", "bench")


def _cases() -> list:
    out = []
    for path in documents():
        doc = read(path)
        runnable = [e for e in doc.examples if e.mode != "skip" and e.kind != "file"]
        if not runnable:
            continue
        marks = [pytest.mark.full] if all(e.mode == "long" for e in runnable) else []
        out.append(pytest.param(doc, False, id=doc.name, marks=marks))
        if any(e.mode == "long" for e in runnable) and marks == []:
            out.append(pytest.param(doc, True, id=f"{doc.name}[long]", marks=pytest.mark.full))
    return out


COMMANDS = {"lbdl": "lbdl_dsl", "lbdl-compile": "lbdl_dsl.cli.compat"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The folder the examples run in: the repository's folders linked, and the commands on the
    PATH as this repository's code (whatever the installed entry points were built from)."""
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name)
    bin_ = tmp_path / ".bin"
    bin_.mkdir()
    for command, module in COMMANDS.items():
        script = bin_ / command
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {module} "$@"\n', "utf-8")
        script.chmod(0o755)
    return tmp_path


def environment(workdir: Path) -> dict[str, str]:
    """What a user's shell has: the commands, the repository's code, and XLA's default
    optimisation (the suite's quicker level would change the digits a training prints)."""
    env = dict(os.environ)
    path = [str(workdir / ".bin"), str(Path(sys.executable).parent), env.get("PATH", "")]
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONPATH"] = str(REPO)
    env["XLA_FLAGS"] = " ".join(
        f for f in env.get("XLA_FLAGS", "").split() if "backend_optimization_level" not in f
    )
    env.update(COLUMNS="100", NO_COLOR="1", TERM="dumb")
    env.pop("LBDL_DEBUG", None)
    return env


@pytest.mark.parametrize(("doc", "long"), _cases())
def test_the_document_prints_what_it_shows(doc: Document, long: bool, workdir: Path) -> None:
    failures: list[str] = []
    updates: dict[int, str] = {}
    namespace: dict[str, object] = {"__name__": "__doc__"}
    for example in doc.examples:
        if example.mode == "skip" or (example.mode == "long") != long and not _all_long(doc):
            continue
        where = f"{doc.name}:{example.line}"
        if example.file is not None:
            (workdir / example.file).parent.mkdir(parents=True, exist_ok=True)
            (workdir / example.file).write_text(example.text, "utf-8")
            continue
        if example.kind == "console":
            body = _console(example, workdir, failures, where)
        else:
            body = _python(example, workdir, namespace, failures, where)
        if body is not None:
            updates[example.line] = body
    if UPDATE and updates:
        _rewrite(doc, updates)
        return
    assert not failures, "\n\n".join(failures)


def _all_long(doc: Document) -> bool:
    return all(e.mode in ("long", "skip") or e.kind == "file" for e in doc.examples)


def _console(example: Example, workdir: Path, failures: list[str], where: str) -> str | None:
    """Run a console fence's commands; returns its text as run, when that differs."""
    new: list[str] = []
    changed = False
    for command, expected in commands(example):
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=workdir,
            env=environment(workdir),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=1800,
        )
        actual = result.stdout.replace(f"{workdir}/", "").replace(str(workdir), ".")
        ok = matches(expected, actual)
        if not ok:
            changed = True
            failures.append(
                f"{where}: `{command}` (exit {result.returncode}) printed:\n{actual}\n"
                f"where the document shows:\n{expected}"
            )
        new.append("$ " + command)
        shown = expected if ok else actual.rstrip("\n")
        if shown:
            new.append(shown)
    return "\n".join(new) + "\n" if changed else None


def _python(
    example: Example,
    workdir: Path,
    namespace: dict[str, object],
    failures: list[str],
    where: str,
) -> str | None:
    """Run a python fence in the document's namespace; returns its new output, when it differs."""
    out = io.StringIO()
    before = Path.cwd()
    try:
        os.chdir(workdir)
        with contextlib.redirect_stdout(out):
            exec(compile(example.text, where, "exec"), namespace)  # noqa: S102 - our own docs
    except Exception:  # noqa: BLE001 - reported with the document's line
        failures.append(f"{where}: the example raised:\n{traceback.format_exc()}")
        return None
    finally:
        os.chdir(before)
    if example.output is None:
        if out.getvalue().strip():
            failures.append(
                f"{where}: prints output that no ```output fence shows:\n{out.getvalue()}"
            )
        return None
    if matches(example.output, out.getvalue()):
        return None
    failures.append(
        f"{where}: the example printed:\n{out.getvalue()}\nwhere the document shows:\n"
        f"{example.output}"
    )
    return out.getvalue()


def _rewrite(doc: Document, updates: dict[int, str]) -> None:
    """Put what the examples printed back into the document (``LBDL_DOCS_UPDATE=1``)."""
    from documents import FENCE

    text = doc.path.read_text("utf-8")
    pieces, last = [], 0
    fences = list(FENCE.finditer(text))
    for i, m in enumerate(fences):
        line = text.count("\n", 0, m.start()) + 1
        if line not in updates:
            continue
        kind = m.group(2).strip().split()[0] if m.group(2).strip() else ""
        target = m if kind == "console" else fences[i + 1]  # a python fence's output follows
        indent = target.group(1)
        body = "".join(
            indent + row if row.strip() else row for row in updates[line].splitlines(keepends=True)
        )
        start = target.start(3)
        pieces += [text[last:start], body if body.endswith("\n") else body + "\n"]
        last = target.end(3)
    pieces.append(text[last:])
    doc.path.write_text("".join(pieces), "utf-8")


def test_every_command_in_a_document_is_an_example() -> None:
    """A command shown in a plain fence would never run: it must be a console fence, or say why
    it cannot run here (``<!-- doctest: skip: WHY -->``)."""
    stray = [f"{read(p).name}:{line}" for p in documents() for line in read(p).commandish]
    assert not stray, f"commands outside ```console fences: {', '.join(stray)}"


def test_every_fence_mark_opens_or_closes_a_fence() -> None:
    stray = [f"{read(p).name}:{n}" for p in documents() for n in stray_fences(p)]
    assert not stray, f"fence marks that open or close no fence: {', '.join(stray)}"


def test_a_blank_line_in_an_indented_fence_is_expected_output(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("1. item\n\n   ```console\n   $ echo a\n   a\n\n   b\n   ```\n", "utf-8")
    [example] = read(page).examples
    assert example.text == "$ echo a\na\n\nb\n"
    [(command, expected)] = commands(example)
    assert not matches(expected, "a\nb") and matches(expected, "a\n\nb")
    assert stray_fences(page) == []
    page.write_text("```console\n$ echo a\na\n``` and then prose\n\n```text\nx\n```\n", "utf-8")
    assert stray_fences(page) == [4, 6]


def test_documents_have_examples() -> None:
    run, long, skip, _ = counts()
    assert run >= 20 and skip < run, (run, long, skip)

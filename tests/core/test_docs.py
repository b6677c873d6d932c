"""The documentation cannot drift: docs/layers.md is the generator's output, and every example of
docs/language.md marked as a complete spec compiles.

Fences in docs/language.md carry their role in the info string: ```` ```lbdl spec ```` is a
complete spec that must check, ```` ```lbdl file=PATH ```` a library file the specs may import,
```` ```lbdl error ```` a spec that must be refused with our error (never a crash), and a bare
```` ```lbdl ```` a fragment of syntax, shown but not compiled.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lbdl_dsl.compiler import limits
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.tools import layer_docs

REPO = Path(__file__).resolve().parents[2]
LANGUAGE = REPO / "docs" / "language.md"
FENCE = re.compile(r"^```lbdl([^\n]*)\n(.*?)^```$", re.M | re.S)


def fences() -> list[tuple[str, str, int]]:
    """(info, text, line) of every lbdl fence of docs/language.md."""
    text = LANGUAGE.read_text("utf-8")
    return [
        (m.group(1).strip(), m.group(2), text.count("\n", 0, m.start()) + 1)
        for m in FENCE.finditer(text)
    ]


def _library(tmp_path: Path) -> None:
    for info, text, _ in fences():
        if info.startswith("file="):
            path = tmp_path / info.removeprefix("file=")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, "utf-8")


SPECS = [(text, line) for info, text, line in fences() if info.split()[:1] == ["spec"]]
ERRORS = [(text, line) for info, text, line in fences() if info == "error"]


def test_the_layer_reference_is_the_generator_s_output() -> None:
    committed = (REPO / "docs" / "layers.md").read_text("utf-8")
    assert committed == layer_docs.render(), (
        "docs/layers.md is out of date: run `python -m lbdl_dsl.tools.layer_docs > docs/layers.md`"
    )


def test_the_language_reference_has_examples_of_every_kind() -> None:
    infos = [info for info, _, _ in fences()]
    assert len(SPECS) >= 15 and ERRORS
    known = ("", "spec", "error")
    assert all(i in known or i.startswith(("file=", "spec file=")) for i in infos), infos


@pytest.mark.parametrize(("text", "line"), SPECS, ids=[f"line{line}" for _, line in SPECS])
def test_each_complete_example_compiles(text: str, line: int, tmp_path: Path) -> None:
    _library(tmp_path)
    path = tmp_path / "example.lbdl"
    path.write_text(text, "utf-8")
    try:
        compiled = compile_spec(path)
    except LbdlError as err:
        pytest.fail(f"docs/language.md:{line}: the example does not compile:\n{err.render()}")
    assert compiled is not None and compiled.ok


@pytest.mark.parametrize(("text", "line"), ERRORS, ids=[f"line{line}" for _, line in ERRORS])
def test_each_error_example_is_refused(text: str, line: int, tmp_path: Path) -> None:
    path = tmp_path / "spec.lbdl"
    path.write_text(text, "utf-8")
    with pytest.raises(LbdlError):
        compile_spec(path)


def test_the_limits_table_matches_limits_py() -> None:
    doc = LANGUAGE.read_text("utf-8")
    section = doc[doc.index("## Limits") : doc.index("## What the language cannot say yet")]
    rows = {
        m.group(1): m.group(2) for m in re.finditer(r"^\| `([A-Z_]+)` \| ([^|]+) \|", section, re.M)
    }
    constants = {name: getattr(limits, name) for name in dir(limits) if name.startswith("MAX_")}
    assert set(rows) == set(constants)
    for name, value in constants.items():
        assert rows[name].startswith(f"{value:,}"), f"{name} is {value:,} in limits.py"


def test_the_language_reference_names_every_statement_of_the_grammar() -> None:
    doc = LANGUAGE.read_text("utf-8")
    for word in (
        "import",
        "block",
        "model",
        "input",
        "output",
        "from",
        "->",
        "residual:",
        "shortcut:",
        "assert",
        "tie=",
        "int<",
        "×N",
        "--set",
    ):
        assert f"`{word}" in doc or f"{word}`" in doc, word

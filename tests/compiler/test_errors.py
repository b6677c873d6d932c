"""Golden error messages: the full text ``lbdl-compile --check`` prints for each malformed spec.

"Errors are a feature" (docs: STYLE.md): a message is part of the interface, so each one is
pinned by a golden file, and a change to any of them shows in review. The table is
tests/golden/errors/cases.table (a spec NAME.lbdl, its group, the LINE:COL of its first error, and
what it shows); the goldens are NAME.txt beside it. ``LBDL_ACCEPT=1 pytest
tests/compiler/test_errors.py`` rewrites the goldens on purpose; then regenerate docs/errors.md with
``python -m lbdl_dsl.tools.error_docs > docs/errors.md``.

The parser's table of known mistakes (`MISTAKES`) is a test table too: each example must give its
message and hint.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lbdl_dsl.compiler.parser import MISTAKES, parse
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.tools import error_docs
from lbdl_dsl.tools.error_docs import CASES_DIR, ErrorCase, load_table, run_case

ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"
CASES = load_table()
HEADER = re.compile(r"^(?P<file>[^\n]+?):(?P<line>\d+):(?P<col>\d+): error: ")


def _golden(case: ErrorCase, actual: str) -> str:
    """The committed message, or ``actual`` written in its place under LBDL_ACCEPT=1."""
    if ACCEPT:
        case.golden.write_text(actual, "utf-8")
    if not case.golden.is_file():
        pytest.fail(f"no golden for {case.name}; run with LBDL_ACCEPT=1 to write it")
    return case.golden.read_text("utf-8")


# -- the table itself -------------------------------------------------------------------------


def test_the_table_covers_every_group() -> None:
    groups = [c.group for c in CASES]
    assert len(CASES) >= 40
    assert groups.count("syntax") >= 25
    assert set(groups) == set(error_docs.GROUPS)
    assert len({c.name for c in CASES}) == len(CASES), "a case name is used twice"


def test_every_spec_file_is_a_row_and_every_row_has_its_files() -> None:
    specs = {p.stem for p in CASES_DIR.glob("*.lbdl")}
    goldens = {p.stem for p in CASES_DIR.glob("*.txt")}
    names = {c.name for c in CASES}
    assert specs == names, "a spec without a row, or a row without its spec"
    assert goldens <= names, f"stale goldens: {sorted(goldens - names)}"


# -- each message -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_message(case: ErrorCase) -> None:
    rc, out, err = run_case(case)
    assert rc == 1, err
    assert out == ""
    header = HEADER.match(err)
    assert header, f"not a FILE:LINE:COL: error: message:\n{err}"
    assert f"{header['line']}:{header['col']}" == case.at
    assert "Traceback" not in err
    assert err == _golden(case, err)


@pytest.mark.parametrize("name", ["binary_data", "import_cycle", "two_failures"])
def test_the_command_line_prints_the_golden_text(name: str) -> None:
    """The in-process runs above print what the installed command prints, byte for byte."""
    case = next(c for c in CASES if c.name == name)
    proc = subprocess.run(
        [sys.executable, "-m", "lbdl_dsl.cli.compat", case.spec.name, "--check"],
        cwd=CASES_DIR, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr == case.golden.read_text("utf-8")


def test_independent_failures_are_reported_in_one_run() -> None:
    case = next(c for c in CASES if c.name == "two_failures")
    errors = [line for line in case.golden.read_text("utf-8").splitlines() if HEADER.match(line)]
    assert len(errors) == 2
    assert errors[0] != errors[1]


def test_a_spec_error_names_a_line_and_column_inside_its_file() -> None:
    for case in CASES:
        first = case.golden.read_text("utf-8").split("\n", 1)[0]
        m = HEADER.match(first)
        assert m, case.name
        path = CASES_DIR / m["file"]
        lines = path.read_bytes().decode("utf-8", "replace").split("\n")
        row, col = int(m["line"]), int(m["col"])
        assert 1 <= row <= len(lines), case.name
        assert 1 <= col <= len(lines[row - 1]) + 1, case.name


# -- the parser's known mistakes --------------------------------------------------------------

EXAMPLES = [(label, ex) for label, examples in MISTAKES.items() for ex in examples]


@pytest.mark.parametrize("label, example", EXAMPLES, ids=[repr(ex) for _, ex in EXAMPLES])
def test_each_known_mistake_gives_its_message(label: tuple[str, str], example: str) -> None:
    message, hint = label
    with pytest.raises(LbdlError) as info:
        parse(example, "mistake.lbdl")
    first = info.value.first
    assert first.message.startswith(message)
    if message.startswith("a block or model name has"):  # rewritten: the user's name
        assert first.hint and first.hint.startswith(("write `block ", "write `model "))
    elif message.startswith("a shape annotation must come after"):  # rewritten: see below
        assert first.hint and ("the shape last" in first.hint or "comes last" in first.hint)
    else:
        assert first.hint == hint
    assert first.span is not None and first.span.file == "mistake.lbdl"


@pytest.mark.parametrize(
    "box, hint",
    [
        ("fc 8 bias=false", "write `fc out=8 bias=false`, or the shape last: `fc bias=false  8`"),
        (
            "fc 2D bias=false -> y  # hidden",
            "write `fc out=2D bias=false -> y`, or the shape last: `fc bias=false  2D -> y`",
        ),
        ("conv-2d 8×4×4 k=3 s=1", "the shape comes last: `conv-2d k=3 s=1  8×4×4`"),
        ("mine 8 k=3", "the shape comes last: `mine k=3  8`"),
    ],
)
@pytest.mark.parametrize("where", ["model", "block", "group"])
def test_a_shape_before_the_hyper_parameters_is_corrected_in_the_users_words(
    box: str, hint: str, where: str
) -> None:
    """The hint is the user's own line, corrected, wherever the box sits: the parser's state
    at the mistake is the same in a model, a block or a ×N group (only its depth differs)."""
    lines = {
        "model": f"model m(D=4):\n  input X: 3\n  {box}\n",
        "block": f"block b(D=4) on C:\n  {box}\n",
        "group": f"model m(D=4):\n  input X: 3\n  ×2:\n    residual:\n      {box}\n",
    }
    with pytest.raises(LbdlError) as info:
        parse(lines[where], "x.lbdl")
    assert info.value.first.message.startswith("a shape annotation must come after")
    assert info.value.first.hint == hint


def test_each_known_mistake_has_examples() -> None:
    assert all(examples for examples in MISTAKES.values())


@pytest.mark.parametrize(
    "text, message",
    [
        ("model m:\n  input X: 3\n  conv-2d k=3 p=1  8×8×  # trailing\n", "a shape cannot end"),
        ("model m:\n  input X: 3\n  conv-2d k=(3, 3\n", "missing `)`"),
        ("model m:\n  input X: 3\n  conv-2d c=8 k=3 -> \n", "`->` names the tensor"),
        ("model m:\n  input X: 3\n  relu $\n", "did not expect `$` here"),
    ],
)
def test_a_dangling_operator_is_recognised_in_any_state(text: str, message: str) -> None:
    """A line ending in `×`, `->` or inside `(` is the same mistake after any box prefix; a
    stray character is not mistaken for the `:` that fails in the same parser state."""
    with pytest.raises(LbdlError) as info:
        parse(text, "x.lbdl")
    assert info.value.first.message.startswith(message)


# -- the generated page -----------------------------------------------------------------------


def test_docs_errors_md_is_up_to_date() -> None:
    page = error_docs.render()
    path = Path(error_docs.ROOT) / "docs" / "errors.md"
    if ACCEPT:
        path.write_text(page, "utf-8")
    assert path.read_text("utf-8") == page, (
        "docs/errors.md is stale: python -m lbdl_dsl.tools.error_docs > docs/errors.md"
    )


def test_the_page_shows_every_case_and_every_limit() -> None:
    page = error_docs.render()
    for case in CASES:
        assert f"`{case.name}.lbdl`" in page
        assert case.golden.read_text("utf-8").rstrip("\n") in page
    for name, _, doc in error_docs.limit_docs():
        assert f"`{name}`" in page and doc

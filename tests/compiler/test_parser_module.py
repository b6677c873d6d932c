"""The generated parser, `compiler/_lbdl_parser.py`, against the grammar it was made from.

The parse stage runs on that module alone (lark's standalone LALR parser with our tables,
written by `make parser`), never on an installed lark. These tests say when it no longer
matches `grammar/lbdl.lark`:

- its header carries the digest of the grammar it was made from (no lark needed to check it);
- `make parser` run again gives the committed bytes with the lark release that wrote it, and
  the same tables with any other;
- an installed lark, through its public interface only (`Lark(...)`, `parse`), parses every
  spec to the same tree and fails on every known mistake at the same place, as the module does;
- a spec is checked with no lark importable at all.
"""

from __future__ import annotations

import functools
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lbdl_dsl.compiler import _lbdl_parser, parser
from lbdl_dsl.tools import parser_module

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.lbdl"))


def test_the_module_was_made_from_this_grammar() -> None:
    digest = parser_module.grammar_digest(parser.grammar_text())
    header = parser_module.MODULE.read_text("utf-8").split("\n", 3)[1]
    assert header.endswith(f"Grammar sha256: {digest}"), "the grammar changed: run `make parser`"


def test_make_parser_gives_the_committed_module() -> None:
    """Regenerated with the lark that wrote it: the same bytes. With another lark (whose own
    code the module would then carry), the same grammar tables."""
    lark = pytest.importorskip("lark")
    text = parser_module.generate()
    committed = parser_module.MODULE.read_text("utf-8")
    if lark.__version__ == _lbdl_parser.__version__:
        assert text == committed, "run `make parser` and commit the module"
        return
    namespace: dict[str, Any] = {}
    exec(compile(text, "regenerated", "exec"), namespace)  # noqa: S102 - lark's own output
    assert namespace["DATA"] == _lbdl_parser.DATA and namespace["MEMO"] == _lbdl_parser.MEMO


def test_the_table_is_written_in_one_order() -> None:
    """Lark numbers states and terminals differently from run to run: the canonical order
    undoes any renumbering (the committed table is in it already)."""
    table = _lbdl_parser.DATA["parser"]["parser"]
    rng = random.Random(0)
    states, tokens = list(table["states"]), list(table["tokens"])
    new_state = dict(zip(states, rng.sample(states, len(states)), strict=True))
    new_token = dict(zip(tokens, rng.sample(tokens, len(tokens)), strict=True))
    shuffled = {
        "tokens": {new_token[i]: name for i, name in table["tokens"].items()},
        "states": {
            new_state[s]: {
                new_token[t]: (kind, new_state[arg] if kind == 0 else arg)
                for t, (kind, arg) in row.items()
            }
            for s, row in table["states"].items()
        },
        "start_states": {k: new_state[v] for k, v in table["start_states"].items()},
        "end_states": {k: new_state[v] for k, v in table["end_states"].items()},
    }
    assert shuffled != table
    canonical = parser_module.canonical_table(shuffled)
    assert canonical == table and repr(canonical) == repr(table)


def _shape(x: Any) -> Any:
    """A tree of either parser as plain values: rule names, tokens with every position."""
    if x is None:
        return None
    if hasattr(x, "data"):
        return (str(x.data), [_shape(c) for c in x.children])
    return (x.type, str(x), x.line, x.column, x.end_line, x.end_column, x.start_pos, x.end_pos)


def _failure(parse: Any, text: str) -> Any:
    try:
        return ("tree", _shape(parse(text)))
    except Exception as exc:  # noqa: BLE001 - either parser's UnexpectedInput, compared
        token = getattr(exc, "token", None)
        expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None) or ()
        return (type(exc).__name__, exc.line, exc.column, getattr(token, "type", None)) + (
            tuple(sorted(expected)),
        )


def _public_lark() -> Any:
    """The grammar in the installed lark, through its documented interface only."""
    lark = pytest.importorskip("lark")
    from lark.indenter import Indenter

    class Lines(Indenter):
        NL_type = parser._Indenter.NL_type
        OPEN_PAREN_types: list[str] = []
        CLOSE_PAREN_types: list[str] = []
        INDENT_type = parser._Indenter.INDENT_type
        DEDENT_type = parser._Indenter.DEDENT_type
        tab_len = parser._Indenter.tab_len

    return lark.Lark(
        parser.grammar_text(),
        parser="lalr",
        lexer="contextual",
        maybe_placeholders=True,
        postlex=Lines(),
        start=["start", "formula"],  # a table's formula is parsed from its own start symbol
    )


def _prepared(text: str) -> str:
    text = text if text.endswith("\n") else text + "\n"
    return parser._COMMENT_LINE.sub("", text)


FORMULAS = (
    "16 * (j > i) + where(abs(j - i) < 8, abs(j - i), min(15, 8 + floor(log(abs(j - i) / 8))))",
    "clamp(i - 2, 0, 3) ^ -2 <= -k",
    "2 + (i",
    "min(i,, j)",
    "i $ j",
)


def test_an_installed_lark_parses_as_the_module_does() -> None:
    """Every spec's tree, and every known mistake's failure (class, place, token, expected),
    from the installed lark's public parser and from the committed module."""
    public = _public_lark()
    module = _lbdl_parser.Lark_StandAlone(postlex=parser._Indenter())
    texts = [p.read_text("utf-8") for p in SPECS]
    texts += [e for group in parser.MISTAKES.values() for e in group]
    for text in map(_prepared, texts):
        ours, theirs = (functools.partial(p.parse, start="start") for p in (module, public))
        assert _failure(ours, text) == _failure(theirs, text), text[:200]
    for text in FORMULAS:
        ours, theirs = (functools.partial(p.parse, start="formula") for p in (module, public))
        assert _failure(ours, text) == _failure(theirs, text), text
    assert len(SPECS) > 20


BLOCK_LARK = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "lark":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
from lbdl_dsl.cli import main
code = main(sys.argv[1:])
assert not any(m.partition(".")[0] == "lark" for m in sys.modules), "lark was imported"
sys.exit(code)
"""


def test_a_spec_is_checked_without_lark() -> None:
    """Lark is needed to regenerate the module (the `dev` extra), never to parse."""
    calls = [
        (["check", "specs/resnet50.lbdl"], 0, "25,557,032 trainable"),
        (["check", "tests/golden/errors/colon_after_box.lbdl"], 1, "only group headers end"),
    ]
    for args, code, said in calls:
        done = subprocess.run(
            [sys.executable, "-c", BLOCK_LARK, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == code, done.stderr
        assert said in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_no_module_of_the_package_imports_lark() -> None:
    """Not even the generator, which runs lark's standalone tool by its command line."""
    import ast

    for path in sorted((REPO / "lbdl_dsl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            assert not any(n.partition(".")[0] == "lark" for n in names), path

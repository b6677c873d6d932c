"""The parse's fast path (`compiler/lalr.py`) against lark's own loop, and against main's trees.

`Driver` lexes, indents and parses with lark's tables but not through lark's code, and the
node makers were made cheaper: these tests hold both to what they replace.

- The trees are main's: the `repr` of every spec's tree (spans included) has the digest that
  main's parser gave before this work (``tests/golden/parse/ast-repr.json``; ``LBDL_ACCEPT=1``
  rewrites it after a change made on purpose, which the change then says).
- The driver feeds the node makers what lark's own loop feeds them: the same reductions in the
  same order, with tokens equal in type, text and every position.
- Text the fast path cannot parse is left to lark, whose errors stay the ones of the goldens.
- The parser internals it reads are there: those of `compiler/_lbdl_parser.py`, the parser
  lark's standalone generator wrote for our grammar (`make parser`), not of an installed lark.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from lbdl_dsl.compiler import _lbdl_parser, ast, parser
from lbdl_dsl.compiler._lbdl_parser import Token
from lbdl_dsl.compiler.lalr import Driver
from lbdl_dsl.core.errors import LbdlError, Span

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.check_scale import big_spec  # noqa: E402

GOLDEN = REPO / "tests" / "golden" / "parse" / "ast-repr.json"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"
FILES = sorted(
    str(p.relative_to(REPO))
    for p in [*(REPO / "specs").glob("*.lbdl"), *(REPO / "tests").rglob("*.lbdl")]
)
BIG = "big_spec(20000)"


def _source(name: str) -> bytes:
    if name == BIG:
        return big_spec(20000).encode("utf-8")
    return (REPO / name).read_bytes()


def _outcome(name: str) -> str:
    """The tree's repr, or the rendered error: what a spec parses to."""
    data = _source(name)
    try:
        return repr(parser.parse(data, name))
    except LbdlError as exc:
        return "error: " + exc.render({name: data.decode("utf-8", "replace")})


def _digest(name: str) -> str:
    return hashlib.sha256(_outcome(name).encode("utf-8")).hexdigest()


def _prepared(name: str) -> str | None:
    """The text as `parser.parse` hands it to the parser, or None where its checks refuse it."""
    text = _source(name).decode("utf-8", "replace").removeprefix("\ufeff")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    try:
        parser._precheck(text, name)
    except LbdlError:
        return None
    return parser._COMMENT_LINE.sub("", text if text.endswith("\n") else text + "\n")


def test_the_golden_lists_every_spec() -> None:
    if ACCEPT:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        digests = {name: _digest(name) for name in [*FILES, BIG]}
        GOLDEN.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", "utf-8")
    assert sorted(json.loads(GOLDEN.read_text("utf-8"))) == sorted([*FILES, BIG])


@pytest.mark.parametrize("name", [*FILES, BIG])
def test_the_tree_is_main_s(name: str) -> None:
    """Every spec and test file, and 20,000 boxes, parse to main's trees and errors."""
    assert _digest(name) == json.loads(GOLDEN.read_text("utf-8"))[name]


def _recorded(callbacks: dict[Any, Any], log: list[Any]) -> dict[Any, Any]:
    """``callbacks``, each logging its rule and its children (a token with all it holds)."""

    def child(c: Any) -> Any:
        if isinstance(c, Token):
            return (c.type, str(c), c.value, c.start_pos, c.line, c.column) + (
                c.end_line,
                c.end_column,
                c.end_pos,
            )
        return type(c).__name__

    def wrap(rule: Any, callback: Any) -> Any:
        def logged(children: list[Any]) -> Any:
            log.append((str(rule), [child(c) for c in children]))
            return callback(children)

        return logged

    return {rule: wrap(rule, callback) for rule, callback in callbacks.items()}


def _both(text: str) -> tuple[Any, list[Any], Any, list[Any]]:
    """The fast path's value and log, then lark's own loop's, with the same node makers."""
    driver = parser._driver()
    fast_log: list[Any] = []
    by_rule = _recorded(parser._inline_callbacks(parser._ToAst(text, "t.lbdl")), fast_log)
    fast = driver.parse(text, [by_rule[rule] for rule in driver.rules])
    lark_log: list[Any] = []
    callbacks = _recorded(parser._inline_callbacks(parser._ToAst(text, "t.lbdl")), lark_log)
    frontend = parser._lark().parser
    run = parser._Parser(frontend.parser._parse_table, callbacks)
    slow = run.parse(frontend._make_lexer_thread(text), "start")
    return fast, fast_log, slow, lark_log


@pytest.mark.parametrize("name", [*(n for n in FILES if n.startswith("specs/")), BIG])
def test_the_driver_feeds_what_lark_feeds(name: str) -> None:
    text = _prepared(name)
    assert text is not None
    fast, fast_log, slow, lark_log = _both(text)
    assert fast is not None, "the fast path fell back to lark on a valid spec"
    assert fast_log == lark_log
    assert repr(fast) == repr(slow)


@pytest.mark.parametrize(
    "text",
    [
        "model m:\n  input X: 3\n  relu",  # no newline at the end
        "\n\n# a comment\nmodel m:  # and another\n\n  input X: 3\n  relu\n\n  # end\n",
        "block b on C:\n  ×2:\n    residual:\n      fc C\n    shortcut:\n      relu\n"
        "model m:\n  input X: 3\n  b\n",  # groups closed by a dedent to the margin
        "model m(N=2):\n  input X: 3×8×8\n  conv-2d k=3 p=1  8×8×8 -> a\n  leaky  relu\n"
        "  ×N:\n    + (a)\n  output Y\n",  # a keyword-like op, LEAKY, PLUS and names
        'import "x.lbdl"\nmodel m:\n  input X: T int<V>\n  input Y: T\n  x x=(1, 2)\n',
    ],
)
def test_the_driver_feeds_what_lark_feeds_on_corners(text: str) -> None:
    if not text.endswith("\n"):
        text += "\n"
    fast, fast_log, slow, lark_log = _both(parser._COMMENT_LINE.sub("", text))
    assert fast is not None
    assert fast_log == lark_log
    assert repr(fast) == repr(slow)


def _rejected() -> list[str]:
    examples = [e for group in parser.MISTAKES.values() for e in group]
    golden_errors = sorted((REPO / "tests" / "golden" / "errors").glob("*.lbdl"))
    return examples + [p.read_text("utf-8", "replace") for p in golden_errors]


@pytest.mark.parametrize("text", _rejected())
def test_what_the_fast_path_cannot_parse_is_left_to_lark(text: str) -> None:
    """A syntax error, an indentation lark refuses or a node's own error (a division by
    zero): the fast path gives up, and the error is the one lark's path gives."""
    try:
        expected = repr(_lark_only(text))
    except LbdlError as exc:
        expected = exc.render({"t.lbdl": text})
        prepared = _prepared_text(text)
        assert prepared is None or parser._parse_fast(prepared, "t.lbdl") is None
    try:
        got = repr(parser.parse(text, "t.lbdl"))
    except LbdlError as exc:
        got = exc.render({"t.lbdl": text})
    assert got == expected


def _prepared_text(text: str) -> str | None:
    try:
        parser._precheck(text.replace("\r\n", "\n"), "t.lbdl")
    except LbdlError:
        return None
    text = text if text.endswith("\n") else text + "\n"
    return parser._COMMENT_LINE.sub("", text)


def _lark_only(text: str) -> ast.Module:
    fast = parser._parse_fast
    parser._parse_fast = lambda text, file: None  # type: ignore[assignment]
    try:
        return parser.parse(text, "t.lbdl")
    finally:
        parser._parse_fast = fast


def test_a_span_made_without_its_init_is_the_same_span() -> None:
    """`_span` sets a span's fields as `Span`'s own ``__init__`` does, without calling it: the
    class must have no ``__post_init__``, and the span compares, hashes and prints the same."""
    span = Span("f.lbdl", 1, 2, 3, 4)
    made = parser._span("f.lbdl", 1, 2, 3, 4)
    assert made == span and hash(made) == hash(span) and repr(made) == repr(span)
    assert type(made) is Span and not hasattr(Span, "__post_init__")
    assert [f.name for f in dataclasses.fields(Span)] == [
        "file",
        "line",
        "column",
        "end_line",
        "end_column",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.line = 2  # type: ignore[misc]


def test_the_driver_reads_the_generated_module() -> None:
    """The internals `lalr.py` names, on the parser `parse` uses and on a fresh one of the
    generated module: a regenerated module whose internals moved fails here first."""
    fresh = _lbdl_parser.Lark_StandAlone(postlex=parser._Indenter())
    text = "model m:\n  input X: 3\n  fc 4\n"
    for built in (fresh, parser._lark()):
        driver = Driver(built)
        assert driver.rules and all(driver.scanners[state].kinds for state in driver.actions)
        by_rule = parser._inline_callbacks(parser._ToAst(text, "t.lbdl"))
        module = driver.parse(text, [by_rule.get(rule) for rule in driver.rules])
        assert isinstance(module, ast.Module) and module.models[0].body[1].op == "fc"


def test_a_list_whose_span_is_read_keeps_it() -> None:
    """A list of `(repeat | hparam)*` or of a shape's `× size` may end its parent's span, so
    its span is made; a body's statements are never an end of a span, and make none."""
    kinds = {name: kind for _, name, kind, _ in parser._rule_plan() if name.startswith("__")}
    assert kinds["__shape_star_8"] == "spliced" and kinds["__box_star_5"] == "spliced"
    assert kinds["__body_plus_3"] == "unseen"

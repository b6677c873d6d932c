"""Stage 1, parse: spec text → `ast.Module`.

Lark's standalone LALR parser does the parsing (its contextual lexer and an indenter, generated
from `grammar/lbdl.lark` into `_lbdl_parser.py` by `make parser`: no installed lark is read), this
module does the rest of what turns text into a trustworthy tree: it refuses input the parser
should never see (binary, huge, tab-indented, absurdly nested), translates the parser's
exceptions into `LbdlError`s that name the line, the column and the offending text, recognises
common mistakes by example (`match_examples`, the table being also a test table), and makes
frozen dataclasses as the parser reduces each rule. No parser object leaves this module.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Hashable
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler._lbdl_parser import (
    ChildFilterLALR,
    ChildFilterLALR_NoPlaceholders,
    Indenter,
    Lark,
    Lark_StandAlone,
    LexerThread,
    Token,
    Tree,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    _Parser,
)
from lbdl_dsl.compiler.lalr import Driver
from lbdl_dsl.compiler.limits import MAX_NAME, MAX_NESTING, MAX_SOURCE_BYTES
from lbdl_dsl.core.collector import fewer_collections
from lbdl_dsl.core.errors import LbdlError, Span
from lbdl_dsl.core.symbolic import Expr, sym

# -- the grammar ------------------------------------------------------------------------------


def grammar_text() -> str:
    """The grammar shipped in the wheel, or the repository's ``grammar/lbdl.lark``."""
    package = Path(__file__).resolve().parents[1]
    for path in (package / "grammar" / "lbdl.lark", package.parent / "grammar" / "lbdl.lark"):
        if path.is_file():
            return path.read_text("utf-8")
    from importlib import resources  # a package that is not files (a zip): 5 ms of imports

    return resources.files("lbdl_dsl").joinpath("grammar/lbdl.lark").read_text(encoding="utf-8")


class _Indenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types: list[str] = []  # a box never spans lines
    CLOSE_PAREN_types: list[str] = []
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8


@functools.cache
def _lark() -> Lark:
    """The parser of `_lbdl_parser.py`, generated from the grammar by `make parser` (its
    tables are in the module: nothing is built or read from a cache at run time)."""
    load = cast(Callable[..., Lark], Lark_StandAlone)  # the generated code is not annotated
    return load(postlex=_Indenter())


# -- pre-checks: what lark should never see ---------------------------------------------------


_COMMENT_LINE = re.compile(r"^[ \t\f]*#[^\n]*", re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f]")  # what `_precheck` refuses: not \t \n \r \f


def _decode(data: str | bytes, file: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # count lines and columns as in the decoded text: no BOM, CR LF and CR are line ends
        before = data[: exc.start].removeprefix(b"\xef\xbb\xbf")
        before = before.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8")) + 1  # characters, not bytes
        raise LbdlError(
            f"the spec is not valid UTF-8 text (byte 0x{data[exc.start]:02x})",
            Span.point(file, line, col),
            hint="a spec is a text file; save it as UTF-8",
        ) from None


def _precheck(text: str, file: str) -> None:
    """Reject sizes, characters and indentation that have no meaning, with a precise place."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        raise LbdlError(
            f"the spec is too large ({size:,} bytes; the limit is {MAX_SOURCE_BYTES:,})",
            Span.point(file, 1, 1),
            hint="a spec describes an architecture in a few hundred lines; split a block "
            "library into imported files",
        )
    _check_name_lengths(text, file)
    controls = _CONTROL.search(text) is not None  # the loops below look only where it matters
    stack = [0]
    seen_code = False
    for lineno, line in enumerate(text.split("\n"), 1):
        if controls:
            _check_characters(line, file, lineno)
        stripped = line.lstrip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        lead = line[: len(line) - len(stripped)]
        if "\t" in lead:
            raise LbdlError(
                "tab in indentation",
                Span.point(file, lineno, lead.index("\t") + 1),
                hint="indent with spaces (tabs between columns are fine)",
            )
        if lead and not seen_code and stack == [0]:  # lark would silently accept it
            raise LbdlError(_INDENTED[0], Span.point(file, lineno, len(lead) + 1), _INDENTED[1])
        seen_code = True
        if len(lead) != stack[-1]:  # most lines are indented as the line before them
            _check_indent(stack, len(lead), file, lineno)
        if line.count("(") > MAX_NESTING:
            _check_nesting(line, file, lineno)


_LONG_WORD = re.compile(rf"[^\W\d][\w-]{{{MAX_NAME},}}")


def _check_name_lengths(text: str, file: str) -> None:
    """Refuse a name longer than `MAX_NAME` (outside comments), at its place."""
    for m in _LONG_WORD.finditer(text):
        start = text.rfind("\n", 0, m.start()) + 1
        if "#" in text[start : m.start()]:
            continue
        lineno = text.count("\n", 0, m.start()) + 1
        raise LbdlError(
            f"a name of {len(m[0]):,} characters; the limit is {MAX_NAME}",
            Span(file, lineno, m.start() - start + 1, lineno, m.start() - start + 1 + MAX_NAME),
            hint="use a shorter name",
        )


def _check_characters(line: str, file: str, lineno: int) -> None:
    for col, ch in enumerate(line, 1):
        if ch == "\x00" or (ord(ch) < 32 and ch not in "\t\r\f"):
            raise LbdlError(
                f"control character U+{ord(ch):04X} in the spec",
                Span.point(file, lineno, col),
                hint="a spec is plain text; is this a binary file?",
            )


def _check_nesting(line: str, file: str, lineno: int) -> None:
    depth = 0
    for col, ch in enumerate(line, 1):
        if ch == "#":
            break
        depth += (ch == "(") - (ch == ")")
        if depth > MAX_NESTING:
            raise LbdlError(
                f"parentheses nested deeper than {MAX_NESTING}",
                Span.point(file, lineno, col),
                hint="write the expression with fewer parentheses",
            )


def _check_indent(stack: list[int], indent: int, file: str, lineno: int) -> None:
    if indent > stack[-1]:
        stack.append(indent)
        if len(stack) > MAX_NESTING:
            raise LbdlError(
                f"groups nested deeper than {MAX_NESTING} levels",
                Span.point(file, lineno, indent + 1),
                hint="define a block and call it instead of nesting frames",
            )
        return
    while indent < stack[-1]:
        stack.pop()
    if indent != stack[-1]:
        raise LbdlError(
            f"this line is indented by {indent} spaces, which matches no enclosing group "
            f"(those are indented by {stack[-1]} or {stack[-2] if len(stack) > 1 else 0})",
            Span.point(file, lineno, indent + 1),
            hint="indent each line of a group by the same number of spaces",
        )


# -- lark's errors, in the user's words -------------------------------------------------------

_TERMINAL_WORDS = {
    "_NL": "the end of the line",
    "$END": "the end of the file",
    "_INDENT": "an indented line",
    "_DEDENT": "the end of the indented group",
    "NAME": "a name",
    "DEFNAME": "a name",
    "SYM": "a name",
    "OP": "a layer name",
    "LEAKY": "a layer name",
    "INT": "a number",
    "FLOAT": "a number",
    "SCALED": "a number",
    "STRING": "a quoted string",
    "TIMES": "`×`",
    "ARROW": "`->`",
    "CMP": "a comparison (`<`, `==`...)",
    "COLON": "`:`",
    "_HEAD_COLON": "`:`",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "COMMA": "`,`",
    "EQUAL": "`=`",
    "PLUS": "`+`",
    "MINUS": "`-`",
    "STAR": "`*`",
    "SLASH": "`/`",
    "_FLOOR_L": "a number",  # ⌊e⌋ and ⌈e⌉ are sizes, where a number may stand
    "_CEIL_L": "a number",
    "_FLOOR_R": "`⌋`",
    "_CEIL_R": "`⌉`",
}

# Known mistakes: (message, hint) → examples that make lark fail in the same parser state.
# Each example is also a test case (tests/compiler/test_errors.py).
MISTAKES: dict[tuple[str, str], list[str]] = {
    (
        "a shape annotation must come after the hyper-parameters",
        "write the box as `name key=value ... SHAPE`, e.g. `conv-2d k=5  32×24×24`",
    ): [
        "model m:\n  input X: 3\n  fc 10 bias=false\n",
        "model m:\n  input X: 3\n  conv-2d 8×4×4 k=3\n",
        "model m(D=4):\n  input X: 3\n  fc D bias=false\n",
    ],
    (
        "a group header must end with `:`",
        "write `residual:`, `shortcut:` or `×N:` and indent the boxes of the group below it",
    ): [
        "model m:\n  input X: 3\n  residual\n    relu\n",
        "model m:\n  input X: 3\n  ×3\n    relu\n",
    ],
    (
        "a block or model header must end with `:`",
        "e.g. `block resblock on C×H×W:` or `model mlp:` followed by indented lines",
    ): [
        "block b on C\n  relu\n",
        "model m\n  relu\n",
        "model m(N=2)\n  relu\n",
    ],
    (
        "a block or model name has letters, digits and `_` only",
        "write the name with `_` instead, e.g. `block my_chunk on C:`, and call it `my_chunk`",
    ): [
        "block my-chunk on C:\n  relu\n",
        "model my-net:\n  input X: 3\n",
        "block my.chunk on C:\n  relu\n",
    ],
    (
        "a block definition needs the shape of its input",
        "write `block NAME on C×H×W:` (or `block NAME(S) on C×H×W:` with parameters)",
    ): [
        "block b:\n  relu\n",
        "block b(S):\n  relu\n",
    ],
    (
        "an input needs a name and a shape",
        "e.g. `input X: 3×224×224`, or `input X: T int<V>` for tokens",
    ): [
        "model m:\n  input: 3\n",
        "model m:\n  input X 3\n",
        "model m:\n  input X:\n",
    ],
    ("an output needs a name", "e.g. `output Ŷ`"): [
        "model m:\n  input X: 3\n  output\n",
    ],
    (
        "only group headers end with `:`",
        "a box is `name key=value ... SHAPE`; remove the `:`",
    ): [
        "model m:\n  input X: 3\n  relu:\n",
        "model m:\n  input X: 3\n  fc 10:\n",
    ],
    ("a shape cannot end with `×`", "write every dimension, e.g. `32×24×24`"): [
        "model m:\n  input X: 3\n  fc 10×\n",
        "model m:\n  input X: 3×\n",
    ],
    (
        "an imported path is a quoted string",
        'e.g. `import "blocks/resnet.lbdl"`',
    ): [
        "import blocks\n",
        "import blocks/resnet.lbdl\n",
    ],
    ("parameters are separated by commas", "e.g. `model gpt(N=12, D=768):`"): [
        "model m(N=2 D=3):\n  relu\n",
        "block b(S=2 T=3) on C:\n  relu\n",
    ],
    (
        "`->` names the tensor: it needs a name after it",
        "e.g. `conv-2d k=3 p=1  64×H×W  -> skip1`",
    ): [
        "model m:\n  input X: 3\n  relu ->\n",
        "model m:\n  input X: 3\n  ->\n",
    ],
    (
        "missing `)`",
        "close the parenthesis on the same line: a box never spans lines",
    ): [
        "model m:\n  input X: 3\n  cross-att(Z\n",
        "model m:\n  input X: 3\n  fc (D\n",
    ],
    (
        "the lines of a spec start at the left margin or inside a group",
        "indent only the body of a `block`, `model`, `residual:`, `shortcut:`, `×N:` or `experts:`",
    ): [
        "  model m:\n    relu\n",
        "model m:\n  input X: 3\n  relu\n      relu\n",
    ],
    (
        "boxes belong inside a `model` or `block` definition",
        "start the spec with `model NAME:` and indent the boxes below it",
    ): [
        "relu\n",
        "conv-2d k=3\n",
        "input X: 3\n",
    ],
    (
        "a value is missing after `=`",
        "give the hyper-parameter a value, e.g. `k=3`",
    ): [
        "model m:\n  input X: 3\n  conv-2d k=\n",
        "model m:\n  input X: 3\n  conv-2d k= s=2\n",
    ],
}


_INDENTED = (
    "the lines of a spec start at the left margin or inside a group (found an indented line)",
    "indent only the body of a `block`, `model`, `residual:`, `shortcut:`, `×N:` or `experts:`",
)


def _words(expected: set[str]) -> str:
    names = sorted({_TERMINAL_WORDS.get(e, f"`{e.lower()}`") for e in expected})
    if len(names) > 6:
        names = names[:6] + ["..."]
    return ", ".join(names)


def _parse_only(text: str) -> Any:
    return _lark().parse(text, start="start")


def _syntax_error(exc: UnexpectedInput, text: str, file: str) -> LbdlError:
    line, col = max(exc.line, 1), max(exc.column, 1)
    width = 1
    found = None
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type in ("_NL", "$END"):
            found = "the end of the line" if tok.type == "_NL" else "the end of the file"
            if tok.type == "_NL" and tok.line is not None:  # just after the code, not a comment
                code = text.split("\n")[tok.line - 1].split("#", 1)[0].rstrip()
                line, col = tok.line, len(code) + 1
        elif tok.type in ("_INDENT", "_DEDENT"):
            found = "an indented line" if tok.type == "_INDENT" else "the end of a group"
            lines = text.split("\n")
            # the indenter's tokens sit at the start of the next statement: point at its text
            line = min(tok.end_line or line, len(lines))
            for i in range(line - 1, len(lines)):
                if lines[i].strip() and not lines[i].lstrip().startswith("#"):
                    line = i + 1
                    col = len(lines[i]) - len(lines[i].lstrip()) + 1
                    break
            else:  # no statement follows: point at the end of the last one
                found, line, col = "the end of the file", tok.line or line, tok.column or col
        else:
            found = f"`{tok.value}`"
            width = len(str(tok.value))
    elif isinstance(exc, UnexpectedCharacters):
        pos = cast(int, exc.pos_in_stream)  # lark declares it None; the lexer sets its position
        ch = text[pos] if pos < len(text) else ""
        found = f"`{ch}`"
    span = Span.point(file, line, col, width)
    label = _known_mistake(exc)
    if label is None and found == "the end of the line":
        label = _dangling(text.split("\n")[line - 1][: col - 1])
    if label:
        message, hint = label
        hint = _in_their_words(label, text, line, col) or hint
        return LbdlError(f"{message} (found {found})" if found else message, span, hint)
    if isinstance(exc, UnexpectedCharacters) and found == '`"`':
        return LbdlError(
            'this string has no closing `"`',
            span,
            hint='a string ends with `"` on the line where it starts',
        )
    if found == "an indented line":
        return LbdlError(_INDENTED[0], span, _INDENTED[1])
    expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None) or set()
    message = f"did not expect {found or 'this'} here"
    return LbdlError(message, span, f"expected {_words(set(expected))}" if expected else None)


def _dangling(before: str) -> tuple[str, str] | None:
    """The MISTAKES label for a line that stops right after an operator, in any parser state.

    The examples cannot list every state a trailing `×` or `=` can leave the parser in (after a
    box's hyper-parameters, after its inputs...), but the mistake is the same in all of them.
    """
    code = before.split("#", 1)[0].rstrip()
    unclosed = code.count("(") > code.count(")")
    if code.endswith(("×", "->", "→")):
        message = "a shape cannot end with `×`" if code.endswith("×") else "`->` names the"
    elif code.endswith("=") and not code.endswith(("<=", ">=", "==")):
        message = "a value is missing after `=`"
    elif unclosed:
        message = "missing `)`"
    else:
        return None
    return next(label for label in MISTAKES if label[0].startswith(message))


def _signature(exc: UnexpectedInput) -> tuple[Hashable, ...]:
    """What the parser saw when it failed: its state and the offending token or character."""
    state = exc.state
    if hasattr(state, "position"):  # lark's ParserState: its top state decides what may follow,
        state = state.position  # whatever lies below it (a box in a block, in a ×N group...)
    if isinstance(exc, UnexpectedToken):
        return ("token", state, exc.token.type, frozenset(exc.accepts or ()))
    return ("char", state, getattr(exc, "char", None))


@functools.cache
def _mistake_signatures() -> dict[tuple[Hashable, ...], tuple[str, str]]:
    """Each known mistake as the parser sees it, computed once from the MISTAKES examples."""
    out: dict[tuple[Hashable, ...], tuple[str, str]] = {}
    for label, examples in MISTAKES.items():
        for example in examples:
            try:
                _parse_only(example)
            except UnexpectedInput as exc:
                out.setdefault(_signature(exc), label)
    return out


def _in_their_words(label: tuple[str, str], text: str, line: int, col: int) -> str | None:
    """The hint of a known mistake as the user's own line, corrected, where we can write it.

    So far one: a shape before the hyper-parameters (``fc 8 bias=false``, the book's habit of
    a size right after the box). For a size a layer takes from a one-axis annotation (`fc`'s
    ``out``) the fix names it: ``fc out=8 bias=false``; otherwise the shape moves last.
    """
    code = text.split("\n")[line - 1].split("#", 1)[0]
    if label[0].startswith("a block or model name has"):
        m = re.match(r"\s*(block|model)\s+([^\s(:]+)", code)
        if m is None:
            return None
        fixed = re.sub(r"\W+", "_", m[2]).strip("_") or "my_block"
        if m[1] == "model":
            return f"write `model {fixed}`"
        return f"write `block {fixed}`, and call it `{fixed}`"
    if not label[0].startswith("a shape annotation must come after"):
        return None
    head, tail = code[: col - 1].strip(), code[col - 1 :].strip()
    try:
        module = parse(f"model m:\n  input X: 1\n  {head}\n", "<hint>")
    except LbdlError:
        return None
    box = module.models[0].body[-1] if module.models and module.models[0].body else None
    if not isinstance(box, ast.Box) or box.shape is None or "\n" in tail:
        return None
    before = head[: box.shape.span.column - 3].rstrip()  # the box without its shape
    shape = head[box.shape.span.column - 3 :].strip()
    arrow = min((i for i in (tail.find("->"), tail.find("→")) if i >= 0), default=len(tail))
    hparams, named = tail[:arrow].strip(), tail[arrow:].strip()
    last = " ".join(p for p in (f"{before} {hparams}  {shape}", named) if p)
    from lbdl_dsl.core.layers import lookup

    layer = lookup(box.op)
    sized = [k for k, axis in (layer.from_annotation if layer else ()) if axis == -1]
    if sized and len(box.shape.dims) == 1:
        return f"write `{before} {sized[0]}={shape} {tail}`, or the shape last: `{last}`"
    return f"the shape comes last: `{last}`"


def _known_mistake(exc: UnexpectedInput) -> tuple[str, str] | None:
    """The MISTAKES label whose example failed in the same state on the same kind of input.

    Stricter than lark's ``match_examples``, which compares parser states only: a stray `$`
    after a box fails in the state where `relu:` fails, but is not a misplaced `:`.
    """
    return _mistake_signatures().get(_signature(exc))


# -- the tree, as frozen dataclasses ----------------------------------------------------------


def _tok_span(file: str, tok: Token) -> Span:
    line, column, end_line, end_column = tok.line, tok.column, tok.end_line, tok.end_column
    # lark types positions optional, for tokens made by hand; the lexer places every token
    assert line is not None and column is not None and end_line is not None
    assert end_column is not None
    return _span(file, line, column, end_line, end_column)


_new_object = object.__new__
_set = object.__setattr__  # what a frozen dataclass's own ``__init__`` calls for each field


def _span(file: str, line: int, column: int, end_line: int, end_column: int) -> Span:
    """``Span(file, line, column, end_line, end_column)``, made without a call of its
    ``__init__`` (the parse makes three or four spans a line).

    The fields are set as the frozen dataclass's ``__init__`` sets them, through
    ``object.__setattr__``, so that the instance keeps its values in place as Python lays out
    an object made by its class (filling its ``__dict__`` instead would cost a dictionary per
    node: 130 bytes a span, 70 MB at 190,000 boxes). The same object, equal, hashed and printed
    the same (`tests/compiler/test_lalr.py` holds it to `Span` itself)."""
    span: Span = _new_object(Span)
    _set(span, "file", file)
    _set(span, "line", line)
    _set(span, "column", column)
    _set(span, "end_line", end_line)
    _set(span, "end_column", end_column)
    return span


_MAX_DIGITS = 40  # 2^62 has 19 digits; Python itself refuses to read 4,300
_MAX_TERMS = 64  # terms in one size expression: ((A+B+C+D)^8)^8 would expand for minutes
_MAX_DEGREE = 16  # total power of a term: a size is C×H×W, not C^512


def _number(tok: Token, file: str) -> int:
    """A whole number as written (``50_257``), refused when absurdly long."""
    text = str(tok).replace("_", "")
    if len(text.lstrip("0")) > _MAX_DIGITS:
        raise _out_of_range(f"a number of {len(text):,} digits", _tok_span(file, tok))
    return int(text)


_NUMBERS_HINT = f"sizes and counts stay below 2^62; numbers have at most {_MAX_DIGITS} digits"
_SHAPES_HINT = "a size is a product of a few symbols and numbers, e.g. `C/4×H×W` or `4D`"


def _out_of_range(what: str, span: Span, hint: str = _NUMBERS_HINT) -> LbdlError:
    return LbdlError(f"{what} is out of range", span, hint=hint)


def _in_range(expr: Expr, span: Span) -> Expr:
    """``expr``, if its numbers, terms and powers are small enough to compute with at once."""
    big = 10**_MAX_DIGITS
    if len(expr.terms) > _MAX_TERMS:
        raise _out_of_range(f"an expression of {len(expr.terms):,} terms", span, _SHAPES_HINT)
    for mono, coef in expr.terms:
        if abs(coef.numerator) >= big or coef.denominator >= big:
            raise _out_of_range("a number of more than 40 digits", span)
        if sum(abs(p) for _, p in mono) > _MAX_DEGREE:
            raise _out_of_range(f"a power above {_MAX_DEGREE}", span, _SHAPES_HINT)
    return expr


class _Spanned:
    """An expression in the middle of being built: its value, where it came from, and the text
    it takes in its parent (``outer``: with the parentheses around it, if any)."""

    __slots__ = ("bare", "expr", "outer", "span")

    def __init__(self, expr: Expr, span: Span, bare: str | None = None) -> None:
        self.expr, self.span, self.bare, self.outer = expr, span, bare, span


Children = list[Any]
"""What lark hands a rule: its children as transformed so far (tokens, `_Spanned` sizes, AST
nodes, None for an absent optional part), in grammar order; their types depend on the rule."""
Stmts = tuple[ast.Stmt, ...]
Refs = tuple[ast.Ref, ...]
Params = tuple[ast.Param, ...]
Patterns = tuple[ast.TensorPattern, ...]
Shortcut = tuple[Stmts, Span]
DType = tuple[str, ast.SizeExpr | None]  # `int<V>`: the type's name and its range
# (``tuple`` itself names the rule method `_ToAst.tuple` inside the class: aliases above)


class _DType(DType):
    """A `DType` with where it was written, the end of a block's input pattern."""

    span: Span


def _rounded(e: Expr, up: bool) -> Expr:
    """``⌊e⌋`` or ``⌈e⌉`` in the size algebra, whose one rounding is `Expr.floordiv` by a whole
    number: ``e`` is scaled by the common denominator q of its coefficients first, and
    ``⌈e⌉ = −⌊−e⌋``."""
    q = math.lcm(*(c.denominator for _, c in e.terms)) if e.terms else 1
    if up:
        return -((-e * q).floordiv(q))
    return (e * q).floordiv(q)


class _ToAst:
    """Lark's reductions as frozen dataclasses, made during the parse (no tree is built):
    LALR reduces bottom-up, so `1+1+...+1`, as deep as it is long, needs no recursion. Each
    method takes the span of its rule's text (``meta``: None for the rules of `UNPLACED`)
    and its children; `_inline_callbacks` hands them over."""

    UNPLACED = frozenset(
        ("int", "float", "name", "args", "repeat", "arrow", "body", "param_list")
        + ("tensor_pats", "start")
    )
    """The rules whose node needs no span of its own (a token's, or none), spared finding it."""

    TOKENS = frozenset(("op",))
    """The rules whose value is their one token as it is (`op`: OP, LEAKY or PLUS), which the
    parse leaves in place as it leaves the one child of ``?expr: sum``."""

    STATEMENTS = frozenset(
        ("hparam", "box", "repeat_group", "shortcut", "residual_group", "experts_group")
        + ("scan_group",)
        + ("input_decl", "output_decl", "from_stmt", "name_stmt", "assert_count", "assert_shape")
        + ("param", "tensor_pat", "block_def", "model_def", "import_stmt")
    )
    """The rules of a statement, whose span is its first line's code: the statement's tokens
    run to the newline (and the comment, and the lines of a group) that lark counts in it."""

    def __init__(self, text: str, file: str) -> None:
        self.text, self.file = text, file
        self._lines = text.split("\n")

    # expressions
    def _slice(self, span: Span) -> str:
        lines = self._lines
        if span.line == span.end_line:
            return lines[span.line - 1][span.column - 1 : span.end_column - 1]
        return lines[span.line - 1][span.column - 1 :]

    def _binary(self, meta: Span, a: _Spanned, b: _Spanned, fn: Any) -> _Spanned:
        span = meta
        try:
            return _Spanned(_in_range(fn(a.expr, b.expr), span), span)
        except ZeroDivisionError:
            raise LbdlError("division by zero", span, hint="a size is never divided by 0") from None
        except ValueError as exc:
            raise LbdlError(
                f"cannot divide by the sum `{b.expr}`", span, hint="divide by a number or a name"
            ) from exc

    def int(self, meta: None, c: Children) -> _Spanned:
        return _Spanned(Expr.lift(_number(c[0], self.file)), _tok_span(self.file, c[0]))

    def float(self, meta: None, c: Children) -> _Spanned:
        span = _tok_span(self.file, c[0])
        mantissa, _, exponent = c[0].value.lower().partition("e")
        if len(mantissa.strip("0.")) > _MAX_DIGITS or len(exponent.lstrip("+-0")) > 2:
            raise _out_of_range(  # Fraction("1e999999999") would compute for minutes
                f"the number `{c[0].value[:30]}`", span, "exponents stay below 100, e.g. `1e-5`"
            )
        value = Fraction(c[0].value)
        out = _Spanned(Expr.lift(value), span)
        out.bare = "#float:" + c[0].value
        return out

    def name(self, meta: None, c: Children) -> _Spanned:
        return _Spanned(sym(str(c[0])), _tok_span(self.file, c[0]), bare=str(c[0]))

    def scaled(self, meta: Span, c: Children) -> _Spanned:
        return _Spanned(_number(c[0], self.file) * sym(str(c[1])), meta)

    def add(self, meta: Span, c: Children) -> _Spanned:
        return self._binary(meta, c[0], c[2], lambda a, b: a + b)

    def sub(self, meta: Span, c: Children) -> _Spanned:
        return self._binary(meta, c[0], c[2], lambda a, b: a - b)

    def mul(self, meta: Span, c: Children) -> _Spanned:
        return self._binary(meta, c[0], c[2], lambda a, b: a * b)

    def div(self, meta: Span, c: Children) -> _Spanned:
        return self._binary(meta, c[0], c[2], lambda a, b: a / b)

    def neg(self, meta: Span, c: Children) -> _Spanned:
        return _Spanned(-c[1].expr, meta)

    def floor(self, meta: Span, c: Children) -> _Spanned:
        """``⌊e⌋``: a size rounded down, as a rule in a paper writes it (``⌊8D/3⌋``)."""
        return _Spanned(_rounded(c[0].expr, up=False), meta)

    def ceil(self, meta: Span, c: Children) -> _Spanned:
        """``⌈e⌉``: a size rounded up (LLaMA's hidden size, ``256⌈⌊8D/3⌋/256⌉``)."""
        return _Spanned(_rounded(c[0].expr, up=True), meta)

    def pow(self, meta: Span, c: Children) -> _Spanned:
        n = _number(c[2], self.file)
        span = meta
        if n > 8:
            raise LbdlError(f"exponent {n} is too large", span, hint="sizes use small powers")
        if math.comb(n + len(c[0].expr.terms) - 1, n) > _MAX_TERMS:  # terms of the expansion
            raise _out_of_range(f"the expansion of `{self._slice(span)}`", span, _SHAPES_HINT)
        return _Spanned(_in_range(c[0].expr ** n, span), span)

    def _size(self, s: _Spanned) -> ast.SizeExpr:
        text = self._slice(s.span)
        bare = s.bare if s.bare and not s.bare.startswith("#float:") else None
        return ast.SizeExpr(s.expr, text, s.span, bare)

    def _value(self, v: Any) -> ast.Value:
        if isinstance(v, _Spanned):
            if v.bare and v.bare.startswith("#float:"):
                return ast.Literal(float(v.bare[7:]), v.bare[7:], v.span)
            if v.expr.is_const and v.expr.const_value.denominator != 1 and v.bare is None:
                value = float(v.expr.const_value)
                return ast.Literal(value, self._slice(v.span), v.span)
            return self._size(v)
        if isinstance(v, (ast.Literal, ast.TupleValue)):  # `string` and `tuple` made them
            return v
        raise AssertionError(f"not a hyper-parameter value: {v!r}")

    def string(self, meta: Span, c: Children) -> ast.Literal:
        return ast.Literal(str(c[0])[1:-1], str(c[0]), meta)

    def tuple(self, meta: Span, c: Children) -> ast.TupleValue:
        span = meta
        return ast.TupleValue(tuple(self._size(x) for x in c), self._slice(span), span)

    def shape(self, meta: Span, c: Children) -> ast.ShapeAST:
        dims = tuple([self._size(x) for x in c if type(x) is _Spanned])
        return ast.ShapeAST(dims, meta)

    # statements
    def hparam(self, meta: Span, c: Children) -> ast.HParam:
        return ast.HParam(str(c[0]), self._value(c[1]), meta)

    def args(self, meta: None, c: Children) -> Refs:
        return tuple(ast.Ref(str(t), _tok_span(self.file, t)) for t in c)

    def repeat(self, meta: None, c: Children) -> ast.SizeExpr:
        return self._size(c[1])

    def arrow(self, meta: None, c: Children) -> ast.Ref:
        return ast.Ref(str(c[1]), _tok_span(self.file, c[1]))

    def box(self, meta: Span, c: Children) -> ast.Box:
        op_tok, args, *rest, shape_ast, name = c
        count: ast.SizeExpr | None = None
        hparams: tuple[ast.HParam, ...] = ()
        if rest:  # `×N` and the hyper-parameters, in any order (most boxes have neither)
            counts = [x for x in rest if isinstance(x, ast.SizeExpr)]
            hparams = tuple(x for x in rest if isinstance(x, ast.HParam))
            if len(counts) > 1:
                raise LbdlError(
                    "a box is repeated once: `×N` appears twice",
                    counts[1].span,
                    hint="write the product, e.g. `×6` rather than `×2 ×3`",
                )
            count = counts[0] if counts else None
            seen: dict[str, ast.HParam] = {}
            for hp in hparams:
                if hp.key in seen:
                    raise LbdlError(
                        f"hyper-parameter `{hp.key}` is given twice",
                        hp.span,
                        hint="keep one of the two values",
                    )
                seen[hp.key] = hp
        op_span = _span(self.file, op_tok.line, op_tok.column, op_tok.end_line, op_tok.end_column)
        op = " ".join(op_tok.split())
        return ast.Box(op, op_span, args or (), count, hparams, shape_ast, name, meta)

    def body(self, meta: None, c: Children) -> Stmts:
        return tuple(c)

    def repeat_group(self, meta: Span, c: Children) -> ast.RepeatGroup:
        index = str(c[2]) if c[2] is not None else None
        return ast.RepeatGroup(self._size(c[1]), c[3], meta, index)

    def shortcut(self, meta: Span, c: Children) -> Shortcut:
        return (c[0], meta)

    def residual_group(self, meta: Span, c: Children) -> ast.ResidualGroup:
        short = c[1]
        return ast.ResidualGroup(
            c[0], short[0] if short else None, meta, short[1] if short else None
        )

    def experts_group(self, meta: Span, c: Children) -> ast.ExpertsGroup:
        *hparams, body = c
        return ast.ExpertsGroup(tuple(hparams), body, meta)

    def scan_group(self, meta: Span, c: Children) -> ast.ScanGroup:
        init = self._ref(c[3]) if c[3] is not None else None
        return ast.ScanGroup(self._ref(c[1]), c[2], init, c[4], meta)

    def _ref(self, tok: Token) -> ast.Ref:
        return ast.Ref(str(tok), _tok_span(self.file, tok))

    def dtype(self, meta: Span, c: Children) -> DType:
        out = _DType((str(c[0]), self._size(c[1]) if c[1] is not None else None))
        out.span = meta
        return out

    @staticmethod
    def _known_type(dtype: str, span: Span) -> None:
        if dtype not in ("float", "int", "bool"):
            raise LbdlError(
                f"unknown input type `{dtype}`",
                span,
                hint="inputs are `float` (the default), `int<N>` (tokens in [0, N)) or `bool`",
            )

    def input_decl(self, meta: Span, c: Children) -> ast.InputDecl:
        dtype, vocab = c[2] if c[2] else ("float", None)
        span = meta
        self._known_type(dtype, span)
        if dtype == "int" and vocab is None:
            raise LbdlError(
                "a token input needs its range", span, hint="write `int<V>` for tokens in [0, V)"
            )
        return ast.InputDecl(self._ref(c[0]), c[1], dtype, vocab, span)

    def output_decl(self, meta: Span, c: Children) -> ast.OutputDecl:
        return ast.OutputDecl(self._ref(c[0]), meta)

    def from_stmt(self, meta: Span, c: Children) -> ast.FromStmt:
        return ast.FromStmt(self._ref(c[0]), meta)

    def name_stmt(self, meta: Span, c: Children) -> ast.NameStmt:
        return ast.NameStmt(self._ref(c[1]), meta)

    def assert_count(self, meta: Span, c: Children) -> ast.AssertCount:
        return ast.AssertCount(self._ref(c[0]), str(c[1]), self._value(c[2]), meta)

    def assert_shape(self, meta: Span, c: Children) -> ast.AssertShape:
        return ast.AssertShape(self._ref(c[0]), c[1], meta)

    # definitions
    def param(self, meta: Span, c: Children) -> ast.Param:
        default = self._value(c[1]) if c[1] is not None else None
        return ast.Param(str(c[0]), default, meta)

    def param_list(self, meta: None, c: Children) -> Params:
        params = tuple(p for p in c if p is not None)
        seen: set[str] = set()
        for p in params:
            if p.name in seen:
                raise LbdlError(f"parameter `{p.name}` is declared twice", p.span)
            seen.add(p.name)
        return params

    def tensor_pat(self, meta: Span, c: Children) -> ast.TensorPattern:
        dtype, vocab = c[2] if c[2] else (None, None)
        span = meta
        if dtype is not None:
            self._known_type(dtype, span)
        return ast.TensorPattern(str(c[0]) if c[0] else None, c[1], span, dtype, vocab)

    def tensor_pats(self, meta: None, c: Children) -> Patterns:
        return tuple(c)

    def block_def(self, meta: Span, c: Children) -> ast.BlockDef:
        return ast.BlockDef(str(c[0]), c[1] or (), c[2], c[3], meta, _tok_span(self.file, c[0]))

    def model_def(self, meta: Span, c: Children) -> ast.ModelDef:
        return ast.ModelDef(str(c[0]), c[1] or (), c[2], meta, _tok_span(self.file, c[0]))

    def import_stmt(self, meta: Span, c: Children) -> ast.Import:
        return ast.Import(str(c[0])[1:-1], meta)

    def start(self, meta: None, c: Children) -> ast.Module:
        items = [x for x in c if x is not None]
        return ast.Module(
            self.file,
            tuple(x for x in items if isinstance(x, ast.Import)),
            tuple(x for x in items if isinstance(x, ast.BlockDef)),
            tuple(x for x in items if isinstance(x, ast.ModelDef)),
        )


@fewer_collections()  # a node or a token a few allocations, and none of them a cycle
def parse(data: str | bytes, file: str = "<spec>") -> ast.Module:
    """Parse one spec file; raises `LbdlError` for anything that is not a well-formed spec."""
    text = _decode(data, file)
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    _precheck(text, file)
    if not text.endswith("\n"):
        text += "\n"
    # comment-only lines left empty: the same lines and columns, and the newline token never
    # repeats a group per comment line (2 MB of comments took 1.2 GB in the regex engine)
    text = _COMMENT_LINE.sub("", text)
    module = _parse_fast(text, file)
    if module is not None:
        return module
    try:
        return _parse_inline(text, _ToAst(text, file))
    except UnexpectedInput as exc:
        raise _lark_error(exc, text, file) from None
    except LbdlError:
        # a syntax error anywhere comes first, as when the tree was built whole before any node
        # was checked
        try:
            _parse_only(text)
        except UnexpectedInput as exc:
            raise _lark_error(exc, text, file) from None
        raise


def _lark_error(exc: UnexpectedInput, text: str, file: str) -> LbdlError:
    if isinstance(exc, UnexpectedEOF):
        lines = text.rstrip("\n").split("\n")
        return LbdlError(
            "the spec ends in the middle of a statement",
            Span.point(file, len(lines), len(lines[-1]) + 1),
            hint=f"expected {_words(set(exc.expected))}" if exc.expected else None,
        )
    return _syntax_error(exc, text, file)


def _parse_inline(text: str, to_ast: _ToAst) -> ast.Module:
    """The spec's module, each node made by `to_ast` as lark reduces its rule."""
    frontend = _lark().parser
    run = _Parser(frontend.parser._parse_table, _inline_callbacks(to_ast))
    lexer = cast(LexerThread, frontend._make_lexer_thread(text))
    module: ast.Module = run.parse(lexer, "start")
    return module


def _driver() -> Driver:
    """The fast path's loop over the parser `_lark` gives now (a new one once its cache is
    cleared, as a test of a fresh parser does)."""
    return _driver_of(_lark())


@functools.lru_cache(maxsize=1)
def _driver_of(parser: Lark) -> Driver:
    return Driver(parser)


def _parse_fast(text: str, file: str) -> ast.Module | None:
    """The spec's module through `lalr.Driver`, or None for lark's own parse to make it or to
    report the error: the fast path takes no decision of its own about a text it cannot parse,
    whether lark would reject the text or a node's check would (a division by zero)."""
    driver = _driver()
    by_rule = _inline_callbacks(_ToAst(text, file))
    callbacks = [None if by_rule[rule] is _only else by_rule[rule] for rule in driver.rules]
    try:
        module = driver.parse(text, callbacks)
    except Exception:  # noqa: BLE001 - lark's parse raises the same, in the user's words
        return None
    return cast(ast.Module | None, module)


def _only(children: Children) -> Any:
    """The callback of `?a: b`: b itself, in the same place."""
    return children[0]


def _inline_callbacks(to_ast: _ToAst) -> dict[Any, Any]:
    """One callback per grammar rule, calling the `to_ast` method of the rule's name with the
    rule's span and its children as lark would keep them in a tree (anonymous tokens dropped,
    None for an absent optional part, a `?rule` of one child replaced by it)."""
    callbacks: dict[Any, Any] = {}
    file = to_ast.file
    for rule, name, kind, chain in _rule_plan():
        if kind == "only":
            callbacks[rule] = _only
        elif kind == "unplaced":
            callbacks[rule] = _with_chain(functools.partial(getattr(to_ast, name), None), chain)
        elif kind == "unseen":  # a list whose place no rule reads: no span to find
            if _filter_plan(chain) == ([(0, True, 0), (1, False, 0)], 0):
                callbacks[rule] = _grow  # `_list: _list item`
            else:
                keep = _child_filter(chain) or _with_chain(_same, chain)
                callbacks[rule] = functools.partial(_unseen, name, keep)
        elif kind == "spliced":
            callbacks[rule] = _placed(functools.partial(_spliced, name), chain, file)
        elif kind == "statement":
            callbacks[rule] = _statement(getattr(to_ast, name), chain, file, to_ast._lines)
        else:  # `?atom: "(" expr ")"` is always its one child: no method
            method = getattr(to_ast, name, None) or functools.partial(_unreachable, name)
            callbacks[rule] = _placed(method, chain, file)
    return callbacks


@functools.cache
def _rule_plan() -> list[tuple[Any, str, str, list[Any]]]:
    """Each rule of the grammar (the parse table's own object, found by identity, not by a
    slower comparison), its method's name, how its callback is made, and lark's wrappers."""
    parser = _lark()
    table = parser.parser.parser._parse_table
    own = {arg: arg for actions in table.states.values() for _, arg in actions.values()}
    plan = []
    for rule, chain in parser._parse_tree_builder.rule_builders:
        name = rule.alias or rule.origin.name
        if len(rule.expansion) == 1 and (
            (not rule.alias and rule.options.expand1) or (name in _ToAst.TOKENS and not chain)
        ):
            kind = "only"
        elif name in _ToAst.UNPLACED:
            kind = "unplaced"
        elif name.startswith("_"):  # lark's rules for `x*` and `x+`, spliced into their parent
            kind = "spliced"
        elif name in _ToAst.STATEMENTS:
            kind = "statement"
        else:
            kind = "placed"
        plan.append((own.get(rule, rule), name, kind, chain))
    seen = _seen_lists(plan)
    return [
        (rule, name, "unseen" if kind == "spliced" and name not in seen else kind, chain)
        for rule, name, kind, chain in plan
    ]


def _seen_lists(plan: list[tuple[Any, str, str, list[Any]]]) -> set[str]:
    """The spliced rules (``__body_plus_3`` of ``stmt+``) whose span a parent may read.

    A parent's span runs from its first placed child to its last, so a list's own span is read
    only where it may be one of those: not in a rule that needs no span, and not between two
    tokens (every token is placed). A list inside another list is read if that one is; the
    body of a block, one list item a statement, is never read, and is spared a span per line.
    """
    seen: set[str] = set()
    inside: dict[str, set[str]] = {}  # a list → the lists it appears in
    for rule, _, kind, _ in plan:
        symbols = rule.expansion
        for k, symbol in enumerate(symbols):
            if symbol.is_term or not symbol.name.startswith("_") or kind == "unplaced":
                continue
            if kind == "spliced":
                inside.setdefault(symbol.name, set()).add(rule.origin.name)
            elif not (
                any(s.is_term for s in symbols[:k]) and any(s.is_term for s in symbols[k + 1 :])
            ):
                seen.add(symbol.name)
    changed = True
    while changed:
        grown = {name for name, parents in inside.items() if parents & seen}
        changed = not grown <= seen
        seen |= grown
    return seen


def _unseen(name: str, keep: Any, children: Children) -> Tree[Any]:
    return Tree(name, keep(children))  # no meta: `_place` refuses to read its span


def _grow(children: Children) -> Tree[Any]:
    """A list's next item (``_list: _list item``, a statement of a body), appended to the list
    made so far: lark's filter would append it to that same list of children and make a new
    tree around it, which only the parent's filter reads, and the old tree is then unused."""
    tree: Tree[Any] = children[0]
    tree.children.append(children[1])
    return tree


def _spliced(name: str, meta: Span | None, children: Children) -> Tree[Any]:
    return Tree(name, children, cast(Any, meta))  # lark's filter reads its children


def _unreachable(name: str, meta: Span | None, children: Children) -> None:
    raise AssertionError(f"no node is made for the rule `{name}`")


def _with_chain(method: Any, chain: list[Any]) -> Any:
    for wrapper in chain:  # lark's own: filters the children, inserts None, expands `?rule`s
        method = wrapper(method)
    return method


def _statement(method: Any, chain: list[Any], file: str, lines: list[str]) -> Any:
    """``method``'s callback for a statement: its span (see `_span_of`) and its children."""
    keep = _child_filter(chain)
    if keep is None:
        return _placed(method, chain, file, lines)

    def callback(children: Children) -> Any:
        first, last = children[0], children[-1]
        line: Any  # a token's, which the lexer placed: never None
        column: Any
        if type(first) is Token and type(last) is Token:  # `op ... _NL`, `input ... _NL`...
            line, column = first.line, first.column
            if last.end_line != line:  # the newline ends on the next line: `_span_of`'s cut
                code = lines[line - 1].split("#", 1)[0].rstrip()
                return method(
                    _span(file, line, column, line, max(len(code) + 1, column + 1)), keep(children)
                )
        return method(_span_of(children, file, lines), keep(children))

    return callback


def _placed(method: Any, chain: list[Any], file: str, lines: list[str] | None = None) -> Any:
    """``method``'s callback, given the span from the rule's first token or node to its last,
    as lark's ``propagate_positions`` counted it (through the parentheses around a child); with
    the text's ``lines``, the span of a statement (see `_span_of`)."""
    keep = _child_filter(chain)
    if keep is None:  # lark's own wrappers (`?atom: "(" expr ")"`), the span handed beside
        here: list[Span | None] = [None]
        inner = _with_chain(lambda children: method(here[0], children), chain)

        def call(span: Span | None, children: Children) -> Any:
            here[0] = span
            return inner(children)

        keep, run = _same, call
    else:
        run = method  # (not `method` reassigned: the lambda above reads it, a cycle)

    def callback(children: Children) -> Any:
        span = _span_of(children, file, lines)
        out = run(span, keep(children))
        if type(out) is _Spanned and span is not None:  # `( e )` is e, in its parentheses
            out.outer = span
        return out

    return callback


def _span_of(children: Children, file: str, lines: list[str] | None = None) -> Span | None:
    """The span from the first placed child to the last (tokens, the commonest, first); with
    the text's ``lines``, a statement's: one that runs past its first line (to the newline
    and the comment that lark counts in it, or the lines of a group) is cut at the end of that
    line's code."""
    first: Any  # a token, a span or another placed thing: a line and a column at each end
    last: Any
    for child in children:
        first = child if type(child) is Token else _place(child)
        if first is not None:
            break
    else:
        return None
    for child in reversed(children):
        last = child if type(child) is Token else _place(child)
        if last is first and type(first) is Span and lines is None:
            return first  # one placed child (a shape of one size): its span, made already
        if last is not None:
            line, column, end_line = first.line, first.column, last.end_line
            if lines is None or end_line == line:
                return _span(file, line, column, end_line, last.end_column)
            code = lines[line - 1].split("#", 1)[0].rstrip()
            return _span(file, line, column, line, max(len(code) + 1, column + 1))
    raise AssertionError("unreachable: the first placed child is placed")


def _same(children: Children) -> Children:
    return children


def _filter_plan(chain: list[Any]) -> tuple[list[tuple[int, bool, int]], int] | None:
    """What lark's one child filter in ``chain`` keeps: for each child kept, its index,
    whether its children are spliced in its place, and how many None go before it; then how
    many None end the list. None for another chain (none, or more than the filter).

    The generated module's internals (lark's ``parse_tree_builder``, as `_lbdl_parser.py`
    carries it): the filters' classes and the arguments ``maybe_create_child_filter`` binds to
    them; the trees of `tests/compiler/test_lalr.py`, main's to the byte, fail if a
    regenerated module changes either."""
    wrapper = chain[0] if len(chain) == 1 else None
    if not isinstance(wrapper, functools.partial):
        return None
    if wrapper.func is ChildFilterLALR_NoPlaceholders:
        return [(i, expand, 0) for i, expand in wrapper.args[0]], 0
    if wrapper.func is ChildFilterLALR:
        plan, append = wrapper.args
        return list(plan), append
    return None


def _child_filter(chain: list[Any]) -> Any:
    """Lark's filter of a rule's children (``ChildFilterLALR``: anonymous tokens dropped, None
    for each absent ``[part]``, the children of a ``_rule`` spliced in) as one plain function,
    or None for a chain of wrappers other than that one filter. The same list lark's filter
    makes, without its two calls a reduction (the filter's and our node maker's)."""
    if not chain:
        return _same
    filter_plan = _filter_plan(chain)
    if filter_plan is None:
        return None
    plan, append = filter_plan
    if not any(expand or nones for _, expand, nones in plan):  # some children, then None
        picked = [i for i, _, _ in plan]
        tail = [None] * append
        if len(picked) == 1:
            (one,) = picked
            return lambda children: [children[one], *tail]
        get = operator.itemgetter(*picked) if picked else lambda children: ()
        return lambda children: [*get(children), *tail]

    def keep(children: Children) -> Children:
        out: Children = []
        for i, expand, nones in plan:  # lark's ChildFilterLALR.__call__, step for step
            if nones:
                out += [None] * nones
            if expand:
                if out:
                    out += children[i].children
                else:  # lark reuses the list of a left-recursive `_rule`; so does this
                    out = children[i].children
            else:
                out.append(children[i])
        if append:
            out += [None] * append
        return out

    return keep


def _place(child: Any) -> Any:
    """Where a reduced child lies, as lark's ``propagate_positions`` saw it, or None."""
    if type(child) is Token:
        return child
    if type(child) is _Spanned:
        return child.outer
    if isinstance(child, Tree):
        if child._meta is None:
            raise AssertionError(f"the span of `{child.data}` was read, and never made")
        return child._meta  # `_spliced` put the span there
    if isinstance(child, Token):
        return child
    return getattr(child, "span", None)

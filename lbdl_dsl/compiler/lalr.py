"""The parse stage's fast path: lark's own tables, driven by one tight loop.

`parser.py` used to hand the text to lark's LALR parser, which asks its contextual lexer for
one token at a time through two generators (the lexer's and the indenter's), makes each token
through two Python-level constructors, and looks its parse table up through a method call per
token. On a spec of 190,000 boxes that machinery took more time than making the syntax tree.
`Driver.parse` does the same work in one loop, with the same data:

- the **terminals** are lark's compiled patterns, state by state (the contextual lexer's
  scanner of each parser state, and its type callbacks that turn a name into a keyword), so the
  grammar stays the one source of the language;
- the **indentation** tokens are made as lark's `Indenter` makes them, from the newline token;
- the **parse table** is lark's LALR table, and each reduction calls the same per-rule
  callback, in the same order, with the same children (tokens equal to lark's, positions
  included), so the syntax tree is the one lark's loop would have built.

It only parses well-formed text: where lark would raise (no terminal matches, no action for a
token, an indentation that matches no enclosing line), `parse` returns None and the caller
parses again through lark, which then reports the error in its own words.

Lark internals read here (lark >=1.3.1,<1.4; `tests/compiler/test_lalr.py` fails if one of
them changes shape): ``ParsingFrontend.lexer`` (a ``PostLexConnector`` whose ``lexer`` is the
``ContextualLexer`` and ``postlexer`` our `Indenter`), ``ContextualLexer.lexers`` (a
``BasicLexer`` per parser state), ``BasicLexer.scanner._mres`` / ``.callback`` /
``.ignore_types`` / ``.newline_types``, ``UnlessCallback.scanner._mres``, and the parse
table's ``states``, ``start_states`` and ``end_states`` with lark's ``Shift`` action.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from lark import Lark, Token
from lark.indenter import Indenter
from lark.lexer import BasicLexer, ContextualLexer, UnlessCallback
from lark.parsers.lalr_analysis import Shift

_new_token = str.__new__  # `Token(...)` runs two Python-level constructors; the fields below

_IGNORE, _NEWLINE, _KEYWORD, _INDENTS = 1, 2, 4, 8  # what a terminal needs beyond a token


class _Scanner:
    """One parser state's lexer: lark's compiled alternation of the terminals it accepts, and
    what each terminal needs beyond a token (`_IGNORE`...; most need nothing)."""

    __slots__ = ("keywords", "kinds", "match")

    def __init__(self, lexer: BasicLexer, nl_type: str) -> None:
        scanner = lexer.scanner  # built on first use, as lark's own lexing would
        patterns = list(scanner._mres)  # more than one only past Python's 100 groups
        self.match: Callable[[str, int], re.Match[str] | None] = (
            patterns[0].match if len(patterns) == 1 else _first_match(patterns)
        )
        self.kinds: dict[str, int] = {}
        for type_ in lexer.ignore_types:
            self.kinds[type_] = self.kinds.get(type_, 0) | _IGNORE
        for type_ in lexer.newline_types:  # lark counts lines in these only
            self.kinds[type_] = self.kinds.get(type_, 0) | _NEWLINE
        self.kinds[nl_type] = self.kinds.get(nl_type, 0) | _INDENTS
        self.keywords: dict[str, list[Callable[[str], re.Match[str] | None]]] = {}
        for type_, callback in lexer.callback.items():
            # `_create_unless`'s callback: a name that is also a keyword (`input`) is the keyword
            if not isinstance(callback, UnlessCallback) or type_ in lexer.ignore_types:
                raise TypeError(f"lark's lexer has an unknown callback for {type_}")
            self.keywords[type_] = [p.fullmatch for p in callback.scanner._mres]
            self.kinds[type_] = self.kinds.get(type_, 0) | _KEYWORD


def _first_match(patterns: list[re.Pattern[str]]) -> Callable[[str, int], re.Match[str] | None]:
    """Lark's ``Scanner.match`` over several alternations: the first that matches."""

    def match(text: str, pos: int) -> re.Match[str] | None:
        for pattern in patterns:
            m = pattern.match(text, pos)
            if m is not None:
                return m
        return None

    return match


class _Scanners(dict[int, _Scanner]):
    """Each parser state's `_Scanner`, made when the state is first met: lark compiles a
    state's alternation on its first use, and a spec meets a few of the 245 states (making them
    all would add 50 ms to a small spec's parse)."""

    def __init__(self, contextual: ContextualLexer, nl_type: str) -> None:
        super().__init__()
        self.lexers = contextual.lexers
        self.nl_type = nl_type
        self.shared: dict[int, _Scanner] = {}  # states of the same terminals share a lexer

    def __missing__(self, state: int) -> _Scanner:
        lexer = self.lexers[state]
        if id(lexer) not in self.shared:
            self.shared[id(lexer)] = _Scanner(cast(BasicLexer, lexer), self.nl_type)
        self[state] = self.shared[id(lexer)]
        return self[state]


class Driver:
    """Lark's contextual lexer, indenter and LALR loop for one grammar, as one loop."""

    def __init__(self, parser: Lark, start: str = "start") -> None:
        frontend = parser.parser
        contextual = frontend.lexer.lexer
        indenter = frontend.lexer.postlexer
        if not isinstance(contextual, ContextualLexer) or not isinstance(indenter, Indenter):
            raise TypeError("the fast parse needs lark's contextual lexer and an Indenter")
        if indenter.OPEN_PAREN_types or indenter.CLOSE_PAREN_types:
            raise TypeError("the fast parse does not follow parentheses across lines")
        self.nl_type: str = indenter.NL_type
        self.indent_type: str = indenter.INDENT_type
        self.dedent_type: str = indenter.DEDENT_type
        self.tab_len: int = indenter.tab_len
        table = frontend.parser._parse_table
        self.start_state: int = table.start_states[start]
        self.end_state: int = table.end_states[start]
        self.scanners = _Scanners(contextual, self.nl_type)
        # each state's actions: the state to shift to (an int), or a reduction (a tuple: the
        # rule's number in `rules`, its length and the name it reduces to)
        self.rules: list[Any] = []  # the table's own rule objects, numbered
        number: dict[int, int] = {}
        self.actions: dict[int, dict[str, Any]] = {}  # Any: the loop tells them apart
        for state, row in table.states.items():
            out: dict[str, Any] = {}
            for symbol, (action, arg) in row.items():
                if action is Shift:
                    out[symbol] = arg
                    continue
                if id(arg) not in number:
                    number[id(arg)] = len(self.rules)
                    self.rules.append(arg)
                out[symbol] = (number[id(arg)], len(arg.expansion), arg.origin.name)
            self.actions[state] = out

    def parse(self, text: str, callbacks: list[Callable[[list[Any]], Any] | None]) -> Any:
        """The value of the start rule for ``text``, or None where lark would raise.

        ``callbacks[i]`` makes the value of rule ``self.rules[i]`` from its children, or is
        None for a rule of one symbol whose value is that symbol's (``?expr: sum``). One loop
        lexes, indents and parses: a call per token would cost a tenth of the parse."""
        actions, scanners, end_state = self.actions, self.scanners, self.end_state
        states: list[int] = [self.start_state]
        values: list[Any] = []
        indents = [0]
        pending: list[Token] = []  # the indenter's tokens still to feed, the next one last
        pos, line, line_start, end = 0, 1, 0, len(text)
        tok: Token | None = None  # the lexer's last token, whose place the last tokens take
        at_end = False
        while True:
            if pending:
                fed = pending.pop()
            elif pos == end:  # the end of the text: close the open groups, then lark's $END
                if at_end:
                    return None
                at_end = True
                pending = self._closing(tok, indents)
                continue
            else:  # lark's BasicLexer.next_token, in the lexer of the parser's state
                scanner = scanners[states[-1]]
                m = scanner.match(text, pos)
                if m is None:
                    return None  # lark: UnexpectedCharacters
                type_, start, pos = m.lastgroup, pos, m.end()
                kind = scanner.kinds.get(type_, 0)  # type: ignore[arg-type]
                if kind & _IGNORE:  # spaces, a comment
                    line, line_start = _count_lines(m.group(), kind, start, line, line_start)
                    continue
                value = m.group()
                first_line, column = line, start - line_start + 1
                if kind & _NEWLINE and "\n" in value:  # lark counts lines in these only
                    line += value.count("\n")
                    line_start = start + value.rindex("\n") + 1
                fed = tok = _new_token(Token, value)
                tok.type = type_  # type: ignore[assignment]  # a match has a group
                tok.value = value
                tok.start_pos = start
                tok.line = first_line
                tok.column = column
                tok.end_line = line
                tok.end_column = pos - line_start + 1
                tok.end_pos = pos
                if kind & (_KEYWORD | _INDENTS) and not self._special(
                    scanner, tok, indents, pending
                ):
                    return None  # lark: DedentError
            type_ = fed.type
            while True:  # lark's ParserState.feed_token
                act = actions[states[-1]].get(type_)
                if act is None:
                    return None  # lark: UnexpectedToken
                if type(act) is int:  # never $END's: lark's table accepts it by a reduction
                    states.append(act)
                    values.append(fed)
                    break
                index, size, origin = act  # not an int: a reduction
                callback = callbacks[index]
                if callback is None:  # one child, which is the rule's value: only the state moves
                    goto = states[-1] = actions[states[-2]][origin]
                else:
                    cut = len(values) - size  # the children, none for an empty rule
                    children = values[cut:]
                    del values[cut:]
                    del states[cut + 1 :]  # the start state is below the first value
                    values.append(callback(children))
                    goto = actions[states[-1]][origin]
                    states.append(goto)
                if at_end and goto == end_state:
                    return values[-1]

    def _closing(self, last: Token | None, indents: list[int]) -> list[Token]:
        """What lark's indenter and parser feed after the last token: a `_DEDENT` for each
        open group, then `$END`, all at the last token's place (the next one last)."""
        if last is None:
            return []  # lark parses an empty text; this path need not
        closing = [_borrow(self.dedent_type, "", last) for _ in indents[1:]]
        return [_borrow("$END", "", closing[-1] if closing else last), *closing]

    def _special(
        self, scanner: _Scanner, tok: Token, indents: list[int], pending: list[Token]
    ) -> bool:
        """A keyword's type for a name (lark's ``UnlessCallback``: ``input`` is a keyword), or
        the indenter's tokens after a newline, onto ``pending``, the next one last (lark's
        ``Indenter.handle_NL``); False where lark would raise."""
        keywords = scanner.keywords.get(tok.type)
        if keywords is not None:
            for fullmatch in keywords:
                if keyword := fullmatch(tok):
                    tok.type = keyword.lastgroup  # type: ignore[assignment]  # it has a group
                    break
            return True
        indent_str = tok[tok.rindex("\n") + 1 :]  # lark: tok.rsplit("\n", 1)[1]
        indent = indent_str.count(" ") + indent_str.count("\t") * self.tab_len
        if indent > indents[-1]:
            indents.append(indent)
            pending.append(_borrow(self.indent_type, indent_str, tok))
            return True
        while indent < indents[-1]:
            indents.pop()
            pending.append(_borrow(self.dedent_type, indent_str, tok))
        return indent == indents[-1]


def _count_lines(value: str, kind: int, start: int, line: int, line_start: int) -> tuple[int, int]:
    """Lark's ``LineCounter.feed``: the line after the text ``value`` of a terminal of this
    ``kind`` found at ``start``, and where that line starts."""
    if kind & _NEWLINE and "\n" in value:
        return line + value.count("\n"), start + value.rindex("\n") + 1
    return line, line_start


def _borrow(type_: str, value: str, tok: Token) -> Token:
    """Lark's ``Token.new_borrow_pos``: a token of the indenter, at the place of ``tok``."""
    out = _new_token(Token, value)
    out.type = type_
    out.value = value
    out.start_pos = tok.start_pos
    out.line = tok.line
    out.column = tok.column
    out.end_line = tok.end_line
    out.end_column = tok.end_column
    out.end_pos = tok.end_pos
    return out

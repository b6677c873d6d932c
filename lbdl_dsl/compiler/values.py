"""Written values: the one reading of a value a user gives, wherever it is given.

A value reaches the compiler from four places: a block's or model's default (``act=gelu-tanh``
in a header), a block call's argument (``tlayer act=gelu-tanh``), ``--set N=24`` on the command
line, and a keyword of the Python API (``lbdl_dsl.compile(spec, N=24)``). The first two are
syntax (`written`), the last two are text or Python values (`setting`); both end in the same
forms: a size (`Expr`), a float, a boolean, a word, a tuple of sizes, or a reference to a
parameter. A setting is then held to what its parameter's default says it is, so that
``N=abc``, ``N=1.5``, ``N=nan`` or ``N=0`` are refused with the parameter's name instead of
silently leaving a symbol free.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.graph import HValue, ParamRef
from lbdl_dsl.compiler.hparams import check_symbols, hyphenated
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.symbolic import Expr

_BOOLS = {"true": True, "True": True, "false": False, "False": False}
_WORD = re.compile(r"[A-Za-z_]\w*(?:-[A-Za-z_]\w*)*")


def written(value: ast.Value, known: set[str], params: set[str], what: str) -> HValue:
    """A value written in a spec, as a default or an argument: a size over the names ``known``
    here, a float, a boolean, a word (``bilinear``, ``gelu-tanh``), a tuple of sizes, or, for
    a bare name of one of ``params``, a reference resolved where the block is used."""
    if isinstance(value, ast.Literal):
        return value.value
    if isinstance(value, ast.TupleValue):
        return tuple(check_symbols(v, known, what) for v in value.items)
    name = value.bare_name
    if name in _BOOLS:
        return _BOOLS[name]
    if name is not None and name in params:
        return ParamRef(name, value.span)
    if name is not None and name not in known:
        return name  # a word: a choice such as mode=bilinear
    word = hyphenated(value)
    if word is not None and not set(word.split("-")) & known:
        return word  # act=gelu-tanh, unless its parts are sizes known here (D-K)
    return check_symbols(value, known, what)


def parse_setting(text: str) -> Any:
    """A value given as text (``--set``): a whole number (``50_257``), a number, true/false, or
    a word; anything else stays text, for `setting` to refuse."""
    t = text.strip()
    try:
        return int(t.replace("_", ""))
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        pass
    return _BOOLS.get(t, t)


def _kind(default: Any) -> str:
    if isinstance(default, bool):
        return "flag"
    if isinstance(default, float):
        return "number"
    if isinstance(default, str):
        return "word"
    if isinstance(default, (Expr, int, Fraction, tuple)):
        return "size"
    return "any"


_ACCEPTS = {
    "flag": "true or false",
    "number": "a finite number",
    "word": "a word",
    "size": "a whole number ≥ 1",
    "any": "a whole number ≥ 1, a finite number, true/false or a word",
}


def setting(name: str, value: Any, default: Any, where: str, size: bool = False) -> Any:
    """The value of parameter ``name`` given outside the spec (``where``: ``--set N=abc`` or
    ``N='abc'``), as the environment holds it; refused unless it is what ``default`` is (a
    size, when ``size``: an input's symbol such as T)."""
    kind = "size" if size else _kind(default)
    given = value
    if isinstance(value, str):
        value = parse_setting(value)
    got: Any = None
    if isinstance(value, bool):
        got = value if kind in ("flag", "any") else None
    elif isinstance(value, int):
        if kind in ("size", "any") and value >= 1:
            got = Expr.lift(value)
        elif kind == "number":
            got = float(value)
    elif isinstance(value, float):
        if math.isfinite(value) and kind in ("number", "any"):
            got = value if kind == "number" or not value.is_integer() else Expr.lift(int(value))
        elif math.isfinite(value) and kind == "size" and value.is_integer() and value >= 1:
            got = Expr.lift(int(value))
    elif isinstance(value, str) and _WORD.fullmatch(value):
        got = value if kind in ("word", "any") else None
    if got is None:
        shown = "" if default is None else f" (its default is {_show(default)})"
        raise LbdlError(
            f"{where}: `{name}` takes {_ACCEPTS[kind]}{shown}, not `{_show(given)}`",
            None,
            hint=f"e.g. {name}={_example(kind, default)}",
        )
    return got


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _example(kind: str, default: Any) -> str:
    if default is not None and not isinstance(default, tuple):
        return _show(default)
    return {"flag": "true", "number": "0.1", "word": "gelu", "size": "12"}.get(kind, "12")

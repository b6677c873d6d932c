"""Identifiers and size expressions in generated Python: nothing a spec writes reaches the code raw.

Every name that comes from a spec (tensor names, block names, parameter names, symbols) goes
through one `Namespace`, which keeps readable names readable (``resblock``, ``C``) and turns
anything else (keywords, unicode, quotes, clashes with our own locals) into a safe, unique
identifier. Strings go through `repr`. Sizes become integer Python expressions.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata
from fractions import Fraction
from math import lcm

from lbdl_dsl.core.symbolic import Expr, Floor

RESERVED = frozenset(
    {"jax", "jnp", "np", "init", "apply", "CONFIG", "PARAMS", "STATE", "COMPUTE"}
    | set(dir(builtins))
)
"""Module-level names of a generated module (runtime function names are added to them)."""

LOCAL_RESERVED = frozenset(
    {"p", "s", "ns", "xs", "key", "train", "params", "state", "jax", "jnp", "np", "_", "pos"}
    | {"context"}
)
"""Locals every generated function has; a spec's tensor names never take them."""


_AMBIGUOUS = frozenset({"l", "I", "O"})
"""Names that read as digits in many fonts (pycodestyle's E741): a spec's `I` becomes `I_`."""


class Code(str):
    """Source text standing for a value; its repr is the text itself, so it can sit in tuples."""

    def __repr__(self) -> str:
        return str(self)


def identifier(name: str) -> str:
    """An ASCII identifier close to ``name``: ``Ŷ`` → ``Y``, ``self-att`` → ``self_att``."""
    text = unicodedata.normalize("NFKD", name)
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"\W+", "_", text.encode("ascii", "ignore").decode()).strip("_")
    if not text or text[0].isdigit():
        text = f"v_{text}"
    return text


class Namespace:
    """Hands out unique, safe identifiers; the same request gets the same answer."""

    def __init__(self, reserved: frozenset[str] = RESERVED) -> None:
        self.reserved = set(reserved)
        self.given: dict[str, str] = {}
        self.used: set[str] = set()

    def __call__(self, name: str) -> str:
        if name in self.given:
            return self.given[name]
        base = identifier(name)
        if (
            keyword.iskeyword(base)
            or base in self.reserved
            or keyword.issoftkeyword(base)
            or base in _AMBIGUOUS
        ):
            base = f"{base}_"
        out, n = base, 1
        while out in self.used or out in self.reserved:
            n += 1
            out = f"{base}_{n}"
        self.used.add(out)
        self.given[name] = out
        return out

    def fresh(self, hint: str) -> str:
        out, n = identifier(hint), 0
        base = out
        while out in self.used or out in self.reserved or keyword.iskeyword(out):
            n += 1
            out = f"{base}{n}"
        self.used.add(out)
        return out


def rate_code(expr: Expr, names: dict[str, str]) -> str:
    """A float Python expression for a number that follows a copy's index (``0.1 * i / 17``):
    each term's coefficient as a float times its symbols, true division, no rounding."""
    terms = []
    for mono, coef in expr.terms:
        factors = [_atom_code(a, names) + (f" ** {p}" if p != 1 else "") for a, p in mono]
        terms.append(" * ".join([repr(float(coef)), *factors]))
    return " + ".join(terms) if terms else "0.0"


def size_code(expr: Expr, names: dict[str, str]) -> str:
    """An integer Python expression for a size; exact divisions become one floor division."""
    c = expr.as_int()
    if c is not None:
        return str(c)
    den_num = 1
    den_syms: dict[str, int] = {}
    for mono, coef in expr.terms:
        den_num = lcm(den_num, coef.denominator)
        for atom, p in mono:
            if p < 0 and isinstance(atom, str):
                den_syms[atom] = max(den_syms.get(atom, 0), -p)
    scale = Expr.lift(den_num)
    for s, p in den_syms.items():
        scale = scale * Expr({((s, p),): Fraction(1)})
    num = expr * scale
    terms = []
    for mono, coef in num.terms:
        factors = [_atom_code(a, names) + (f" ** {p}" if p != 1 else "") for a, p in mono]
        if coef != 1 or not factors:
            factors.insert(0, str(abs(coef.numerator)) if factors else str(coef.numerator))
        text = " * ".join(factors)
        terms.append((coef < 0 and bool(mono), text))
    out = ""
    for i, (neg, text) in enumerate(terms):
        out += (f" - {text}" if neg else f" + {text}") if i else (f"-{text}" if neg else text)
    if scale.as_int() == 1:
        return out
    den = size_code(scale, names)
    num_text = out if out.isidentifier() else f"({out})"
    return f"{num_text} // {den if den.isidentifier() or den.isdigit() else f'({den})'}"


def _atom_code(atom: str | Floor, names: dict[str, str]) -> str:
    if isinstance(atom, str):
        return names.get(atom, atom)
    return f"(({size_code(atom.num, names)}) // {atom.den})"

"""The source of the runtime functions a generated module needs, copied from the runtime.

The generated module must import only JAX and NumPy (beyond Python's standard library), so
instead of importing our runtime it carries the functions it uses (and the ones those call),
in the order they appear in the modules of `runtime/` (one per family, by file name): top-level
``def``s that need only the runtime's imports. The files are ours, parsed with `ast`: nothing
from a spec is involved.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import NamedTuple

_RUNTIME = Path(__file__).with_name("runtime")


def _files() -> list[Path]:
    return sorted(_RUNTIME.glob("[!_]*.py"))


def _text() -> str:
    return "\n\n".join(f.read_text(encoding="utf-8") for f in _files())


class _Runtime(NamedTuple):
    """What one parse of the runtime's files gives (see ``_parsed``)."""

    table: dict[str, tuple[int, str, frozenset[str]]]
    bound: frozenset[str]
    defaults: dict[str, dict[str, object]]


@functools.cache
def _parsed() -> _Runtime:
    """name → (position, source, runtime functions it calls); every name a function binds;
    and name → its keyword defaults that are plain literals.

    One parse for all three: parsing the runtime's text costs tens of milliseconds, and a
    fresh process building GPT-2 once spent 0.2 s parsing it again per function it asked the
    defaults of.

    The names bound are every argument and local of the runtime's functions: a block function
    of the same name at module level would be shadowed inside them (harmless today, as none
    calls a block, but a trap), so block functions keep clear of these names.
    """
    text = _text()
    defs = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
    names = {d.name for d in defs}
    if len(names) != len(defs):
        raise AssertionError("two runtime functions have the same name")
    lines = text.splitlines()
    table, bound = {}, set()
    for i, d in enumerate(defs):
        src = "\n".join(lines[d.lineno - 1 : d.end_lineno])
        called = set()
        for n in ast.walk(d):
            if isinstance(n, ast.Name):
                if n.id in names:
                    called.add(n.id)
                if isinstance(n.ctx, ast.Store):
                    bound.add(n.id)
            elif isinstance(n, ast.arg):
                bound.add(n.arg)
        table[d.name] = (i, src, frozenset(called - {d.name}))
    return _Runtime(table, frozenset(bound), {d.name: _literal_defaults(d.args) for d in defs})


def defaults(name: str) -> dict[str, object]:
    """The keyword defaults of runtime function ``name`` that are plain literals: a call need
    not write an argument equal to its default (``stride=(1, 1)``, ``eps=1e-05``)."""
    return dict(_parsed().defaults.get(name, {}))


def _literal_defaults(args: ast.arguments) -> dict[str, object]:
    out: dict[str, object] = {}
    positional = args.posonlyargs + args.args
    with_defaults = positional[len(positional) - len(args.defaults) :]
    for arg, default in zip(with_defaults, args.defaults):
        out[arg.arg] = _literal(default)
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults):
        if kw_default is not None:
            out[arg.arg] = _literal(kw_default)
    return {k: v for k, v in out.items() if v is not _NOT_LITERAL}


_NOT_LITERAL = object()


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _NOT_LITERAL


def _functions() -> dict[str, tuple[int, str, frozenset[str]]]:
    return _parsed().table


def available() -> frozenset[str]:
    return frozenset(_functions())


def bound_names() -> frozenset[str]:
    """Every argument and local of the runtime's functions (see ``_parsed``)."""
    return _parsed().bound


def source_for(used: set[str]) -> str:
    """The functions in ``used`` and their dependencies, in the runtime's order."""
    table = _functions()
    missing = sorted(u for u in used if u not in table)
    if missing:
        raise KeyError(f"runtime functions missing: {', '.join(missing)}")
    todo, seen = list(used), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(table[name][2])
    ordered = sorted(seen, key=lambda n: table[n][0])
    return "\n\n\n".join(table[n][1] for n in ordered)

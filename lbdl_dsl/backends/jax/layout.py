"""Laying out generated statements, in-process, so the module's bytes depend on nothing else.

The code generator writes one logical statement per line. A statement that fits in `WIDTH`
columns stays as it is; a longer one is parsed (it is our own code) and written again with its
outermost call, dictionary or tuple opened one item per line, each followed by a comma, and the
same rule applied to each item. That is the layout ruff and black give such a statement when
its brackets end with a comma (the "magic trailing comma"), so the module passes ``ruff format
--check --line-length 100`` without running ruff, and the same spec gives the same bytes on
every machine whatever tools are installed. Strings are written with double quotes, as those
tools write them.
"""

from __future__ import annotations

import ast
import io
import tokenize

WIDTH = 100
_INDENT = "    "


def quote(text: str) -> str:
    """A Python string literal in double quotes."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def statement(line: str) -> list[str]:
    """One generated line (indentation included), laid out to fit `WIDTH` where it can."""
    stripped = line.lstrip(" ")
    indent = line[: len(line) - len(stripped)]
    if len(line) <= WIDTH or stripped.startswith("#"):
        return [line]
    header = stripped.startswith("def ")
    tree = ast.parse(stripped + (" pass" if header else ""))
    node = tree.body[0]
    if isinstance(node, ast.FunctionDef):
        return _def(node, indent)
    if isinstance(node, ast.Assign):
        lead = " = ".join(_flat(t) for t in node.targets) + " = "
        return _open(node.value, indent, lead, "")
    if isinstance(node, ast.Return) and node.value is not None:
        return _open(node.value, indent, "return ", "")
    return [line]


def lines(body: list[str]) -> list[str]:
    """Every line of a function body laid out (comments and short lines as they are), with
    the empty line the formatter wants before a nested ``def`` (above its comments) and after
    its body."""
    out: list[str] = []
    nested: list[int] = []  # indents of the nested defs whose body is being written
    for line in body:
        indent = len(line) - len(line.lstrip(" "))
        if nested and indent <= nested[-1] and line.strip():
            nested.pop()
            out.append("")
        if line.lstrip().startswith("def "):
            at = len(out)
            while at > 0 and out[at - 1].lstrip().startswith("#"):
                at -= 1
            before = out[at - 1] if at > 0 else None
            # after the enclosing function's docstring (the start of `body`), or after a
            # statement; not right after the `def` line of an enclosing step function
            if before is None or (before != "" and not before.lstrip().startswith("def ")):
                out.insert(at, "")
            nested.append(indent)
        out += statement(line)
    return out


def entry(key: str, value: str, indent: str) -> list[str]:
    """``key: value,`` in a dictionary opened one entry per line (the tables of a module)."""
    node = ast.parse(value, mode="eval").body
    return _open(node, indent, f"{key}: ", ",")


def _def(node: ast.FunctionDef, indent: str) -> list[str]:
    args = [_flat(a) for a in _arguments(node.args)]
    inner = indent + _INDENT
    return [f"{indent}def {node.name}(", *(f"{inner}{a}," for a in args), f"{indent}):"]


def _arguments(args: ast.arguments) -> list[ast.AST | str]:
    out: list[ast.AST | str] = [a.arg for a in args.args]
    if args.kwonlyargs:
        out.append("*")
    for a, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(a.arg if default is None else f"{a.arg}={_flat(default)}")
    return out


def _open(node: ast.expr, indent: str, lead: str, tail: str) -> list[str]:
    """``lead`` + ``node`` + ``tail`` on one line if it fits, else with ``node`` opened."""
    flat = indent + lead + _flat(node) + tail
    if len(flat) <= WIDTH:
        return [flat]
    items, opening, closing = _parts(node)
    if items is None:
        return [flat]
    inner = indent + _INDENT
    out = [indent + lead + opening]
    for item in items:
        out += _item(item, inner)
    out.append(indent + closing + tail)
    return out


def _item(item: ast.AST | tuple[str, ast.expr], indent: str) -> list[str]:
    if isinstance(item, tuple):  # a keyword argument or a dictionary entry: "k=" / '"k": '
        prefix, value = item
        return _open(value, indent, prefix, ",")
    assert isinstance(item, ast.expr)
    return _open(item, indent, "", ",")


def _parts(node: ast.expr) -> tuple[list[ast.expr | tuple[str, ast.expr]] | None, str, str]:
    """The items of a call, dictionary or tuple (or of a lambda's call), and its brackets;
    None for anything else."""
    if isinstance(node, ast.Call):
        items: list[ast.expr | tuple[str, ast.expr]] = list(node.args)
        items += [(f"{k.arg}=", k.value) for k in node.keywords]
        return items, _flat(node.func) + "(", ")"
    if isinstance(node, ast.Dict):
        return [(_key(k), v) for k, v in zip(node.keys, node.values)], "{", "}"
    if isinstance(node, ast.Tuple):
        return list(node.elts), "(", ")"
    if isinstance(node, ast.List):
        return list(node.elts), "[", "]"
    if isinstance(node, ast.Lambda) and isinstance(node.body, ast.Call):  # a table's formula
        inner, opening, closing = _parts(node.body)
        return inner, f"lambda {', '.join(a.arg for a in node.args.args)}: {opening}", closing
    return None, "", ""


def _flat(node: ast.AST | str) -> str:
    """One node on one line, in the form the formatter keeps."""
    if isinstance(node, str):
        return node
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return quote(node.value)
    if isinstance(node, ast.Tuple):
        inside = ", ".join(_flat(e) for e in node.elts)
        return f"({inside},)" if len(node.elts) == 1 else f"({inside})"
    if isinstance(node, ast.Call):
        args = [_flat(a) for a in node.args] + [f"{k.arg}={_flat(k.value)}" for k in node.keywords]
        return f"{_flat(node.func)}({', '.join(args)})"
    if isinstance(node, ast.Dict):
        return "{" + ", ".join(_key(k) + _flat(v) for k, v in zip(node.keys, node.values)) + "}"
    if isinstance(node, ast.List):
        return "[" + ", ".join(_flat(e) for e in node.elts) + "]"
    if isinstance(node, ast.Subscript):
        return f"{_flat(node.value)}[{_flat(node.slice)}]"
    return requote(ast.unparse(node))  # names, attributes, numbers, operators


def _key(key: ast.expr | None) -> str:
    """A dictionary entry's start: ``"k": ``, or ``**`` where a dictionary is unpacked."""
    return "**" if key is None else f"{_flat(key)}: "


def requote(code: str) -> str:
    """``code`` with every string literal in double quotes (``ast.unparse`` writes single)."""
    out, last = [], (1, 0)
    lines = code.splitlines(keepends=True)
    tokens = tokenize.generate_tokens(io.StringIO(code).readline)
    for tok in tokens:
        if tok.type == tokenize.STRING and tok.string.startswith("'"):
            out.append(_between(lines, last, tok.start))
            out.append(quote(ast.literal_eval(tok.string)))
            last = tok.end
    out.append(_between(lines, last, (len(lines) + 1, 0)))
    return "".join(out)


def _between(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    (r0, c0), (r1, c1) = start, end
    if r0 == r1:
        return lines[r0 - 1][c0:c1] if r0 <= len(lines) else ""
    parts = [lines[r0 - 1][c0:]] + lines[r0 : r1 - 1]
    if r1 <= len(lines):
        parts.append(lines[r1 - 1][:c1])
    return "".join(parts)


def literal(value: object) -> str:
    """A Python literal (numbers, strings, tuples, lists, dicts, None) as the formatter
    writes it: double quotes, a one-element tuple with its comma."""
    return _flat(ast.parse(repr(value), mode="eval").body)

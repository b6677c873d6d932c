"""Loading a spec and the block libraries it imports, relative to the importing file.

A spec is untrusted: an import may name a missing file, a directory, a device that never ends
(/dev/zero), itself, or a cycle of files. Each case is a clear error at the ``import`` line, and
only regular ``.lbdl`` files of bounded size are ever read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.limits import MAX_IMPORTS, MAX_SOURCE_BYTES
from lbdl_dsl.compiler.parser import parse
from lbdl_dsl.core.errors import LbdlError, Note, Span


@dataclass
class Loaded:
    """The main module and every module it reaches, with their texts for error messages."""

    main: ast.Module
    modules: list[ast.Module] = field(default_factory=list)  # main first, then in import order
    sources: dict[str, str] = field(default_factory=dict)


def read_spec(path: str | os.PathLike[str], span: Span | None = None) -> str | bytes:
    """The bytes of a spec file, refusing anything that is not a regular file of sane size."""
    p = Path(path)
    where = span or Span.point(str(path), 1, 1)
    if not p.exists():
        raise LbdlError(f"no such file: {path}", where, hint="check the path and its spelling")
    if not p.is_file():
        raise LbdlError(f"not a regular file: {path}", where, hint="a spec is a .lbdl text file")
    size = p.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise LbdlError(
            f"{path} is too large ({size:,} bytes; the limit is {MAX_SOURCE_BYTES:,})", where
        )
    try:
        return p.read_bytes()
    except OSError as exc:
        raise LbdlError(f"cannot read {path}: {exc.strerror}", where) from None


def _as_text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def load(data: str | bytes, file: str) -> Loaded:
    """Parse ``data`` (the text of ``file``) and, recursively, the files it imports."""
    main = parse(data, file)
    loaded = Loaded(main, [main], {file: _as_text(data)})
    chain: list[tuple[str, Span | None]] = [(_key(file), None)]
    done: set[str] = {_key(file)}
    _load_imports(main, loaded, chain, done)
    return loaded


def _key(file: str) -> str:
    try:
        return str(Path(file).resolve())
    except OSError:
        return file


def _load_imports(
    module: ast.Module, loaded: Loaded, chain: list[tuple[str, Span | None]], done: set[str]
) -> None:
    base = Path(module.file).parent
    for imp in module.imports:
        if not imp.path.endswith(".lbdl"):
            raise LbdlError(
                f"cannot import `{imp.path}`: only .lbdl files are imported",
                imp.span,
                hint='name the file with its extension, e.g. `import "blocks/resnet.lbdl"`',
            )
        target = base / imp.path
        key = _key(str(target))
        on_chain = [k for k, _ in chain]
        if key in on_chain:
            cycle = [Path(k).name for k in on_chain[on_chain.index(key) :]] + [Path(key).name]
            notes = [Note("imported from here", s) for _, s in chain[1:] if s is not None]
            raise LbdlError(
                f"import cycle: {' → '.join(cycle)}",
                imp.span,
                hint="move the shared blocks into a file that both import",
                notes=notes,
            )
        if key in done:
            continue
        if len(done) > MAX_IMPORTS:  # `done` holds the main file too
            raise LbdlError(f"more than {MAX_IMPORTS} imported files", imp.span)
        done.add(key)
        name = os.path.relpath(target) if not target.is_absolute() else str(target)
        data = read_spec(target, imp.span)
        sub = parse(data, name)
        if sub.models:
            raise LbdlError(
                f"{name} defines a model; an imported file may only define blocks",
                imp.span,
                notes=[Note("the model is here", sub.models[0].name_span)],
                hint="move the blocks into a library file and import that",
            )
        loaded.sources[name] = _as_text(data)
        loaded.modules.append(sub)
        chain.append((key, imp.span))
        _load_imports(sub, loaded, chain, done)
        chain.pop()

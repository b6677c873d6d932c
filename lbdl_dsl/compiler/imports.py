"""Loading a spec and the block libraries it imports, relative to the importing file.

A spec is untrusted: an import may name a missing file, a directory, a device that never ends
(/dev/zero), itself, a cycle of files, or (through a symbolic link or `..`) any file the user
can read, whose first line a syntax error would quote. So an import is a relative path to a
regular ``.lbdl`` file of bounded size that lies, once every link is followed, inside the main
spec's folder tree or inside a folder of the explicit search path (``--import-path``), and each
case that is not is a clear error at the ``import`` line.

The library's own block files (the ``specs/blocks/`` of lbdl: ``import "blocks/transformer.lbdl"``)
are found last, from any folder, as a language's standard library is: a spec written outside the
repository (``lbdl from-hf`` writes one) imports them as the specs of ``specs/`` do.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.limits import MAX_IMPORTS, MAX_SOURCE_BYTES
from lbdl_dsl.compiler.parser import parse
from lbdl_dsl.core.errors import LbdlError, Note, Span, os_error


def _library() -> Path | None:
    """The folder of the library's specs: ``lbdl_dsl/specs`` in a wheel, ``specs/`` beside the
    package in a source checkout, ``None`` when neither is there."""
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "specs", package.parent / "specs"):
        if (folder / "blocks").is_dir():
            return folder
    return None


LIBRARY = _library()


@dataclass
class Loaded:
    """The main module and every module it reaches, with their texts for error messages."""

    main: ast.Module
    modules: list[ast.Module] = field(default_factory=list)  # main first, then in import order
    sources: dict[str, str] = field(default_factory=dict)


def read_spec(path: str | os.PathLike[str], span: Span | None = None) -> str | bytes:
    """The bytes of a spec file, refusing anything that is not a regular file of sane size."""
    where = span or Span.point(str(path), 1, 1)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        hint = "check the path and its spelling"
        if not str(path).endswith(".lbdl") and os.path.isfile(f"{os.fspath(path)}.lbdl"):
            hint = f"did you mean `{os.fspath(path)}.lbdl`?"
        raise LbdlError(f"no such file: {path}", where, hint=hint) from None
    except (OSError, ValueError) as exc:  # a symlink loop, a name too long, a NUL in it
        if isinstance(exc, ValueError):
            raise LbdlError(f"not a file name: {path!r}", where) from None
        err = os_error(exc, "read", path)
        raise LbdlError(err.first.message, where, hint=err.first.hint) from None
    if not stat.S_ISREG(info.st_mode):
        raise LbdlError(f"not a regular file: {path}", where, hint="a spec is a .lbdl text file")
    if info.st_size > MAX_SOURCE_BYTES:
        raise LbdlError(
            f"{path} is too large ({info.st_size:,} bytes; the limit is {MAX_SOURCE_BYTES:,})",
            where,
        )
    try:  # without blocking, and only what was a regular file a moment ago still is
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise LbdlError(f"not a regular file: {path}", where)
            return f.read(MAX_SOURCE_BYTES + 1)  # a file that grew since is refused by parse
    except OSError as exc:
        err = os_error(exc, "read", path)
        raise LbdlError(err.first.message, where, hint=err.first.hint) from None


def _as_text(data: str | bytes) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def quotable(file: str) -> bool:
    """Whether an error may quote lines of ``file``: a spec's text, never another file's (a
    password file behind a link named like a spec)."""
    return file.startswith("<") or os.path.realpath(file).endswith(".lbdl")


def sources_for(err: LbdlError) -> dict[str, str]:
    """The texts of the spec files an error points into (those it may quote), read from disk
    for an error raised before they were kept: a file that did not parse."""
    out: dict[str, str] = {}
    for d in err.diagnostics:
        for span in [d.span, *(n.span for n in d.notes)]:
            if span is None or span.file in out or not quotable(span.file):
                continue
            try:
                info = os.stat(span.file)
                if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_SOURCE_BYTES:
                    with open(span.file, "rb") as f:
                        out[span.file] = f.read().decode("utf-8", "replace")
            except (OSError, ValueError):
                pass
    return out


def load(
    data: str | bytes, file: str, import_path: Sequence[str | os.PathLike[str]] = ()
) -> Loaded:
    """Parse ``data`` (the text of ``file``) and, recursively, the files it imports.

    Imports resolve from the importing file's folder, then from each folder of
    ``import_path``, and must end up inside the main file's folder tree or one of those.
    """
    main = parse(data, file)
    loaded = Loaded(main, [main], {file: _as_text(data)} if quotable(file) else {})
    base = Path(file).parent if not file.startswith("<") else Path()
    # the spec's folder tree, then the search path, and the folder lbdl runs in (a project's
    # tests may import its specs' libraries by `..`)
    roots = [_real(base)] + [_real(Path(p)) for p in import_path] + [_real(Path.cwd())]
    chain: list[tuple[str, Span | None]] = [(_key(file), None)]
    done: set[str] = {_key(file)}
    _load_imports(main, loaded, chain, done, roots)
    return loaded


def _real(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return path.absolute()


def _key(file: str) -> str:
    return str(_real(Path(file)))


def _resolve(imp: ast.Import, module_file: str, roots: list[Path]) -> tuple[Path, str]:
    """The file an import names (as the user would write its path) and its real path, or the
    error that says why it may not be read."""
    if os.path.isabs(imp.path) or Path(imp.path).drive:
        raise LbdlError(
            f"cannot import `{imp.path}`: an import is a path relative to the importing file",
            imp.span,
            hint="write it from the importing file's folder, or pass the library's folder "
            "with --import-path DIR",
        )
    if not imp.path.endswith(".lbdl"):
        raise LbdlError(
            f"cannot import `{imp.path}`: only .lbdl files are imported",
            imp.span,
            hint='name the file with its extension, e.g. `import "blocks/resnet.lbdl"`',
        )
    here = Path(module_file).parent if not module_file.startswith("<") else Path()
    candidates = [here / imp.path] + [root / imp.path for root in roots[1:-1]]
    if LIBRARY is not None:
        candidates.append(LIBRARY / imp.path)
    target = next((c for c in candidates if os.path.lexists(c)), candidates[0])
    try:
        real = Path(os.path.realpath(target, strict=True))
    except FileNotFoundError:
        shown = _shown(target)
        raise LbdlError(f"no such file: {shown}", imp.span, hint=_missing_hint(roots)) from None
    except (OSError, RuntimeError, ValueError) as exc:
        if isinstance(exc, ValueError):
            raise LbdlError(f"cannot import `{imp.path}`: not a file name", imp.span) from None
        err = os_error(exc, "read", _shown(target))
        raise LbdlError(err.first.message, imp.span, hint=err.first.hint) from None
    library = [LIBRARY] if LIBRARY is not None and target == LIBRARY / imp.path else []
    if not any(real.is_relative_to(root) for root in roots + library):
        raise LbdlError(
            f"cannot import `{imp.path}`: it is outside the spec's folder",
            imp.span,
            hint="imports stay inside the folder of the spec compiled (and its subfolders); "
            "pass another library folder with --import-path DIR",
        )
    if not real.name.endswith(".lbdl"):
        raise LbdlError(
            f"cannot import `{imp.path}`: it is a link to a file that is not a .lbdl spec",
            imp.span,
            hint="import the .lbdl file itself",
        )
    return target, str(real)


def _shown(target: Path) -> str:
    return os.path.relpath(target) if not target.is_absolute() else str(target)


def _missing_hint(roots: list[Path]) -> str:
    if len(roots) > 2:
        return (
            "check the path and its spelling; it was looked for beside the importing file "
            "and in each --import-path folder"
        )
    return "check the path and its spelling"


def _load_imports(
    module: ast.Module,
    loaded: Loaded,
    chain: list[tuple[str, Span | None]],
    done: set[str],
    roots: list[Path],
) -> None:
    for imp in module.imports:
        target, key = _resolve(imp, module.file, roots)
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
        name = _shown(target)
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
        _load_imports(sub, loaded, chain, done, roots)
        chain.pop()

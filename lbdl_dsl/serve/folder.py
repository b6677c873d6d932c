"""The served folder: the only files the studio reads or writes.

A name from the page is untrusted: it is a relative path with ``/`` between its parts, none of
them ``..`` or empty, and its real path (links followed) must stay inside the folder. A write
goes to a temporary file beside the target, then replaces it in one rename, so a reader never
sees half a file and no other file is touched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from lbdl_dsl.compiler.limits import MAX_SOURCE_BYTES
from lbdl_dsl.core.errors import LbdlError

SUFFIX = ".lbdl"
MAX_FILES = 2_000
"""The most specs the file list shows (a served folder the size of a home directory)."""

SKIPPED = frozenset({".git", ".venv", "node_modules", "__pycache__", "build", "runs"})


class Refused(LbdlError):
    """A path the studio will not read or write: outside the folder, or not a spec."""


def resolve(root: Path, name: str, *, must_exist: bool = True) -> Path:
    """The file ``name`` names inside ``root`` (a real, absolute folder), or `Refused`."""
    if not name or "\\" in name or "\x00" in name or name.startswith("/") or ":" in name:
        raise Refused(f"`{name}`: give a path relative to the served folder")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise Refused(f"`{name}`: no `..`, `.` or empty part in a path")
    if not name.endswith(SUFFIX):
        raise Refused(f"`{name}`: the studio reads and writes .lbdl specs only")
    target = root.joinpath(*parts)
    real = Path(os.path.realpath(target))
    if not real.is_relative_to(root):
        raise Refused(f"`{name}`: it leads outside the served folder")
    if must_exist and not real.is_file():
        raise Refused(f"`{name}`: no such spec in the served folder")
    return real


def listing(root: Path) -> list[str]:
    """The specs under ``root`` as relative names, sorted; links that leave it are left out."""
    out: list[str] = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
        for f in sorted(files):
            if not f.endswith(SUFFIX):
                continue
            name = Path(here, f).relative_to(root).as_posix()
            try:
                resolve(root, name)
            except Refused:
                continue
            out.append(name)
            if len(out) >= MAX_FILES:
                return out
    return out


def read(root: Path, name: str) -> str:
    target = resolve(root, name)
    if target.stat().st_size > MAX_SOURCE_BYTES:
        raise Refused(f"`{name}`: larger than a spec may be ({MAX_SOURCE_BYTES:,} bytes)")
    data = target.read_bytes()
    return data.decode("utf-8", errors="replace")


def write(root: Path, name: str, text: str) -> Path:
    """Replace (or create) ``name`` atomically; its folder must already exist in ``root``."""
    target = resolve(root, name, must_exist=False)
    if not target.parent.is_dir():
        raise Refused(f"`{name}`: its folder does not exist in the served folder")
    if target.exists() and not target.is_file():
        raise Refused(f"`{name}`: not a file")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target

"""The user's cache folder: files lbdl derives from its inputs and can always make again.

Like Python's ``__pycache__``, the folder belongs to the user (``$XDG_CACHE_HOME/lbdl`` or
``~/.cache/lbdl``), never to a shared temporary folder. Every reader treats a missing, stale
or broken file as a miss, and every writer gives up silently, so a read-only home, an odd file
system or a full disk only costs time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def folder() -> Path | None:
    """The cache folder, made if need be; None where it cannot be written."""
    try:
        path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lbdl"
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # no home, a read-only or odd file system
        return None
    return path if os.access(path, os.W_OK) else None


def digest(*parts: str) -> str:
    """A file name for what ``parts`` determine."""
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def read_text(name: str) -> str | None:
    """The text stored under ``name``, if it is there whole (`write_text` seals it)."""
    where = folder()
    if where is None:
        return None
    try:
        seal, _, text = (where / name).read_text(encoding="utf-8").partition("\n")
    except (OSError, UnicodeDecodeError):
        return None
    return text if seal == digest(text) else None


def write_text(name: str, text: str) -> None:
    """Store ``text`` under ``name``, sealed with its digest; all at once (a rename)."""
    where = folder()
    if where is None:
        return
    try:
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=where, suffix=".tmp", delete=False
        ) as out:
            out.write(digest(text) + "\n" + text)
        os.replace(out.name, where / name)
    except OSError:
        return

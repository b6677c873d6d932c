"""The user's cache folder: files lbdl derives from its inputs and can always make again.

Like Python's ``__pycache__``, the folder belongs to the user (``$XDG_CACHE_HOME/lbdl`` or
``~/.cache/lbdl``), never to a shared temporary folder. Its one user is the parser's table
cache; a read-only home, an odd file system or a full disk only costs time.
"""

from __future__ import annotations

import os
from pathlib import Path


def folder() -> Path | None:
    """The cache folder, made if need be; None where it cannot be written."""
    try:
        path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lbdl"
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # no home, a read-only or odd file system
        return None
    return path if os.access(path, os.W_OK) else None

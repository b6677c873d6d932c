"""Reading a ``.npz`` file that may not be what its name says, without trusting its headers.

`numpy.load` believes a member's header: an ``.npz`` whose header declares 2⁴⁰ values makes it
allocate them before reading a byte (a `MemoryError`, or the machine's memory gone), a file cut
short or a ``.npy`` renamed ``.npz`` raise whatever the zip or the format module raises. Here
each member's declared size is checked against the bytes the archive holds for it before
anything is read, and every way the file can be wrong is an `LbdlError` naming it, with the
caller's hint.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lbdl_dsl.core.errors import LbdlError, os_error

NPY_MAGIC = b"\x93NUMPY"


def load_npz(path: Path, what: str, hint: str) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path`` by name; ``what`` names the file in messages
    (``--data FILE``), ``hint`` says how to write a good one."""

    def refuse(reason: str) -> LbdlError:
        return LbdlError(f"{what}: not a readable .npz file ({reason})", None, hint=hint)

    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise LbdlError(f"{what}: no such file", None, hint="check the path") from None
    except (OSError, ValueError) as exc:  # a symlink loop, a name too long
        if isinstance(exc, ValueError):
            raise refuse("not a file name") from None
        raise os_error(exc, "read", path) from None
    if not stat.S_ISREG(info.st_mode):
        raise refuse("not a regular file")
    if info.st_size == 0:
        raise refuse("it is empty")
    try:
        with open(path, "rb") as f:
            if f.read(len(NPY_MAGIC)) == NPY_MAGIC:
                raise refuse("it is a single .npy array; save with numpy.savez")
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                _check_member(archive, member, refuse)
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except LbdlError:
        raise
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise os_error(exc, "read", path) from None
        raise refuse(str(exc) or type(exc).__name__) from None
    except (ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, MemoryError) as exc:
        raise refuse(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__) from None


def _check_member(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, refuse: Callable[[str], LbdlError]
) -> None:
    """Refuse a member whose header declares more values than the archive holds bytes for."""
    if not member.filename.endswith(".npy"):
        raise refuse(f"`{member.filename}` is not an array")
    with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise refuse(f"`{member.filename}`: .npy format version {version}")
        header = f.tell()
    if dtype.hasobject:  # pickled Python objects, which are never unpickled here
        name = member.filename.removesuffix(".npy")
        raise refuse(f"`{name}` holds Python objects (dtype object), not numbers")
    count = 1
    for n in shape:
        count *= int(n)
    declared = count * dtype.itemsize
    if declared > member.file_size - header:
        name = member.filename.removesuffix(".npy")
        raise refuse(
            f"`{name}` declares {count:,} values of {dtype} ({declared:,} bytes) but holds "
            f"{max(0, member.file_size - header):,} bytes"
        )

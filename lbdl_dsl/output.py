"""Writing artefacts without ever destroying the user's data.

Each file is written whole beside its target and moved into place with one rename, so an
interrupted run leaves either the old file or the new one, never half of one; the output folder
is created if missing and nothing in it that we did not write is ever touched.

Where the system allows (Linux's ``O_TMPFILE``), the new file has no name until it is complete,
so a run killed while writing leaves nothing behind; elsewhere it has a hidden temporary name
that an exception, Ctrl-C or SIGTERM (`lbdl_dsl.cli.guarded`) removes, and that the next write
of the same file removes if SIGKILL left it. A new file gets the
mode the user's umask gives (0644 for the usual 022), and a file we replace keeps its own mode.
Any error of the system (a folder that cannot be written, a full disk, a folder where the file
should be) is the user's, an `LbdlError` naming the path.

Only a regular file (or a link to one) is ever replaced. A FIFO or a character device at the
target (``-o /dev/stdout``, a pipe another program reads) is written through, as the shell's
``>`` would; a FIFO that nobody reads is refused rather than waited on, and anything else (a
block device, a socket, a folder) is refused: renaming over ``/dev/null``, which a command run
as root could otherwise do, would replace the machine's device with a file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from lbdl_dsl.core.errors import LbdlError, os_error, printable

_FILE_MODE = 0o666  # less the umask, as the shell's `>` and every editor create files


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` all at once; raises `LbdlError` for any error of the system."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError) as exc:
        raise os_error(exc, "create the folder", folder) from None
    try:
        _replace(path, raw)
    except (OSError, RuntimeError) as exc:
        raise os_error(exc, "write", path) from None
    return path


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """``with atomic_file(path) as f: f.write(...)``: a file written piece by piece that appears
    at ``path`` whole when the block ends, and not at all if it raises; the same rules as
    `write_atomic` (a hidden temporary swept by the next write, the umask's mode, an existing
    file's mode kept, special files written through or refused). An error of the system while
    writing is an `LbdlError` naming ``path``; the block's own exceptions pass unchanged."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError) as exc:
        raise os_error(exc, "create the folder", path.parent) from None
    with _system_errors(path):
        old = _target(path)
        through = old is not None and not stat.S_ISREG(old.st_mode)
        if through:
            fd = _through(path)
            temp = None
        else:
            _sweep(path)
            temp = _temp_name(path)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        with open(fd, "wb") as f:
            with _system_errors(path):
                if old is not None and not through:
                    os.fchmod(fd, stat.S_IMODE(old.st_mode))
            yield _Checked(f, path)  # type: ignore[misc]
            with _system_errors(path):
                f.flush()
                if not through:
                    os.fsync(fd)
        if temp is not None:
            with _system_errors(path):
                os.replace(temp, path)
    except BaseException:
        if temp is not None:
            with contextlib.suppress(OSError):
                temp.unlink()
        raise


class _Checked:
    """A binary file whose write errors (a full disk) are `LbdlError`s naming the target."""

    def __init__(self, f: BinaryIO, path: Path) -> None:
        self._f, self._path = f, path

    def write(self, data: bytes | memoryview) -> int:
        with _system_errors(self._path):
            return self._f.write(data)


@contextlib.contextmanager
def _system_errors(path: Path) -> Iterator[None]:
    try:
        yield
    except (OSError, RuntimeError) as exc:
        raise os_error(exc, "write", path) from None


def _target(path: Path) -> os.stat_result | None:
    """What is at ``path`` now (links followed), refused unless it is a regular file or a
    special file that is written through (a FIFO, a character device); None if nothing."""
    try:
        old = os.stat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(old.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not (stat.S_ISREG(old.st_mode) or stat.S_ISFIFO(old.st_mode) or stat.S_ISCHR(old.st_mode)):
        raise LbdlError(
            f"{printable(str(path))}: not a regular file ({_kind(old.st_mode)}); lbdl replaces "
            "only regular files",
            None,
            hint="write to a file name of your own",
        )
    return old


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "a special file")


def _through(path: Path) -> int:
    """An open descriptor on the FIFO or device at ``path``, for writing through it; a FIFO
    with no reader is refused at once (opening it would wait for one forever)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        raise LbdlError(
            f"{printable(str(path))}: a FIFO that no program is reading",
            None,
            hint="start its reader first, or write to a regular file",
        ) from None
    os.set_blocking(fd, True)
    return fd


def _write_through(path: Path, raw: bytes) -> None:
    fd = _through(path)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def _replace(path: Path, raw: bytes) -> None:
    old = _target(path)
    if old is not None and not stat.S_ISREG(old.st_mode):
        _write_through(path, raw)
        return
    mode = stat.S_IMODE(old.st_mode) if old is not None else None
    _sweep(path)
    temp = _temp_name(path)
    if not _write_unnamed(temp, raw, mode):
        _write_named(temp, raw, mode)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _sweep(path: Path) -> None:
    """Remove what an earlier run killed while writing ``path`` left: a temporary file of ours
    (``.NAME.PID-XXXXXXXX.tmp``) whose process is gone. Nothing else is touched."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.(\d+)-[0-9a-f]{{8}}\.tmp")
    try:
        names = [e.name for e in os.scandir(path.parent) if e.name.endswith(".tmp")]
    except OSError:
        return
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or _alive(int(m[1])):
            continue
        with contextlib.suppress(OSError):
            (path.parent / name).unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process, or no such number: leave its file alone
    return True


def _fill(fd: int, raw: bytes, mode: int | None) -> None:
    if mode is not None:  # a file we replace keeps its mode (0600 stays 0600, 0755 stays)
        os.fchmod(fd, mode)
    view = memoryview(raw)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)  # the rename must not publish a file whose bytes are still in flight


_UNNAMED = [hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")]


def _write_unnamed(temp: Path, raw: bytes, mode: int | None) -> bool:
    """Write a file without a name (O_TMPFILE) and give it the name ``temp`` once complete;
    False where the system cannot (then, once, for the rest of the run)."""
    if not _UNNAMED[0]:
        return False
    try:
        fd = os.open(temp.parent, os.O_TMPFILE | os.O_WRONLY, _FILE_MODE)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        _UNNAMED[0] = False  # a file system or kernel without it
        return False
    try:
        _fill(fd, raw, mode)
        try:
            os.link(f"/proc/self/fd/{fd}", temp, follow_symlinks=True)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOENT, errno.EPERM, errno.EOPNOTSUPP):
                raise
            _UNNAMED[0] = False  # /proc from another mount (containers, sandboxes)
            return False
    finally:
        os.close(fd)
    return True


def _write_named(temp: Path, raw: bytes, mode: int | None) -> None:
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
    try:
        _fill(fd, raw, mode)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    os.close(fd)

"""A safetensors file written one tensor at a time.

`safetensors.numpy.save` wants every array in memory at once; an imported 7B checkpoint would
then need its whole size twice. The format makes streaming easy: a little-endian length, a JSON
header giving each tensor's dtype, shape and byte range, then the bytes. Every shape is known
before the first tensor is read (the spec's parameter table says it), so the header is written
first and each array appended as it is made, whole or copy by copy: a stacked tensor is its
copies one after another, so that Mixtral's ``(N, E, D, F)`` experts (60 GB in float32 for
8x7B) are written one expert at a time. The file appears under its name only once complete (a
temporary file, then a rename, by `output.atomic_file`: the mode the umask gives, a temporary
that an error removes and that the next write of the same file sweeps if SIGKILL left it, a
full disk reported with the file's path), and it is the layout `Model.save` writes:
``params/<path>`` and ``state/<path>`` keys, float32, with the same metadata.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.backends.jax.weights import METADATA
from lbdl_dsl.output import atomic_file


class StreamWriter:
    """``with StreamWriter(path, {key: shape}) as w: w.write(key, array)`` in the given order;
    an array may be one of the key's copies (of its shape less leading axes), the copies
    written in order until the key is complete."""

    def __init__(self, path: str | os.PathLike[str], shapes: dict[str, tuple[int, ...]]) -> None:
        self.path = Path(path)
        self.shapes = dict(shapes)
        self._order = list(self.shapes)
        self._next = 0
        self._filled = 0  # numbers of the current key written so far
        self._file: Any = None
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> StreamWriter:
        header: dict[str, object] = {"__metadata__": METADATA}
        offset = 0
        for key in self._order:
            size = 4 * int(np.prod(self.shapes[key], dtype=np.int64))
            header[key] = {
                "dtype": "F32",
                "shape": list(self.shapes[key]),
                "data_offsets": [offset, offset + size],
            }
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        self._file = self._stack.enter_context(atomic_file(self.path))
        self._file.write(struct.pack("<Q", len(text)) + text)
        return self

    def write(self, key: str, array: np.ndarray) -> None:
        """Append ``key``'s array, or its next copy: keys come in the order given, with the
        shapes given."""
        assert self._file is not None, "use StreamWriter as a context manager"
        expected = self._order[self._next] if self._next < len(self._order) else None
        shape = self.shapes.get(key, ())
        total = int(np.prod(shape, dtype=np.int64))
        fits = tuple(array.shape) == tuple(shape[len(shape) - array.ndim :])
        if key != expected or not fits or self._filled + array.size > total:
            raise ValueError(f"wrote {key} {array.shape}, expected {expected} {shape}")
        self._file.write(np.ascontiguousarray(array, dtype="<f4").tobytes())
        self._filled += array.size
        if self._filled == total:
            self._next, self._filled = self._next + 1, 0

    def write_all(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        for key, array in items:
            self.write(key, array)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self._next != len(self._order):
            missing = ValueError(f"{len(self._order) - self._next} tensors were never written")
            self._stack.__exit__(ValueError, missing, None)  # the temporary is removed
            raise missing
        self._stack.__exit__(exc_type, exc, tb)

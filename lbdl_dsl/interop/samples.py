"""Inputs for ``lbdl predict``, from files: ``.npz`` arrays and images.

An ``.npz`` holds arrays named as the spec's inputs (``X`` or its only array for a spec of one
input), one sample or a batch: its shape is the input's, or the input's after a leading axis of
samples. Anything else is an error that names the array, its shape and the input's; nothing is
reshaped behind the user's back. An image (read with Pillow) is converted to the input's
channels (1: grey, 3: RGB), resized to its height and width (bilinear) and scaled from 0..255
to 0..1, channels first as the spec's inputs are; any normalisation is the spec's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import LbdlError

IMAGES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    """The samples read: a name for each (the file, ``file.npz[i]`` in a batch), and the
    arrays of each input, stacked."""

    names: list[str]
    arrays: dict[str, np.ndarray]


def read(paths: list[str], inputs: dict[str, tuple[Shape, str]]) -> Batch:
    """Every file of ``paths`` as samples of the model's ``inputs`` (name → shape, dtype)."""
    names: list[str] = []
    parts: dict[str, list[np.ndarray]] = {k: [] for k in inputs}
    for text in paths:
        path = Path(text)
        if not path.is_file():
            raise LbdlError(f"{text}: no such file", None)
        if path.suffix.lower() == ".npz":
            got = _npz(path, inputs)
        elif path.suffix.lower() in IMAGES:
            got = {_only(inputs, path): _image(path, *inputs[_only(inputs, path)])[None]}
        else:
            raise LbdlError(
                f"{text}: unknown input format `{path.suffix or '(no suffix)'}`",
                None,
                hint=f"give .npz arrays or an image ({', '.join(IMAGES)})",
            )
        count = len(next(iter(got.values())))
        names += [text] if count == 1 else [f"{text}[{i}]" for i in range(count)]
        for k, v in got.items():
            parts[k].append(v)
    return Batch(names, {k: np.concatenate(v) for k, v in parts.items()})


def _only(inputs: dict[str, tuple[Shape, str]], path: Path) -> str:
    if len(inputs) != 1:
        raise LbdlError(
            f"{path}: an image is one input, and the spec has {len(inputs)}: " + ", ".join(inputs),
            None,
            hint="give the inputs as arrays named as the spec's in an .npz file",
        )
    return next(iter(inputs))


def _npz(path: Path, inputs: dict[str, tuple[Shape, str]]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError) as exc:
        raise LbdlError(f"{path}: not a readable .npz file ({exc})", None) from None
    out: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in inputs.items():
        found = name if name in arrays else None
        if found is None and len(inputs) == 1:
            found = next((k for k in ("X", "x") if k in arrays), None)
            found = found or (next(iter(arrays)) if len(arrays) == 1 else None)
        if found is None:
            raise LbdlError(
                f"{path}: no array `{name}` for the spec's input {name}",
                None,
                hint=f"the file holds: {', '.join(sorted(arrays)) or 'nothing'}",
            )
        out[name] = _fit(arrays[found], shape, dtype, f"{path}: `{found}`", name)
    counts = {len(v) for v in out.values()}
    if len(counts) > 1:
        raise LbdlError(f"{path}: the inputs hold different numbers of samples", None)
    return out


def _fit(array: np.ndarray, shape: Shape, dtype: str, what: str, name: str) -> np.ndarray:
    """One sample or a batch of the input's shape, as a batch in its dtype."""
    if array.shape == shape:
        array = array[None]
    if array.shape[1:] != shape:
        raise LbdlError(
            f"{what} is {_text(array.shape)}; the spec's input {name} is {_text(shape)} per sample",
            None,
            hint=f"give one sample of {_text(shape)}, or a batch of N×{_text(shape)}",
        )
    if dtype == "int32" and not np.issubdtype(array.dtype, np.integer):
        raise LbdlError(f"{what} holds {array.dtype}; the input {name} takes integer tokens", None)
    return array.astype(dtype)


def _image(path: Path, shape: Shape, dtype: str) -> np.ndarray:
    """An image as the input ``shape`` (C×H×W with C 1 or 3, or H×W)."""
    if (
        dtype != "float32"
        or len(shape) not in (2, 3)
        or (len(shape) == 3 and shape[0] not in (1, 3))
    ):
        raise LbdlError(
            f"{path}: an image fits an input of C×H×W floats (C 1 or 3) or H×W; the spec's "
            f"is {_text(shape)} {dtype}",
            None,
            hint="give the input as an .npz array of its shape",
        )
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise LbdlError(
            "reading images needs Pillow", None, hint="pip install 'lbdl-dsl[data]'"
        ) from None
    try:
        with Image.open(path) as opened:
            grey = len(shape) == 2 or shape[0] == 1
            img = opened.convert("L" if grey else "RGB").resize(
                (shape[-1], shape[-2]), Image.Resampling.BILINEAR
            )
            pixels = np.asarray(img, np.float32) / 255.0
    except (OSError, UnidentifiedImageError) as exc:
        raise LbdlError(f"{path}: not a readable image ({exc})", None) from None
    if len(shape) == 2:
        return pixels
    return pixels[None] if grey else pixels.transpose(2, 0, 1)


def _text(shape: Shape) -> str:
    return "×".join(map(str, shape)) or "a scalar"


def labels(path: str | None, classes: int) -> list[str]:
    """The class names of ``--labels FILE`` (one a line), or ``class 0``... without one."""
    if path is None:
        return [f"class {i}" for i in range(classes)]
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would wait for a writer
            raise LbdlError(f"--labels {path}: not a regular file", None)
        names = [line.strip() for line in Path(path).read_text("utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise LbdlError(f"--labels {path}: not a readable text file ({exc})", None) from None
    names = [n for n in names if n]
    if len(names) != classes:
        raise LbdlError(
            f"--labels {path} names {len(names)} classes; the model scores {classes}",
            None,
            hint="one label a line, in the order of the output's classes",
        )
    return names


def top(probs: Any, k: int) -> list[list[tuple[int, float]]]:
    """The ``k`` likeliest classes of each row, likeliest first."""
    p = np.asarray(probs, np.float64)
    order = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    return [[(int(i), float(row[i])) for i in idx] for row, idx in zip(p, order, strict=True)]

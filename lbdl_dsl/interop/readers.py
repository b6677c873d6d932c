"""Reference checkpoints, read lazily: names and shapes first, each tensor when it is needed.

A map is checked against the spec from the names and shapes alone; a tensor is read only when
its parameter is written, so importing a checkpoint never holds much more than one ×N group's
parameter in memory. Formats: ``.safetensors`` (through safetensors' ``safe_open``, which reads
the header and maps each tensor on demand), Hugging Face's sharded checkpoints (a
``*.index.json`` naming the shard of each tensor, or a folder holding one), and PyTorch pickles
(``.pt``, ``.pth``, ``.bin``), which need torch, imported only for such a file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import LbdlError, os_error

TORCH_SUFFIXES = (".pt", ".pth", ".bin")
FOLDER_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclass
class Checkpoint:
    """Names → shapes of a checkpoint's tensors, and a reader of one tensor at a time."""

    path: Path
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    _read: Any = field(repr=False, default=None)
    _stack: ExitStack = field(repr=False, default_factory=ExitStack)

    def read(self, name: str) -> np.ndarray:
        """The tensor ``name`` as float32 (half and bfloat16 checkpoints are widened)."""
        array = np.asarray(self._read(name))
        return array.astype(np.float32, copy=False)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)


def open_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The checkpoint at ``path``: a file of one of the formats above, or a folder holding one."""
    path = Path(path)
    try:
        os.stat(path)
    except FileNotFoundError:
        raise LbdlError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:  # a symlink loop, a name too long
        if isinstance(exc, ValueError):
            raise LbdlError(f"{path!r}: not a file name") from None
        raise os_error(exc, "read", path) from None
    if path.is_dir():
        found = [path / f for f in FOLDER_FILES if (path / f).is_file()]
        if not found:
            raise LbdlError(
                f"{path}: no checkpoint in this folder",
                hint="give the weights file itself, or a folder with one of "
                + ", ".join(FOLDER_FILES),
            )
        path = found[0]
    if not path.is_file():
        raise LbdlError(f"{path}: no such file")
    name = path.name
    if name.endswith(".index.json"):
        return _sharded(path)
    if path.suffix == ".safetensors":
        return _safetensors([path], path)
    if path.suffix in TORCH_SUFFIXES:
        return _torch([path], path)
    raise LbdlError(
        f"{path}: unknown checkpoint format `{path.suffix or '(no suffix)'}`",
        hint="give a .safetensors file, a PyTorch .pt/.pth/.bin file, or a Hugging Face "
        "*.index.json or model folder",
    )


def _safetensors(files: list[Path], shown: Path) -> Checkpoint:
    from safetensors import SafetensorError, safe_open

    ckpt = Checkpoint(shown, {}, {})
    handles = {}
    try:
        for f in files:
            handle = ckpt._stack.enter_context(safe_open(str(f), framework="numpy"))
            for key in handle.keys():  # noqa: SIM118 - a safe_open handle is not a Mapping
                s = handle.get_slice(key)
                ckpt.shapes[key] = tuple(int(d) for d in s.get_shape())
                ckpt.dtypes[key] = str(s.get_dtype())
                handles[key] = handle
    except (OSError, SafetensorError, ValueError) as exc:
        ckpt.close()
        raise LbdlError(
            f"{shown}: not a readable safetensors file ({exc})",
            hint="was it downloaded completely?",
        ) from None
    ckpt._read = lambda key: handles[key].get_tensor(key)
    return ckpt


def _torch(files: list[Path], shown: Path) -> Checkpoint:
    try:
        import torch
    except ImportError:
        raise LbdlError(
            f"{shown}: reading a PyTorch checkpoint needs torch, which is not installed",
            hint="`pip install torch` (the CPU wheel is enough), or convert the file to "
            ".safetensors, which lbdl reads without it",
        ) from None
    tensors: dict[str, Any] = {}
    for f in files:
        try:
            # weights_only: a pickle's arbitrary code is never run, only tensors are read
            loaded = torch.load(str(f), map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a foreign file
            raise LbdlError(
                f"{f}: not a readable PyTorch checkpoint ({type(exc).__name__}: {exc})",
                hint="give a state_dict saved with torch.save, or a .safetensors file",
            ) from None
        if isinstance(loaded, dict) and isinstance(loaded.get("state_dict"), dict):
            loaded = loaded["state_dict"]
        if not isinstance(loaded, dict):
            raise LbdlError(
                f"{f}: holds a {type(loaded).__name__}, not a state_dict of tensors",
                hint="save `model.state_dict()` rather than the model object",
            )
        tensors |= {k: v for k, v in loaded.items() if isinstance(v, torch.Tensor)}
    ckpt = Checkpoint(
        shown,
        {k: tuple(v.shape) for k, v in tensors.items()},
        {k: str(v.dtype).removeprefix("torch.") for k, v in tensors.items()},
    )
    ckpt._read = lambda key: tensors[key].detach().to(torch.float32).numpy()
    return ckpt


def _sharded(index: Path) -> Checkpoint:
    try:
        weight_map = json.loads(index.read_text("utf-8"))["weight_map"]
        shards = sorted({index.parent / v for v in weight_map.values()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LbdlError(
            f"{index}: not a Hugging Face checkpoint index ({type(exc).__name__}: {exc})",
            hint="the index is the JSON file with a `weight_map` beside the shards",
        ) from None
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        raise LbdlError(
            f"{index}: {len(missing)} shard(s) missing beside the index: {', '.join(missing)}",
            hint="download every shard the index names",
        )
    if all(s.suffix == ".safetensors" for s in shards):
        return _safetensors(shards, index)
    return _torch(shards, index)

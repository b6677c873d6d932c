"""Parameters on disk: one flat table of arrays whose keys are the model's parameter paths.

Two containers, one convention. A file holds ``params/<path>`` for each trainable array and
``state/<path>`` for each state array (batchnorm's running averages), where ``<path>`` is the
key of the generated module's ``PARAMS``/``STATE`` table (``repeat_0/tlayer_0/ffw_0/w1``).
``.safetensors`` is the default, readable by any safetensors reader and loaded lazily;
``.npz`` is kept for files written before. Loading checks every path and shape against the
model before anything is handed back, and reports every difference at once.
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import ArgumentError, LbdlError, os_error
from lbdl_dsl.output import write_atomic

FORMATS = (".safetensors", ".npz")


def flatten(tree: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": x}}`` → ``{"a/b": x}``: the nested dictionaries of init, as paths."""
    out: dict[str, Any] = {}
    for k, v in (tree or {}).items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out |= flatten(v, f"{path}/")
        else:
            out[path] = v
    return out


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of `flatten`."""
    out: dict[str, Any] = {}
    for path, v in flat.items():
        *parents, leaf = path.split("/")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return out


def _path(path: Any, what: str = "path") -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(
            f"{what} must be a file name (str or os.PathLike), got {type(path).__name__}"
        )
    return Path(path)


def _format(path: Path) -> str:
    if path.suffix not in FORMATS:
        raise LbdlError(
            f"{path}: unknown weights format `{path.suffix or '(no suffix)'}`",
            None,
            hint="use a .safetensors file (or .npz)",
        )
    return path.suffix


def save(path: str | Path, params: Any, state: Any = None, cut: Cut | None = None) -> Path:
    """Write ``params`` (and ``state``) to ``path``, atomically; the suffix picks the format.
    With ``cut`` (`Model.cut`), copies kept apart are written stacked: the logical layout."""
    path = _path(path)
    fmt = _format(path)
    for name, tree in (("params", params), ("state", state)):
        if tree is not None and not isinstance(tree, Mapping):
            raise ArgumentError(
                f"{name} must be the nested dictionary init returns, got {type(tree).__name__}"
            )
    groups = [("params", flatten(params)), ("state", flatten(state))]
    flat = {
        f"{kind}/{k}": np.ascontiguousarray(v)
        for kind, arrays in groups
        for k, v in (stack_copies(arrays, cut) if cut else arrays).items()
    }
    if fmt == ".safetensors":
        data = safetensors_bytes(flat, METADATA)
    else:
        buffer = io.BytesIO()
        np.savez(buffer, **flat)  # type: ignore[arg-type]  # numpy's stub reads **kwds as allow_pickle
        data = buffer.getvalue()
    return write_atomic(path, data)


METADATA = {"format": "lbdl", "layout": "params/<path>, state/<path>"}

# NumPy's dtype names → safetensors' (bfloat16 and the float8 types come from ml_dtypes)
_ST_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
}  # fmt: skip


def safetensors_bytes(flat: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> bytes:
    """A safetensors file's bytes with its header in a fixed order (the metadata, then the
    tensors by name), so that the same arrays always give the same bytes: the reference
    writer keeps its metadata in a hash map, whose order changes from one process to the next.
    """
    header: dict[str, Any] = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    chunks, offset = [], 0
    for key in sorted(flat):
        array = np.ascontiguousarray(flat[key])
        dtype = _ST_DTYPES.get(array.dtype.name)
        if dtype is None:
            raise LbdlError(
                f"`{key}`: arrays of {array.dtype} cannot be saved",
                None,
                hint="parameters are real numbers: float32, bfloat16, ...",
            )
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[key] = {"dtype": dtype, "shape": list(array.shape),
                       "data_offsets": [offset, offset + len(raw)]}  # fmt: skip
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def read(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of a weights file, by key, as NumPy arrays."""
    path = _path(path)
    fmt = _format(path)
    from safetensors import SafetensorError

    hint = "was it written completely, and by lbdl (`model.save`, `lbdl train`)?"
    if fmt == ".npz":
        from lbdl_dsl.npzfile import load_npz

        return load_npz(path, str(path), hint)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise LbdlError(f"{path}: not a regular file", None, hint=hint)
        from safetensors.numpy import load_file

        return dict(load_file(str(path)))
    except FileNotFoundError:
        raise LbdlError(f"{path}: no such file") from None
    except (OSError, RuntimeError) as exc:  # a symlink loop, a folder, a file we may not read
        if isinstance(exc, OSError) and exc.errno is None:
            raise LbdlError(f"{path}: not a readable .safetensors weights file ({exc})") from None
        raise os_error(exc, "read", path) from None
    except (ValueError, SafetensorError, MemoryError) as exc:  # a truncated or foreign file
        raise LbdlError(
            f"{path}: not a readable {fmt} weights file ({exc})",
            None,
            hint="was it written completely, and by lbdl (`model.save`, `lbdl train`)?",
        ) from None


_LOW_FLOATS = ("bfloat16", "float8", "float4", "float6")  # ml_dtypes' floats, of kind "V"


def check_values(flat: Mapping[str, np.ndarray], path: Any, allow_nonfinite: bool) -> None:
    """Refuse arrays of a dtype that is not a real number, and (unless ``allow_nonfinite``)
    arrays holding NaN or infinity, naming each (at most 12)."""
    problems = []
    for key in sorted(flat):
        dtype = np.asarray(flat[key]).dtype
        if dtype.kind not in "fiub" and not dtype.name.startswith(_LOW_FLOATS):
            problems.append(f"`{key}` holds {dtype} values, not real numbers")
    if problems:
        raise LbdlError(
            f"{path}: the weights are not real numbers:\n  " + "\n  ".join(problems[:12]),
            None,
            hint="parameters are float32 (or bfloat16...): convert them before saving",
        )
    if allow_nonfinite:
        return
    for key in sorted(flat):
        array = np.asarray(flat[key])
        if array.dtype.kind in "iub":
            continue
        bad = int(np.count_nonzero(~np.isfinite(array.astype(np.float32, copy=False))))
        if bad:
            problems.append(f"`{key}`: {bad:,} of {array.size:,} values are NaN or infinite")
    if problems:
        more = [f"... and {len(problems) - 12} more"] if len(problems) > 12 else []
        raise LbdlError(
            f"{path}: the weights hold values that are not finite:\n  "
            + "\n  ".join(problems[:12] + more),
            None,
            hint="they came from a run that diverged, or a damaged file; "
            "`Model.load(path, allow_nonfinite=True)` reads them anyway",
        )


def split(flat: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(params, state) by path, from the keys of a file."""
    params = {k[len("params/") :]: v for k, v in flat.items() if k.startswith("params/")}
    state = {k[len("state/") :]: v for k, v in flat.items() if k.startswith("state/")}
    return params, state


Cut = dict[str, tuple[str, tuple[int, ...], tuple[int, ...]]]
"""A stored path → its array's path in the stacked view, its index there, the view's shape
(`Model.cut`, from `paths.cut`)."""


def cut_copies(
    flat: dict[str, Any], cut: Mapping[str, tuple[str, tuple[int, ...], Any]]
) -> dict[str, Any]:
    """``flat`` (arrays by path) with each copy kept apart cut from its stacked array, the
    stacked arrays dropped (a view's path can be a copy's, ``repeat_0/0/...``); ``flat``
    itself when it holds none of them. A stack too short for an index leaves that copy out,
    for the caller's check to report."""
    views = {view for view, _, _ in cut.values() if view in flat}
    if not views:
        return flat
    out = {k: v for k, v in flat.items() if k not in views}
    for p, (view, index, _) in cut.items():
        if view in views:
            whole = flat[view]
            if whole.ndim >= len(index) and all(i < n for i, n in zip(index, whole.shape)):
                out[p] = whole[index]
    return out


def stack_copies(
    flat: Mapping[str, Any], cut: Mapping[str, tuple[str, tuple[int, ...], Any]]
) -> dict[str, Any]:
    """``flat`` (arrays by path) in the logical layout: each copy kept apart put back into its
    stacked array, where its first copy was (the inverse of `cut_copies`). Weight files hold
    this layout, so that they do not change when the module keeps a group's copies apart."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        if path not in cut:
            out[path] = value
            continue
        view, index, shape = cut[path]
        if view not in out:
            out[view] = np.empty(tuple(int(d) for d in shape), np.asarray(value).dtype)
        out[view][index] = np.asarray(value)
    return out


def mismatches(
    got: Mapping[str, Any], want: Mapping[str, tuple[tuple[int, ...], Any, Any]], what: str
) -> list[str]:
    """Every difference between arrays read and a module's table, as lines to report."""
    lines = [f"missing {what} `{k}` {tuple(want[k][0])}" for k in sorted(set(want) - set(got))]
    lines += [f"unexpected {what} `{k}`" for k in sorted(set(got) - set(want))]
    for k in sorted(set(got) & set(want)):
        shape, expected = tuple(np.shape(got[k])), tuple(want[k][0])
        if shape != expected:
            lines.append(f"{what} `{k}` has shape {shape}, the model needs {expected}")
    return lines


def load_checked(
    path: str | Path,
    params_table: Mapping[str, Any],
    state_table: Mapping[str, Any],
    cut: Cut | None = None,
    allow_nonfinite: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Flat (params, state) from ``path``, refused unless they fit the tables exactly.

    ``cut`` (`Model.cut`: a stored path → its array in the stacked view and its index there)
    reads a file in the logical layout, every ×N group stacked, as `save` writes it whatever the
    module keeps apart: each copy is cut from its stacked array.

    Arrays that are not real numbers (complex, text, objects) are refused, and so, unless
    ``allow_nonfinite``, are NaN and infinite values: a model run with them gives NaN outputs
    that nothing downstream would question."""
    flat = read(path)
    check_values(flat, path, allow_nonfinite)
    params, state = split(flat)
    problems = mismatches(params, params_table, "parameter")
    problems += mismatches(state, state_table, "state array")
    if problems and cut:  # the logical layout (`save`'s): each copy cut from its stack
        params_cut, state_cut = cut_copies(params, cut), cut_copies(state, cut)
        again = mismatches(params_cut, params_table, "parameter")
        again += mismatches(state_cut, state_table, "state array")
        views = {view for view, _, _ in cut.values()}
        if not again or views & (set(params) | set(state)):  # a logical file: its problems
            params, state, problems = params_cut, state_cut, again
    if problems:
        more = [f"... and {len(problems) - 12} more"] if len(problems) > 12 else []
        raise LbdlError(
            f"{path}: the weights do not fit this model:\n  " + "\n  ".join(problems[:12] + more),
            None,
            hint="was it saved from another spec, or with other --set values?",
        )
    return params, state

"""The weights of a decoding module laid out as its products read them fastest.

`Decoder.split` already copies each layer's weights out of their stack, once per parameters
given (a slice of a stack is a copy on XLA:CPU at every step otherwise). It lays those copies
out for the products the module makes, at no cost in memory:

- **rows**: a (Din, Dout) weight stored transposed, (Dout, Din), and multiplied as w · xᵀ
  (`dense_rows`). On this 2-core CPU, XLA's products of GPT-2 small's sizes ran about 10 %
  faster so for a prompt's 128 rows (768 → 3,072 outputs: 245 → 266 GFLOP/s);
- **fused**: an attention's query, key and value weights side by side, one product in place of
  three (768 → 2,304 outputs ran at about 250 GFLOP/s, 768 → 768 at about 225).

Each lowering declares the layout its runtime function reads (`LAYOUTS` beside `DECODE` in
`lowering/`); the runtime function reads the laid-out weight where it is given and the plain one
otherwise, so a decoding module runs on parameters as `init` makes them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jax.numpy as jnp

from lbdl_dsl.backends.jax.emit import ROWS, Fused, Layout
from lbdl_dsl.compiler.instance import LayerInst
from lbdl_dsl.compiler.paths import Array


def layouts(arrays: Iterable[Array], table: Mapping[str, Layout]) -> dict[str, Layout]:
    """The layout of each box (by its path) whose lowering declares one in ``table``."""
    out: dict[str, Layout] = {}
    for a in arrays:
        owner = a.owner
        if a.trainable and "/" in a.path and isinstance(owner, LayerInst):
            layout = table.get(owner.node.op)
            if layout is not None:
                out[a.path.rsplit("/", 1)[0]] = layout
    return out


def prepare(flat: dict[str, Any], boxes: Mapping[str, Layout]) -> dict[str, Any]:
    """Parameters by path (a value per layer as a list, `Decoder.split`) laid out per box."""
    out = dict(flat)
    for box, layout in boxes.items():
        if layout.fused is not None:
            _fuse(out, box, layout.fused)
        for name in layout.rows:
            key = f"{box}/{name}"
            if key in out and _plain(out[key]):
                layers, value = _layers(out.pop(key))
                out[key + ROWS] = _back([w.T for w in value], layers)
    return out


def _layers(value: Any) -> tuple[bool, list[Any]]:
    """A value as a list of its layers' arrays (one for an array alone), and whether it was
    a list."""
    return (True, value) if isinstance(value, list) else (False, [value])


def _back(arrays: list[Any], layers: bool) -> Any:
    return arrays if layers else arrays[0]


def _plain(value: Any) -> bool:
    """A 2-D weight, or a list of them (one per layer): nothing stacked is laid out."""
    return bool(_layers(value)[1][0].ndim == 2)


def _fuse(out: dict[str, Any], box: str, f: Fused) -> None:
    """The weights of ``f`` side by side, transposed, where each is there and 2-D and the
    last two are as wide as each other (a key as wide as a value: the runtime splits the
    product by the heads it knows); their biases side by side, a zero for one left out."""
    keys = [f"{box}/{w}" for w in f.weights]
    if not all(k in out and _plain(out[k]) for k in keys):
        return
    layers, _ = _layers(out[keys[0]])
    ws = [_layers(out[k])[1] for k in keys]  # per weight, per layer
    first = [w[0] for w in ws]
    if len({w.shape[0] for w in first}) != 1 or first[-1].shape[1] != first[-2].shape[1]:
        return
    each = list(zip(*ws, strict=True))  # per layer, per weight
    out[f"{box}/{f.into}{ROWS}"] = _back([jnp.concatenate(g, axis=1).T for g in each], layers)
    bkeys = [f"{box}/{b}" for b in f.biases]
    if any(k in out for k in bkeys):
        bs = [
            _layers(out[k])[1] if k in out else [jnp.zeros(w.shape[1], w.dtype) for w in per]
            for k, per in zip(bkeys, ws, strict=True)
        ]
        joined = [jnp.concatenate(g) for g in zip(*bs, strict=True)]
        out[f"{box}/b{f.into[1:]}"] = _back(joined, layers)
    for k in keys + bkeys:
        out.pop(k, None)

"""Lowerings of the layers that move, pick and combine values: plain array expressions."""

from __future__ import annotations

from typing import Any

from lbdl_dsl.backends.jax.emit import Emit, Lowering


def _dims(values: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in values)


def reshape(e: Emit) -> str:
    return f"{e.x[0]}.reshape({e.x[0]}.shape[0], {_dims(e.a.to)})"


def _index(e: Emit, axis: int, item: Any) -> str:
    return f"{e.x[0]}[{', '.join([':'] * (axis + 1) + [str(item)])}]"


def matmul(e: Emit) -> str:
    other = f"{e.x[1]}.swapaxes(-1, -2)" if e.a.tb else e.x[1]
    return f"{e.x[0]} @ {other}"


def _operands(e: Emit) -> list[str]:
    """The operands of `+`/`mul`, each with the axes it lacks inserted after the batch axis:
    per-sample shapes broadcast on their trailing axes, and the batch axis must stay first
    (``v[:, None]`` turns a batch of 8-vectors into B×1×8 against B×4×8)."""
    return [f"{x}[:, {', '.join(['None'] * pad)}]" if pad else x for x, pad in zip(e.x, e.a.pads)]


def pad(e: Emit) -> str:
    widths = "((0, 0), " + ", ".join(f"({b}, {a})" for b, a in e.a.widths) + ")"
    if e.a.mode == "constant":
        return f"jnp.pad({e.x[0]}, {widths}, constant_values={e.a.value!r})"
    return f'jnp.pad({e.x[0]}, {widths}, mode="{e.a.mode}")'


def cast(e: Emit) -> str:
    to = {"float": "COMPUTE", "int": "jnp.int32", "bool": "bool"}[e.a.to]
    return f"{e.x[0]} != 0" if e.a.to == "bool" else f"{e.x[0]}.astype({to})"


def sample(e: Emit) -> str:
    return e.call("reparameterize", e.x[0], e.x[1], train=e.train, key=e.key())


LOWER: dict[str, Lowering] = {
    "reshape": reshape,
    "flatten": reshape,
    "transpose": lambda e: f"{e.x[0]}.transpose(0, {_dims(tuple(i + 1 for i in e.a.perm))})",
    "take": lambda e: _index(e, e.a.axis, e.a.index),
    "slice": lambda e: _index(e, e.a.axis, f"{e.a.start}:{e.a.stop}"),
    "split": lambda e: _index(e, e.a.axis, f"{e.a.start}:{e.a.stop}"),
    "+": lambda e: " + ".join(_operands(e)),
    "mul": lambda e: " * ".join(_operands(e)),
    "concat": lambda e: f"jnp.concatenate([{', '.join(e.x)}], axis={e.a.axis + 1})",
    "matmul": matmul,
    "cast": cast,
    "pad": pad,
    "mean": lambda e: f"{e.x[0]}.mean(axis={e.a.axis + 1})",
    "l2norm": lambda e: e.call("l2_normalize", e.x[0]),
    "sample": sample,
}

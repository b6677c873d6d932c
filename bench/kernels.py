"""Why XLA:CPU compiles the unrolled peers about as fast as our loops: it compiles each distinct
kernel once.

``python bench/kernels.py [--quick]`` compiles the forward pass and the training step of
`run.py`'s two cases on both sides and counts, in XLA's optimised HLO, the fused kernels and
the distinct ones (the same body over the same shapes, whatever the names). Then it times two
small programs that differ only in that: forty matrix products followed by the same
elementwise kernel, once with forty equal shapes and once with forty different ones.

Flax's identical blocks lower to identical kernels, compiled once; the copies of a ×N group
compile once too, as one loop body, but every read of a stacked parameter (a dynamic slice in
the loop, a static one when unrolled) is a kernel of its own shape. The tables say how many.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from bench import run  # noqa: E402

_FUSED = re.compile(r"^%?(\S*fus\S*) \(.*\{$")
_NAME = re.compile(r"%[\w.\-]+")


def kernels(hlo: str) -> tuple[int, int]:
    """(fused kernels, distinct ones) in optimised HLO text: bodies equal up to names."""
    bodies: list[str] = []
    body: list[str] | None = None
    for line in hlo.splitlines():
        head = _FUSED.match(line)
        if head:
            body = [re.sub(r"\w+(?=:)", "p", head.group(0).split(" ", 1)[1])]
        elif body is not None and line.strip() == "}":
            bodies.append("\n".join(body))
            body = None
        elif body is not None:
            body.append(_NAME.sub("%", line.split(", metadata=")[0]).strip())
    return len(bodies), len(set(bodies))


def count(fn: Callable[..., Any], args: tuple) -> tuple[int, int, float]:
    """Kernels, distinct kernels, and XLA's seconds (the best of two) for ``fn``."""
    seconds = []
    for _ in range(2):
        lowered = jax.jit(lambda *a: fn(*a)).lower(*args)  # a fresh function: no cached result
        start = time.perf_counter()
        compiled = lowered.compile()
        seconds.append(time.perf_counter() - start)
    return (*kernels(compiled.as_text()), min(seconds))


def chain(widths: Sequence[int]) -> float:
    """XLA's seconds (median of three) for products and elementwise kernels of these widths."""

    def fn(ws: list[jax.Array], x: jax.Array) -> jax.Array:
        for w in ws:
            x = (jnp.tanh(x @ w) * 1.5 + 0.1)[:, :64]
        return x

    ws = [jax.ShapeDtypeStruct((64, n), jnp.float32) for n in widths]
    x = jax.ShapeDtypeStruct((32, 64), jnp.float32)
    samples = []
    for _ in range(3):
        lowered = jax.jit(lambda w, v: fn(w, v)).lower(ws, x)
        start = time.perf_counter()
        lowered.compile()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="run.py's tiny models")
    args = parser.parse_args(argv)
    lines = [
        "| model | function | kernels (ours / Flax) | distinct | XLA compile, s |",
        "|---|---|---|---|---|",
    ]
    for case in run.cases(args.quick):
        peer = run.peer_side(case)
        ours = run.our_side(case, peer)
        for what in ("forward", "train"):
            a, b = count(*ours.of(what)), count(*peer.of(what))
            lines.append(
                f"| {case.name} | {what} | {a[0]} / {b[0]} | {a[1]} / {b[1]} "
                f"| {a[2]:.2f} / {b[2]:.2f} |"
            )
    same, different = chain([128] * 40), chain([128 + 8 * i for i in range(40)])
    lines += [
        "",
        f"40 products and elementwise kernels, one shape: {same:.3f} s to compile; "
        f"40 shapes: {different:.3f} s ({different / same:.0f}×).",
    ]
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()

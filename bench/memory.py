"""Peak memory of one training step, lbdl against the hand-written Flax peers (issue 19).

``python bench/memory.py [--quick]`` compiles the training steps that ``bench/run.py`` times
(ResNet-50 at 224×224, batch 8; GPT-2 small at T=128, batch 4; the same optimiser, loss and
data on both sides) and prints what XLA's ``compiled.memory_analysis()`` says each needs, as a
Markdown table. Nothing runs: the figures are XLA's plan for the step, so unlike the timings
they do not move with the machine's load.

The total is arguments + outputs − the outputs that reuse an argument's buffer (donation; none
here) + temporaries: everything the step holds at once at worst. XLA:CPU's own
``peak_memory_in_bytes`` is not used: on jaxlib 0.10 it equals arguments + outputs, leaving the
temporaries (the activations the backward pass keeps) out.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from bench import run  # noqa: E402

FIELDS = ("argument", "output", "temp", "total")


def analysed(fn: Any, args: tuple) -> dict[str, int]:
    """XLA's memory plan of ``fn(*args)``, jitted, in bytes."""
    return planned(jax.jit(fn).lower(*args).compile())


def planned(compiled: Any) -> dict[str, int]:
    """XLA's memory plan of a compiled program, in bytes."""
    stats = compiled.memory_analysis()
    argument = int(stats.argument_size_in_bytes)
    output = int(stats.output_size_in_bytes)
    temp = int(stats.temp_size_in_bytes)
    total = argument + output - int(stats.alias_size_in_bytes) + temp
    return {"argument": argument, "output": output, "temp": temp, "total": total}


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def rows(quick: bool) -> list[str]:
    """One table row per model and field: ours, Flax's, their ratio."""
    out = []
    for case in run.cases(quick):
        peer = run.peer_side(case)
        ours = run.our_side(case, peer)
        a = analysed(*ours.of("train"))
        b = analysed(*peer.of("train"))
        for f in FIELDS:
            ratio = a[f] / b[f] if b[f] else float("nan")
            out.append(f"| {case.name} | {f} (MiB) | {mib(a[f])} | {mib(b[f])} | {ratio:.3f} |")
    return out


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny models of run.py --quick")
    args = parser.parse_args(argv)
    table = ["| model | training step | ours | Flax | ratio |", "|---|---|---:|---:|---:|"]
    table += rows(args.quick)
    print("\n".join(table))
    return table


if __name__ == "__main__":
    main()

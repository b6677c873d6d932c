"""Where one steady training step spends its time, ours against the Flax peer's, by XLA:CPU's
own trace of the kernels it ran.

``python bench/step_profile.py [--case gpt|resnet50] [--quick] [--steps 3]`` builds
`run.py`'s two sides of one case, compiles both training steps, warms them up, then runs each
``--steps`` times under ``jax.profiler.trace`` and adds up the time of every kernel (a "thunk"
of XLA:CPU's runtime: a fused loop, a YNNPACK product, a loop's control) by what it does:

* **products**: matrix products and convolutions (YNNPACK's, XLA's own, oneDNN's);
* **reductions**: the sums and maxima YNNPACK runs (norms' statistics, bias gradients);
* **stack reads** and **stack writes**: the dynamic slices and dynamic-update-slices with
  which a loop reads each copy's parameters and saved values out of their stacks and writes
  its gradients and saved values into them;
* **fills**: broadcasts, most of them the zeros a loop's stacked outputs start from;
* **copies and transposes**: layout changes, operands made contiguous for a product;
* **loop control**: the ``while`` itself;
* **elementwise and the rest**: activations, norms, softmax, the loss, the optimiser.

It prints a table of milliseconds per step, and the step's wall time, CPU time (user and
system) and minor page faults per step, from ``getrusage``. Kernels overlap on a machine with
several cores, so the categories add up to more than the wall time; their differences are what
the table is for. Run it with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` in the environment to
see the page faults (and the system time) that transparent huge pages save both sides.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402

from bench import run  # noqa: E402

CATEGORIES = (
    "products",
    "reductions",
    "stack reads",
    "stack writes",
    "fills",
    "copies and transposes",
    "loop control",
    "elementwise and the rest",
)
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = .*? ([a-z][\w\-]*)\(")
_CALLS = re.compile(r"calls=%([\w.\-]+)")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{$")


def instructions(hlo: str) -> dict[str, str]:
    """Each instruction of the optimised HLO text, by name: its category (`CATEGORIES`).

    A fusion's category comes from its name, which XLA builds from the operations it fuses
    (``dynamic-slice_bitcast_fusion``, ``wrapped_broadcast``), and for YNNPACK's fusions from
    the body: a product if it holds a ``dot`` or a ``convolution``, else a reduction.
    """
    bodies: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in hlo.splitlines():
        head = _COMPUTATION.match(line)
        if head:
            current = bodies.setdefault(head.group(1), [])
        elif line.startswith("}"):
            current = None
        elif current is not None:
            current.append(line)
    out: dict[str, str] = {}
    for body in bodies.values():
        for line in body:
            m = _INSTRUCTION.match(line)
            if m:
                called = _CALLS.search(line)
                fused = bodies.get(called.group(1)) if called else None
                out[m.group(1)] = category(m.group(1), m.group(2), fused)
    return out


def category(name: str, opcode: str, body: list[str] | None) -> str:
    """One instruction's category, from its name, its opcode and a fusion's body."""
    if name.startswith("ynn_fusion") or name.startswith("xnn_fusion"):
        text = "\n".join(body or ())
        return "products" if (" dot(" in text or " convolution(" in text) else "reductions"
    if opcode in ("dot", "convolution", "custom-call") or name.startswith(("dot", "convolution")):
        return "products"
    if "dynamic-update-slice" in name:
        return "stack writes"
    if "dynamic-slice" in name:
        return "stack reads"
    if opcode == "while":
        return "loop control"
    if name.startswith("wrapped_broadcast") or opcode == "broadcast":
        return "fills"
    if name.startswith(("copy", "transpose")) or opcode in ("copy", "transpose"):
        return "copies and transposes"
    return "elementwise and the rest"


@dataclass
class Profile:
    """One side's step: milliseconds per category, and the process's costs per step."""

    ms: dict[str, float]
    wall: float
    user: float
    system: float
    faults: float


def profile(fn: Callable[..., Any], args: tuple, steps: int) -> Profile:
    """``fn``'s steady step: compiled, warmed up twice, then ``steps`` runs traced."""
    executable = jax.jit(fn).lower(*args).compile()
    kinds = instructions(executable.as_text())
    for _ in range(2):
        jax.block_until_ready(executable(*args))
    with tempfile.TemporaryDirectory() as folder:
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            for _ in range(steps):
                jax.block_until_ready(executable(*args))
            wall = time.perf_counter() - start  # before the trace is written out
            after = resource.getrusage(resource.RUSAGE_SELF)
        traces = sorted(Path(folder).rglob("perfetto_trace.json.gz"))
        if not traces:
            raise RuntimeError("jax.profiler wrote no perfetto trace")
        events = json.loads(gzip.decompress(traces[-1].read_bytes()))
    ms: Counter[str] = Counter()
    for event in events["traceEvents"] if isinstance(events, dict) else events:
        kind = kinds.get(event.get("name", "")) if event.get("ph") == "X" else None
        if kind is not None:
            ms[kind] += event["dur"] / 1000 / steps
    return Profile(
        {c: ms[c] for c in CATEGORIES},
        wall / steps,
        (after.ru_utime - before.ru_utime) / steps,
        (after.ru_stime - before.ru_stime) / steps,
        (after.ru_minflt - before.ru_minflt) / steps,
    )


def table(name: str, ours: Profile, peer: Profile) -> str:
    """Markdown: each category's milliseconds per step on both sides, then the process's."""
    lines = [
        f"{name}: one training step, milliseconds of kernels by what they do",
        "",
        "| kernels | ours (ms) | Flax (ms) | ours − Flax (ms) |",
        "|---|---:|---:|---:|",
    ]
    sums = [(c, ours.ms[c], peer.ms[c]) for c in CATEGORIES]
    sums.append(("all kernels", sum(ours.ms.values()), sum(peer.ms.values())))
    for label, a, b in sums:
        lines.append(f"| {label} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
    lines.append("")
    lines.append("| per step | ours | Flax |")
    lines.append("|---|---:|---:|")
    for label, attr, fmt in (
        ("wall time, traced (s)", "wall", "{:.3f}"),
        ("user CPU (s)", "user", "{:.3f}"),
        ("system CPU (s)", "system", "{:.3f}"),
        ("minor page faults", "faults", "{:,.0f}"),
    ):
        a, b = getattr(ours, attr), getattr(peer, attr)
        lines.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("gpt", "resnet50"), default="gpt")
    parser.add_argument("--quick", action="store_true", help="run.py's tiny models")
    parser.add_argument("--steps", type=int, default=3, help="traced steps per side (3)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    case = next(c for c in run.cases(args.quick) if c.kind == args.case)
    peer = run.peer_side(case)
    ours = run.our_side(case, peer)
    theirs = profile(*peer.of("train"), args.steps)
    mine = profile(*ours.of("train"), args.steps)
    text = table(case.name, mine, theirs)
    print(text)
    return text


if __name__ == "__main__":
    main()

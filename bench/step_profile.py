"""Where one steady training step spends its time, ours against the Flax peer's, by XLA:CPU's
own trace of the kernels it ran.

``python bench/step_profile.py [--case gpt|resnet50] [--quick] [--steps 3] [--warmup 2]
[--donate] [--side both|ours|peer]`` builds `run.py`'s two sides of one case, compiles both
training steps (or one side's, ``--side``), runs each ``--warmup`` times, then ``--steps``
times under ``jax.profiler.trace`` (with ``--donate``, each step updating its state in place,
as `lbdl train` runs it) and adds up the time of every kernel (a "thunk" of XLA:CPU's
runtime: a fused loop, a YNNPACK product, a loop's control) by what it does:

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
`bench/allocator.py`'s ``KEPT`` tunables (glibc keeps freed memory for the next step) remove
faults only where the heap's free blocks happen to fit what the step asks for next: with them,
``--donate`` and one ``--side`` per process, ours took 112,000 to 168,000 faults per step
after two warm-up steps (``--warmup``) and 56,000 after six, the peer's none after two and
115,000 after six.
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


def profile(
    fn: Callable[..., Any], args: tuple, steps: int, donate: bool = False, warmup: int = 2
) -> Profile:
    """``fn``'s steady step: compiled, run ``warmup`` times, then ``steps`` runs traced.

    Both sides' training steps take their state first and the batch last (``x, y``) and return
    the new state before the loss. With ``donate`` the state's buffers are given to the step,
    as `lbdl train` gives them, and each step runs on the state the previous one returned.
    """
    held = len(args) - 2
    if donate:  # the caller's arrays stay alive: the steps consume copies
        args = (*jax.tree.map(lambda a: a.copy(), args[:held]), *args[held:])
    executable = (
        jax.jit(fn, donate_argnums=tuple(range(held)) if donate else ()).lower(*args).compile()
    )
    kinds = instructions(executable.as_text())

    def step() -> None:
        nonlocal args
        out = jax.block_until_ready(executable(*args))
        if donate:
            args = (*out[:held], *args[held:])

    for _ in range(warmup):
        step()
    with tempfile.TemporaryDirectory() as folder:
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            for _ in range(steps):
                step()
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


def table(name: str, sides: dict[str, Profile]) -> str:
    """Markdown: each category's milliseconds per step on each side (and the difference when
    there are both), then the process's costs per step."""
    names = list(sides)
    both = names == ["ours", "Flax"]
    head = " | ".join(f"{n} (ms)" for n in names) + (" | ours − Flax (ms)" if both else "")
    lines = [
        f"{name}: one training step, milliseconds of kernels by what they do",
        "",
        f"| kernels | {head} |",
        "|---|" + "---:|" * (len(names) + both),
    ]
    rows = [(c, [sides[n].ms[c] for n in names]) for c in CATEGORIES]
    rows.append(("all kernels", [sum(sides[n].ms.values()) for n in names]))
    for label, values in rows:
        cells = [f"{v:.1f}" for v in values] + ([f"{values[0] - values[1]:+.1f}"] if both else [])
        lines.append(f"| {label} | {' | '.join(cells)} |")
    lines.append("")
    lines.append("| per step | " + " | ".join(names) + " |")
    lines.append("|---|" + "---:|" * len(names))
    for label, attr, fmt in (
        ("wall time, traced (s)", "wall", "{:.3f}"),
        ("user CPU (s)", "user", "{:.3f}"),
        ("system CPU (s)", "system", "{:.3f}"),
        ("minor page faults", "faults", "{:,.0f}"),
    ):
        cells = [fmt.format(getattr(sides[n], attr)) for n in names]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("gpt", "resnet50"), default="gpt")
    parser.add_argument("--quick", action="store_true", help="run.py's tiny models")
    parser.add_argument("--steps", type=int, default=3, help="traced steps per side (3)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them (2)")
    parser.add_argument(
        "--donate", action="store_true", help="both steps update their state in place"
    )
    parser.add_argument(
        "--side",
        choices=("both", "ours", "peer"),
        default="both",
        help="profile one side only, in a process that holds one model as a user's does",
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    case = next(c for c in run.cases(args.quick) if c.kind == args.case)
    peer: run.Side | None = run.peer_side(case)
    ours = run.our_side(case, peer) if args.side != "peer" else None
    if args.side == "ours":
        peer = None  # its arrays go: this process holds one model, as a user's does
    profiles = {}
    for name, side in (("Flax", peer), ("ours", ours)):  # the peer first
        if side is not None:
            profiles[name] = profile(*side.of("train"), args.steps, args.donate, args.warmup)
    profiles = {n: profiles[n] for n in ("ours", "Flax") if n in profiles}
    text = table(case.name, profiles)
    print(text)
    return text


if __name__ == "__main__":
    main()

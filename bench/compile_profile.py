"""Where XLA:CPU spends a training step's compile time, ours against the Flax peer's, by XLA's
own timers: its HLO passes, then every kernel it generates code for.

``python bench/compile_profile.py [--case gpt|resnet50] [--blocks 1 12] [--side both|ours|peer]
[--quick] [--out MD]`` compiles each side's training step (`run.py`'s, from shapes alone) in a fresh
process whose XLA logs its compile timers (``TF_CPP_VMODULE``, set before JAX starts), and
reads them back:

* **HLO passes**: XLA's optimisation of the whole program (fusion, layout, simplification),
  which grows with the program's size: an unrolled model pays it for every copy;
* **kernels**: each kernel XLA:CPU generates code for (MLIR's fusion emitters, then LLVM's
  machine code), with the CPU time each took, sorted by `step_profile.category` (the same
  categories as the step's run time). Identical kernels are generated once, so this part
  follows the number of *distinct* kernels, and a kernel that only copies or fills costs
  about as much to generate as one that computes (tens of milliseconds on the machine of
  docs/performance.md);
* **backend**: XLA's code generation as a whole, wall time (the kernels are generated on a
  thread pool, so their CPU times add up to more).

It prints a Markdown table; ``--out`` also writes it, with the command and the machine, to a
file (docs/performance-compile.md is one such run).

Why: the compile rows of docs/performance.md ask whether a loop's compile grows less than an
unrolled model's. The table says which kernels a ×N group adds and what each costs to
generate, and where the unrolled peer pays instead. ResNet-50 has no depth to vary
(``--blocks`` is GPT's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import step_profile  # noqa: E402

PROGRAM = "jit_profiled_step"  # the child's jitted function, as XLA names the module
LOGGING = {
    "TF_CPP_MIN_LOG_LEVEL": "0",
    "TF_CPP_VMODULE": "cpu_compiler=1,ir_compiler=1,fusion_compiler=1",
}
_TIMED = re.compile(r"time: [^(]*\((\d+) us\)")
_KERNEL = re.compile(r"Compiled (LLVM|MLIR) module: (\S+) time:")


@dataclass
class Compile:
    """One side's compile of one program, from XLA's log: milliseconds."""

    passes: float  # XLA's HLO passes
    backend: float  # code generation, wall
    kernels: dict[str, float]  # kernel name: CPU time generating it (MLIR and LLVM)
    wall: float = 0.0  # seconds, the whole `compile()` as the child timed it

    def by_category(self) -> dict[str, tuple[float, int]]:
        """Each of `step_profile.CATEGORIES`: (milliseconds, kernels)."""
        ms: Counter[str] = Counter()
        count: Counter[str] = Counter()
        for name, t in self.kernels.items():
            kind = step_profile.category(name, "", None)
            ms[kind] += t
            count[kind] += 1
        return {c: (ms[c], count[c]) for c in step_profile.CATEGORIES}


def kernel_name(module: str) -> str:
    """A kernel's name as the optimised HLO has it, from its LLVM or MLIR module's name
    (``__compute_module_wrapped_broadcast.2_kernel_module`` is ``wrapped_broadcast.2``)."""
    name = module
    while name.startswith("__compute_module_"):
        name = name[len("__compute_module_") :]
    return name.removesuffix("_kernel_module")


def parse(log: str, program: str = PROGRAM) -> Compile:
    """`Compile` of ``program`` from the log of a process that compiled it (other programs,
    such as the small ones JAX compiles for itself, are left out)."""
    passes = backend = 0.0
    kernels: Counter[str] = Counter()
    inside = False
    for line in log.splitlines():
        if f"Compiling: {program}" in line:
            inside = True
            continue
        timed = _TIMED.search(line)
        if f"Running HLO passes on [{program}]" in line and timed:
            passes = int(timed.group(1)) / 1000
        elif f"Compiling [{program}]" in line and timed:
            backend = int(timed.group(1)) / 1000
            inside = False
        elif inside and timed:
            kernel = _KERNEL.search(line)
            if kernel:
                kernels[kernel_name(kernel.group(2))] += int(timed.group(1)) / 1000
    if not backend:
        raise RuntimeError(f"no compile timers for {program} in the log: XLA logged nothing")
    return Compile(passes, backend, dict(kernels))


def child(case: str, side: str, blocks: int, quick: bool) -> None:
    """Compile one side's training step from shapes and print the seconds it took (JSON).
    Runs in the process whose XLA logs its timers."""
    import jax

    from bench import run

    base = next(c for c in run.cases(quick) if c.kind == case)
    chosen = run.growth_case(blocks, quick) if case == "gpt" else base
    ours, peer = run.abstract_sides(chosen)
    fn, args = (ours if side == "ours" else peer).of("train")

    def profiled_step(*a: object) -> object:
        return fn(*a)

    lowered = jax.jit(profiled_step).lower(*args)
    start = time.perf_counter()
    lowered.compile()
    print(json.dumps({"wall": time.perf_counter() - start}))


def measure(case: str, side: str, blocks: int, quick: bool) -> Compile:
    """`child` in a fresh process with XLA's timers logged; its `Compile`."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--case", case]
    cmd += ["--blocks", str(blocks)] + (["--quick"] if quick else [])
    env = {**os.environ, **LOGGING}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {side} compile failed:\n{done.stderr[-3000:]}")
    result = parse(done.stderr)
    result.wall = json.loads(done.stdout.strip().splitlines()[-1])["wall"]
    return result


def table(title: str, runs: dict[str, Compile]) -> str:
    """Markdown: each category's milliseconds of code generation and its kernels, per run."""
    names = list(runs)
    lines = [
        f"{title}: the training step's compile, by XLA's timers",
        "",
        "| part | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    parts = {n: r.by_category() for n, r in runs.items()}
    for c in step_profile.CATEGORIES:
        if not any(parts[n][c][1] for n in names):
            continue  # products and reductions are library calls: no code is generated
        cells = [f"{parts[n][c][0]:.0f} ms ({parts[n][c][1]})" for n in names]
        lines.append(f"| kernels: {c} | {' | '.join(cells)} |")
    totals = [f"{sum(r.kernels.values()):.0f} ms ({len(r.kernels)})" for r in runs.values()]
    lines.append(f"| kernels, all (CPU) | {' | '.join(totals)} |")
    for label, cell in (
        ("HLO passes", lambda r: f"{r.passes:.0f} ms"),
        ("code generation (wall)", lambda r: f"{r.backend:.0f} ms"),
        ("compile (wall)", lambda r: f"{r.wall:.2f} s"),
    ):
        lines.append(f"| {label} | {' | '.join(cell(runs[n]) for n in names)} |")
    lines.append("")
    lines.append(
        "Kernels: CPU milliseconds generating them (MLIR's emitters and LLVM, on XLA's "
        "thread pool), and how many in brackets."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=("gpt", "resnet50"), default="gpt")
    parser.add_argument("--quick", action="store_true", help="run.py's tiny models")
    parser.add_argument(
        "--blocks", type=int, nargs="+", default=[1, 12], help="GPT's depths (1 12)"
    )
    parser.add_argument("--side", choices=("both", "ours", "peer"), default="both")
    parser.add_argument("--out", type=Path, help="also write the table, with the machine, here")
    parser.add_argument("--child", choices=("ours", "peer"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if any(b < 1 for b in args.blocks):
        parser.error("--blocks must be at least 1")
    if args.child:
        child(args.case, args.child, args.blocks[0], args.quick)
        return ""
    gpt = args.case == "gpt"
    sides = ("ours", "peer") if args.side == "both" else (args.side,)
    runs = {}
    for side in sides:
        for b in args.blocks if gpt else [1]:  # ResNet-50 has no depth to vary
            depth = f", {b} block{'s' * (b != 1)}" if gpt else ""
            runs[("ours" if side == "ours" else "Flax") + depth] = measure(
                args.case, side, b, args.quick
            )
    text = table("GPT" if gpt else "ResNet-50", runs)
    print(text)
    if args.out:
        write(
            args.out,
            text,
            ["python bench/compile_profile.py", *(sys.argv[1:] if argv is None else argv)],
        )
    return text


def write(out: Path, text: str, command: list[str]) -> None:
    """The table as a report of its own: what wrote it, and on what machine."""
    from bench import run

    head = [
        "# Where a training step's compile goes: lbdl against hand-written Flax",
        "",
        f"Written by `{' '.join(command)}`; docs/performance.md says what it shows.",
        "",
    ]
    tail = ["", "## Machine", "", *run.machine(), ""]
    out.write_text("\n".join([*head, text, *tail]), encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""How the checker scales: a whole ``--check`` process, GPT-3 without allocating it, and ×N.

Run ``python bench/check_scale.py`` from the repository root. It prints Markdown tables:

1. whole processes, as a user waits for them (interpreter start, imports, parse, build, check,
   summary, and for the main job the figure and the module): ``lbdl-compile --check`` of
   ResNet-50 (target 0.25 s) and of GPT-3's 96 blocks (1 s), and ``lbdl-compile
   specs/resnet50.lbdl -o DIR`` as ``make demo`` runs it (1.5 s). Each is run ``--repeats``
   times after one warm-up run; wall time and CPU time (user + system, of the process and the
   programs it runs: Graphviz, ruff) are given as best and median. ``--against DIR`` times
   the same commands from another checkout (main before a change, say) in turn with these,
   one run of each after the other, so that both see the same load;
2. the check of specs/gpt3.lbdl: about 175 billion parameters, counted symbolically, so the
   check takes milliseconds and a few megabytes where the parameters would take 700 GB;
3. the checker alone on GPT-3 with N = 12, 96 and 960 layers (``--set N=...``): time, peak
   memory (tracemalloc) and the number of instances in the checked tree. A ×N group whose
   copies see the same shape is checked once, so none of the three grows with N;
4. a spec of about 190,000 boxes within the limits (``big_spec``: a flat chain of cheap boxes
   and calls of many distinct blocks), stage by stage: parse, build, check, the summary table
   of every box, and ``lbdl-compile --check --depth all`` as a whole process with its peak
   resident memory (issue 17: 128 s and 1.26 GB before, two thirds of it in the summary);
   check and summary are the best of three. ``--boxes`` changes the size; ``--only-big`` skips
   tables 1 to 3.

Processes run with the checkout's root first on ``PYTHONPATH`` and with bytecode caching on
(``PYTHONDONTWRITEBYTECODE`` removed), as an installed package runs. Times in tables 2 to 4
are the best of a few repeats, to show the cost of the work rather than the machine's noise.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lbdl_dsl import report  # noqa: E402
from lbdl_dsl.compiler.driver import compile_spec, model_env  # noqa: E402
from lbdl_dsl.compiler.infer import Checked, check  # noqa: E402
from lbdl_dsl.core.symbolic import fmt_count  # noqa: E402

T = TypeVar("T")

RESNET50 = REPO / "specs" / "resnet50.lbdl"
GPT3 = REPO / "specs" / "gpt3.lbdl"


def cli_command() -> list[str]:
    """The installed ``lbdl-compile`` beside this interpreter, else ``python -m lbdl_dsl``."""
    script = Path(sys.executable).parent / "lbdl-compile"
    if script.exists():
        return [str(script)]
    found = shutil.which("lbdl-compile")
    return [found] if found else [sys.executable, "-m", "lbdl_dsl.cli.compat"]


def best_of(repeats: int, fn: Callable[[], Any]) -> tuple[float, float]:
    """(best, median) wall time of ``fn`` in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def peak_bytes(fn: Callable[[], Any]) -> int:
    """The peak of Python allocations while ``fn`` runs (tracemalloc, so timed separately)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


PROCESSES = (
    ("`lbdl-compile --check specs/resnet50.lbdl`", 0.25, ("--check", "specs/resnet50.lbdl")),
    ("`lbdl-compile --check specs/gpt3.lbdl`", 1.0, ("--check", "specs/gpt3.lbdl")),
    ("`lbdl-compile specs/resnet50.lbdl -o DIR` (`make demo`)", 1.5, ("specs/resnet50.lbdl",)),
)
"""Table 1: what is run, its target in seconds, and its arguments (the main job gets ``-o``)."""


def child_env(tree: Path) -> dict[str, str]:
    """The environment of a timed process: ``tree``'s code first, bytecode cached."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_process(command: list[str], tree: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system, with the programs it ran) and peak resident
    bytes of one process, run in ``tree``; exits with its message if it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree, env=child_env(tree)
    )
    assert proc.stderr is not None
    err = proc.stderr.read()  # a pipe that fills would stop the process
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed in {tree}: {err.decode()}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024  # KiB on Linux


def process_table(repeats: int, against: Path | None) -> None:
    """Table 1: each process of `PROCESSES`, from this checkout (and ``against``, in turn)."""
    trees = [(REPO, "")] + ([(against, f" ({against.name})")] if against is not None else [])
    print("| process | target | wall best | wall median | CPU best | CPU median |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as out:
        for title, target, args in PROCESSES:
            extra = ["-o", out] if "--check" not in args else []
            command = [*cli_command(), *args, *extra]
            times: dict[Path, list[tuple[float, float]]] = {tree: [] for tree, _ in trees}
            for tree, _ in trees:  # warm the file cache, the bytecode and the user's caches
                run_process(command, tree)
            for _ in range(repeats):
                for tree, _ in trees:
                    times[tree].append(run_process(command, tree)[:2])
            for tree, label in trees:
                wall = [w for w, _ in times[tree]]
                cpu = [c for _, c in times[tree]]
                print(
                    f"| {title}{label} | {target:g} s | {min(wall):.3f} s | "
                    f"{statistics.median(wall):.3f} s | {min(cpu):.3f} s | "
                    f"{statistics.median(cpu):.3f} s |"
                )


def checker_run(overrides: dict[str, Any]) -> Callable[[], Checked]:
    """The check stage alone on GPT-3, parsed and built once beforehand."""
    program = compile_spec(GPT3, stop_after="build").program
    assert program is not None  # compile_spec raises rather than stop short of the stage

    def run() -> Checked:
        return check(program, model_env(program, overrides))

    return run


BIG_BOXES = 190_000
_CHAIN = ("fc 16", "relu", "layernorm", "gelu")


def big_spec(boxes: int, blocks: int = 500) -> str:
    """A model of about ``boxes`` checked boxes, every one of them distinct work for the
    checker: half a flat chain of cheap boxes, half calls of ``blocks`` different blocks (each
    called in turn, each call a box and its four boxes inside). Stays within every limit of
    `lbdl_dsl.compiler.limits` for sizes up to their 200,000 boxes."""
    calls = boxes // 2 // 5
    chain = boxes - 5 * calls
    lines = ["# generated by bench/check_scale.py: big_spec"]
    for k in range(blocks):
        lines += [f"block unit{k} on D:", f"  fc {8 + k}", "  relu", "  fc D", "  layernorm", ""]
    lines += ["model big:", "  input X: 16"]
    lines += [f"  {_CHAIN[i % len(_CHAIN)]}" for i in range(chain)]
    lines += [f"  unit{i % blocks}" for i in range(calls)]
    lines.append("  output Y")
    return "\n".join(lines) + "\n"


def count_boxes(checked: Checked) -> int:
    """Instances in the checked tree: every box the checker visited, inside blocks included."""
    return sum(1 for _ in checked.walk())


def big_table(boxes: int, repeats: int, against: Path | None = None) -> None:
    """Table 4: stage times (CPU seconds of this process; check and summary the best of
    ``repeats``, each started after a collection) and the whole process's wall and CPU time
    (best and median of ``repeats`` runs) and peak resident memory; with ``against``, the
    whole process of that checkout too, run in turn with this one's."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.lbdl"
        path.write_text(big_spec(boxes))
        t0 = time.process_time()
        parsed = compile_spec(path, stop_after="parse")
        t1 = time.process_time()
        built = compile_spec(path, stop_after="build")
        t2 = time.process_time()
        del parsed
        program = built.program
        assert program is not None
        env = model_env(program, {})
        checking, checked = best_cpu(repeats, lambda: check(program, env))
        summary, text = best_cpu(repeats, lambda: report.render_table(checked, None))
        n = count_boxes(checked)
        command = [*cli_command(), "--check", "--depth", "all", str(path)]
        trees = [REPO] if against is None else [REPO, against]
        for tree in trees[1:]:  # the other checkout's bytecode and file cache
            run_process(command, tree)
        runs: dict[Path, list[tuple[float, float, int]]] = {tree: [] for tree in trees}
        for _ in range(repeats):
            for tree in trees:
                runs[tree].append(run_process(command, tree))
    print(f"| {n:,} boxes (`big_spec({boxes})`) | CPU seconds |")
    print("|---|---|")
    print(f"| parse | {t1 - t0:.2f} |")
    print(f"| build (parse again included) | {t2 - t1:.2f} |")
    print(f"| check (best of {repeats}) | {checking:.2f} |")
    print(f"| summary table, every box ({text.count(chr(10)):,} lines) | {summary:.2f} |")
    print(f"| **check + summary** | **{checking + summary:.2f}** |")
    for tree in trees:
        label = "" if tree == REPO else f" of {tree.name}, in turn"
        walls, cpus = [r[0] for r in runs[tree]], [r[1] for r in runs[tree]]
        print(
            f"| `lbdl-compile --check --depth all`{label} (target 5 s), wall best / median of "
            f"{repeats} | {min(walls):.2f} / {statistics.median(walls):.2f} |"
        )
        print(f"| ... CPU best / median | {min(cpus):.2f} / {statistics.median(cpus):.2f} |")
        print(f"| ... peak resident memory | {mib(max(r[2] for r in runs[tree]))} |")


def best_cpu(repeats: int, fn: Callable[[], T]) -> tuple[float, T]:
    """The least CPU time of ``repeats`` calls of ``fn`` (a collection before each, so that
    none pays for the garbage of another), and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        result = None  # the previous result is garbage before the next call, not during it
        gc.collect()
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    assert result is not None
    return best, result


def mib(n: int) -> str:
    return f"{n / 2**10:,.0f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="repeats per timing (default 5)")
    parser.add_argument(
        "--boxes", type=int, default=BIG_BOXES, help=f"size of table 4 (default {BIG_BOXES:,})"
    )
    parser.add_argument("--only-big", action="store_true", help="table 4 only")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="tables 1 and 4's processes also for the checkout DIR, run in turn with this one's",
    )
    args = parser.parse_args(argv)
    n = args.repeats
    against = args.against.resolve() if args.against is not None else None
    if args.only_big:
        big_table(args.boxes, min(n, 3), against)
        return 0

    process_table(n, against)
    print()

    def whole() -> None:
        compile_spec(GPT3)

    compiled = compile_spec(GPT3)
    assert compiled is not None
    totals = compiled.totals
    params = totals["params"].as_int()
    assert params is not None, "GPT-3's parameter count does not depend on T"
    best, _ = best_of(n, whole)
    peak = peak_bytes(whole)
    print("| GPT-3 (specs/gpt3.lbdl) | value |")
    print("|---|---|")
    print(f"| trainable parameters | {fmt_count(params)} |")
    print(f"| as float32 arrays, never allocated | {params * 4 / 1e9:,.1f} GB |")
    print(f"| MACs per sample (T free) | {totals['macs']} |")
    print(f"| parse + build + check, in process | {best * 1e3:.1f} ms |")
    print(f"| peak Python memory (tracemalloc) | {mib(peak)} |")
    print()

    print("| N (`--set N=...`) | parameters | check time | peak memory | instances checked |")
    print("|---|---|---|---|---|")
    for layers in (12, 96, 960):
        run = checker_run({"N": layers, "T": 2048})
        checked = run()
        instances = sum(1 for _ in checked.walk())
        best, _ = best_of(n, run)
        peak = peak_bytes(run)
        print(
            f"| {layers} | {fmt_count(checked.totals['params'])} | {best * 1e3:.1f} ms | "
            f"{mib(peak)} | {instances} |"
        )
    print()
    big_table(args.boxes, min(n, 3), against)
    return 0


if __name__ == "__main__":
    sys.exit(main())

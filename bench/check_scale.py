"""How the checker scales: a whole ``--check`` process, GPT-3 without allocating it, and ×N.

Run ``python bench/check_scale.py`` from the repository root. It prints Markdown tables:

1. ``lbdl-compile --check specs/resnet50.lbdl`` timed as a whole process (interpreter start,
   imports, parse, build, check, summary), which is what a user waits for and must stay well
   under a second;
2. the check of specs/gpt3.lbdl: about 175 billion parameters, counted symbolically, so the
   check takes milliseconds and a few megabytes where the parameters would take 700 GB;
3. the checker alone on GPT-3 with N = 12, 96 and 960 layers (``--set N=...``): time, peak
   memory (tracemalloc) and the number of instances in the checked tree. A ×N group whose
   copies see the same shape is checked once, so none of the three grows with N.

Times are the best of a few repeats, to show the cost of the work rather than the machine's noise.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lbdl_dsl.compiler.driver import compile_spec, model_env  # noqa: E402
from lbdl_dsl.compiler.infer import Checked, check  # noqa: E402
from lbdl_dsl.core.symbolic import fmt_count  # noqa: E402

RESNET50 = REPO / "specs" / "resnet50.lbdl"
GPT3 = REPO / "specs" / "gpt3.lbdl"


def cli_command() -> list[str]:
    """The installed ``lbdl-compile`` beside this interpreter, else ``python -m lbdl_dsl``."""
    script = Path(sys.executable).parent / "lbdl-compile"
    if script.exists():
        return [str(script)]
    found = shutil.which("lbdl-compile")
    return [found] if found else [sys.executable, "-m", "lbdl_dsl"]


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


def process_time(repeats: int) -> tuple[float, float]:
    command = [*cli_command(), "--check", str(RESNET50)]

    def run() -> None:
        subprocess.run(command, check=True, capture_output=True, cwd=REPO)

    run()  # warm the file cache and the bytecode
    return best_of(repeats, run)


def checker_run(overrides: dict[str, Any]) -> Callable[[], Checked]:
    """The check stage alone on GPT-3, parsed and built once beforehand."""
    program = compile_spec(GPT3, stop_after="build").program
    assert program is not None  # compile_spec raises rather than stop short of the stage

    def run() -> Checked:
        return check(program, model_env(program, overrides))

    return run


def mib(n: int) -> str:
    return f"{n / 2**10:,.0f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="repeats per timing (default 5)")
    args = parser.parse_args(argv)
    n = args.repeats

    best, median = process_time(n)
    print("| process | best | median |")
    print("|---|---|---|")
    print(
        f"| `lbdl-compile --check specs/resnet50.lbdl` | {best * 1e3:.0f} ms | "
        f"{median * 1e3:.0f} ms |"
    )
    print()

    def whole() -> None:
        compile_spec(GPT3)

    compiled = compile_spec(GPT3)
    assert compiled.checked is not None
    totals = compiled.checked.totals
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

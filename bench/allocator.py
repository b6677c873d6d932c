"""What glibc's allocator settings do to `lbdl train` on a CPU under Linux: the steady step, the
start, the whole run, the peak memory and the system time, each setting in its own process.

``python bench/allocator.py [--quick] [--rounds 3] [--only KEY,...] [--out JSON]`` runs
``lbdl train specs/gpt2.lbdl --data synthetic --steps 12 --batch 4 --set T=128`` once per
setting and round, the settings in turn within each round so that all of them share the
machine's noise, with ``GLIBC_TUNABLES`` set for the child (glibc reads it only when a process
starts, so nothing can set it from inside). Each child's step times come from its run folder's
``metrics.jsonl``; its peak resident memory and CPU times from ``os.wait4``.

Why it is worth a table: XLA:CPU takes a step's working memory with one allocation per buffer
(the temporaries as one block, 836 MiB for GPT-2 small's step with its state donated) and frees
it when the step ends. Blocks that large are mapped afresh from the kernel at every step, and
Linux fills them one 4 KiB page at a time on first touch: 220,000 page faults per step here.
Two ways out, both glibc's own settings:

* **huge pages** (``glibc.malloc.hugetlb=1``): the fresh mappings come in 2 MiB pages where the
  kernel allows it (``/sys/kernel/mm/transparent_hugepage/enabled`` reads ``[madvise]`` or
  ``[always]``), so there are 512 times fewer faults;
* **kept** (one arena, no mappings, no trimming): every block comes from the heap, and a freed
  block is there for the next step, already touched; no faults at all once the run is warm,
  but memory freed once is never given back to the system.

``--quick`` runs two settings of a tiny GPT for a few steps (CI's smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import choose  # noqa: E402

KEPT = "glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
HUGE = "glibc.malloc.hugetlb=1"


@dataclass(frozen=True)
class Setting:
    key: str  # what --only names
    name: str
    tunables: str  # GLIBC_TUNABLES for the child; "" for glibc's defaults


SETTINGS = (
    Setting("default", "glibc's defaults", ""),
    Setting("huge-pages", "huge pages", HUGE),
    Setting("kept", "freed memory kept", KEPT),
    Setting("kept-huge-pages", "kept, in huge pages", f"{KEPT}:{HUGE}"),
)


@dataclass(frozen=True)
class Job:
    """The training run each setting repeats."""

    spec: str
    overrides: tuple[str, ...]
    steps: int
    batch: int

    @property
    def warm(self) -> int:
        """Steps counted as the start (the compile, the first touch of every array)."""
        return self.steps // 3

    def command(self, folder: Path) -> list[str]:
        run = "import sys; from lbdl_dsl.cli import main; sys.exit(main())"
        return [
            *(sys.executable, "-c", run, "train", str(ROOT / self.spec), "--data", "synthetic"),
            *("--steps", str(self.steps), "--batch", str(self.batch), "--set", *self.overrides),
            *("--log-every", "1", "--eval-samples", "4", "-o", str(folder)),
        ]

    def said(self) -> str:
        sets = " ".join(self.overrides)
        length = f"--steps {self.steps} --batch {self.batch}"
        return f"lbdl train {self.spec} --data synthetic {length} --set {sets}"


FULL = Job("specs/gpt2.lbdl", ("T=128",), 12, 4)
QUICK = Job("specs/gpt2.lbdl", ("N=2", "D=64", "H=4", "V=256", "L=32", "T=16"), 6, 4)
QUICK_KEYS = ("default", "kept")


def environment(setting: Setting) -> dict[str, str]:
    """The child's environment: ours, with the setting's tunables in place of any we had."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if setting.tunables:
        env["GLIBC_TUNABLES"] = setting.tunables
    return env


def measure(setting: Setting, job: Job) -> dict[str, Any]:
    """One run of ``job`` under ``setting``: its times, peak memory and CPU; or its error."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        start = time.perf_counter()
        child = subprocess.Popen(
            job.command(out),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=environment(setting),
            cwd=ROOT,
        )
        assert child.stderr is not None
        errors = child.stderr.read().decode("utf-8", "replace")
        # This child's own rusage, not all children's. Linux carries a parent's peak RSS into
        # a child it forks and execs, so ru_maxrss is at least this process's own peak: small,
        # since nothing here imports JAX.
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        child.stderr.close()
        if child.returncode != 0:
            return {"error": errors[-3000:] or f"exit code {child.returncode}"}
        lines = (out / "metrics.jsonl").read_text("utf-8").splitlines()
    at = {r["step"]: r["time"] for r in map(json.loads, lines) if r.get("kind") == "train"}
    steady = [at[s] - at[s - 1] for s in range(job.warm + 1, job.steps + 1)]
    return {
        "step": statistics.median(steady),
        "start": at[job.warm],
        "wall": wall,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # Linux gives kilobytes
        "system": usage.ru_stime,
        "user": usage.ru_utime,
    }


FIGURES = ("step", "start", "wall", "peak_rss_mb", "system", "user")


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds that ran; the first error if none did."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[0]["error"]}
    return {k: statistics.median(r[k] for r in good) for k in FIGURES} | {"rounds": len(good)}


def machine() -> dict[str, str]:
    """What decides these figures besides the settings: glibc's version and the kernel's THP."""
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return {
        "glibc": os.confstr("CS_GNU_LIBC_VERSION") or "unknown",
        "transparent_hugepage": thp.read_text().strip() if thp.exists() else "unavailable",
        "cpus": str(len(os.sched_getaffinity(0))),
    }


def table(results: dict[str, dict[str, Any]], job: Job) -> str:
    """Markdown: one row per setting; its steady step against glibc's defaults'."""
    base = results.get(SETTINGS[0].name, {}).get("step")
    lines = [
        f"| setting | steps {job.warm + 1} to {job.steps}, median (s) | × defaults "
        f"| to step {job.warm} (s) | whole run (s) | peak RSS (MB) | system CPU (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, got in results.items():
        if "error" in got:
            lines.append(choose.failed_row(name, got["error"], 5))
            continue
        ratio = f"{got['step'] / base:.3f}" if base else "—"
        lines.append(
            f"| {name} | {got['step']:.3f} | {ratio} | {got['start']:.2f} | {got['wall']:.1f} "
            f"| {got['peak_rss_mb']:,.0f} | {got['system']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two settings of a tiny GPT")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setting (3)")
    parser.add_argument("--only", help="the settings to run, by key (comma-separated)")
    parser.add_argument("--out", type=Path, help="where to write the figures (JSON)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    settings = {s.key: s for s in SETTINGS}
    chosen = choose.chosen(parser, settings, args.only, QUICK_KEYS if args.quick else settings)
    job = QUICK if args.quick else FULL
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in chosen}
    for round_ in range(args.rounds):
        for setting in chosen if round_ % 2 == 0 else chosen[::-1]:
            runs[setting.name].append(measure(setting, job))
            print(setting.name, runs[setting.name][-1], file=sys.stderr, flush=True)
    results = {name: summary(r) for name, r in runs.items()}
    if args.out:
        record = {
            "command": "python bench/allocator.py" + (" --quick" if args.quick else ""),
            "job": job.said(),
            "tunables": {s.name: s.tunables for s in chosen},
            "machine": machine(),
            "results": results,
            "runs": runs,
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(table(results, job))
    return results


if __name__ == "__main__":
    main()

"""Where one steady training step spends a GPU's time, by the kernels its trace shows: ours
against the Flax peer's (issue 19's MFU target: which kernels stand between the step and 50 %).

``python bench/gpu_profile.py --setting KEY --side ours|peer --out JSON`` compiles one side's
training step in this process (bench/accelerator_sweep.py's settings by key, ``unroll-v64``
say, with their XLA flags, or ``resnet50``), times it as the sweep does (3 warm-up steps, the
median of 8, the MFU), then runs it ``--steps`` times under ``jax.profiler.trace`` and adds up
the device's kernels by what they do (`KINDS`, from the kernels' names): products by cuBLAS
and cuDNN's convolutions, products that XLA wrote in Triton, cuDNN's fused attention,
reductions, memsets and copies, and the elementwise rest. Run each side in a process of its
own, as a user's holds one model. ``--render A.json B.json ...`` prints the sides side by side
as one markdown table (a file may hold several, as ``{"runs": [...]}``). On a machine with no
GPU the trace holds no device kernels, and the table says so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.gpu_kernels import summary, table  # noqa: E402


def traced(executable: Any, args: tuple, steps: int) -> tuple[list[dict], float]:
    """The perfetto trace's events of ``steps`` runs of ``executable``, and the seconds per run."""
    import jax

    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            start = time.perf_counter()
            for _ in range(steps):
                out = executable(*args)
            jax.block_until_ready(out)
            wall = (time.perf_counter() - start) / steps
        trace = sorted(Path(folder).rglob("perfetto_trace.json.gz"))[-1]
        events = json.loads(gzip.decompress(trace.read_bytes()))
    return (events["traceEvents"] if isinstance(events, dict) else events), wall


def measure(setting: str, side: str, steps: int, quick: bool) -> dict[str, Any]:
    """One side's step at one setting: compiled and timed as the sweep times it (the median
    of 8), then ``steps`` traced."""
    from bench import accelerator, accelerator_sweep

    if setting == "resnet50":
        case = next(c for c in accelerator.cases(quick) if c.key == "resnet50")
    else:
        settings = {
            s.key: s for s in (accelerator_sweep.QUICK if quick else accelerator_sweep.SETTINGS)
        }
        case = settings[setting].case(quick)
    chosen = accelerator_sweep.side_of(case, side)
    figures, executable = accelerator_sweep.timed(case, chosen, repeat=8)
    events, wall = traced(executable, chosen.train_args, steps)
    return {
        "setting": setting,
        "name": case.name,
        "side": side,
        **figures,
        "steps": steps,
        **summary(events, steps, wall),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--setting", default="unroll-v64", help="a sweep setting's key, or resnet50"
    )
    parser.add_argument("--side", choices=("ours", "peer"), default="ours")
    parser.add_argument("--steps", type=int, default=2, help="traced steps (2)")
    parser.add_argument("--quick", action="store_true", help="the sweep's tiny settings")
    parser.add_argument("--out", type=Path, help="where to write the figures (JSON)")
    parser.add_argument("--render", type=Path, nargs="+", metavar="JSON", help="tabulate runs")
    args = parser.parse_args(argv)
    if args.render:
        loaded = [json.loads(p.read_text(encoding="utf-8")) for p in args.render]
        text = table([r for got in loaded for r in got.get("runs", [got])])
        print(text)
        return text
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    from bench import accelerator_sweep

    known = [
        "resnet50",
        *(s.key for s in (accelerator_sweep.QUICK if args.quick else accelerator_sweep.SETTINGS)),
    ]
    if args.setting not in known:
        parser.error(f"--setting: no setting {args.setting!r} (there are {', '.join(known)})")
    flags = next((s.flags for s in accelerator_sweep.SETTINGS if s.key == args.setting), "")
    if flags:  # read when JAX starts its backend, which nothing has asked for yet
        os.environ["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS"), flags) if f)
    record = measure(args.setting, args.side, args.steps, args.quick)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(table([record]))
    return record


if __name__ == "__main__":
    main()

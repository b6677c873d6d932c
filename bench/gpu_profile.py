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
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KINDS = (
    "products and convolutions (cuBLAS, cuDNN)",
    "products (Triton, by XLA)",
    "attention (cuDNN)",
    "reductions",
    "memsets and copies",
    "elementwise and the rest",
)


def kind(name: str) -> str:
    """What a GPU kernel does, from its name: XLA names its own kernels after the fusion they
    run (``gemm_fusion_dot_459``, ``input_reduce_fusion_71``); the libraries' kernels carry
    theirs (cuBLAS's ``nvjet_*``, cuDNN's ``*sdpa*`` and ``sm90_xmma_*`` convolutions)."""
    if "sdpa" in name or "fmha" in name or "cudnn::fusion" in name:
        return KINDS[2]
    if name.startswith(("gemm_fusion", "triton")):
        return KINDS[1]
    if name.startswith("nvjet") or any(k in name for k in ("xmma", "cutlass", "gemm", "cudnn")):
        return KINDS[0]
    if "reduce" in name:
        return KINDS[3]
    if name.startswith(("Memset", "Memcpy")):
        return KINDS[4]
    return KINDS[5]


def device_kernels(events: Iterable[dict]) -> list[dict]:
    """The complete events of a perfetto trace that ran on a GPU (its processes named
    ``/device:GPU:n``): its kernels, memsets and copies."""
    events = list(events)
    gpus = {
        e["pid"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and "GPU" in e["args"]["name"]
    }
    return [e for e in events if e.get("ph") == "X" and e.get("pid") in gpus]


def summary(events: Iterable[dict], steps: int, wall: float) -> dict[str, Any]:
    """Milliseconds and kernel counts per step by `KINDS`, the device's busy time (the sum of
    its kernels: one stream runs them in turn) and the wall time per step."""
    ms: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for e in device_kernels(events):
        k = kind(e["name"])
        ms[k] += e.get("dur", 0) / 1000 / steps
        count[k] += 1
    return {
        "ms": {k: ms[k] for k in KINDS},
        "kernels": {k: count[k] / steps for k in KINDS},
        "busy_ms": sum(ms.values()),
        "wall_ms": wall * 1000,
    }


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


def table(records: Sequence[dict[str, Any]]) -> str:
    """Markdown: each kind's milliseconds (and kernels) per step, one column per record."""
    if not any(r["busy_ms"] for r in records):
        return "(no GPU kernels in these traces: run it on a GPU)"
    heads = [f"{r['setting']} ({'lbdl' if r['side'] == 'ours' else 'Flax'})" for r in records]
    lines = [
        "| kernels | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(records),
    ]
    for k in KINDS:
        cells = [f"{r['ms'][k]:.1f} ({r['kernels'][k]:.0f})" for r in records]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("| all kernels | " + " | ".join(f"{r['busy_ms']:.1f}" for r in records) + " |")
    lines.append(
        "| wall time, traced | " + " | ".join(f"{r['wall_ms']:.1f}" for r in records) + " |"
    )
    return "\n".join(lines)


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

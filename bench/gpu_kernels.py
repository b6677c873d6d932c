"""The GPU kernels of a perfetto trace, by what they do (`KINDS`), and their table: what
bench/gpu_profile.py measures and bench/accelerator.py's page prints (pure, no JAX), kept apart
so that neither script imports the other."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

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

"""The loss curves of a run as a PNG, from its ``metrics.jsonl`` records.

Training loss against the step, the evaluation loss as points on the same axes, and the
evaluation accuracy on a second panel when the task has one. matplotlib is optional (the
``train`` extra): without it, `plot` says so and returns None; a run never fails for a plot.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from lbdl_dsl.output import write_atomic


def plot(records: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """Draw ``records`` to ``path`` (PNG); None when matplotlib is missing or nothing to draw."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure
    except ImportError:
        return None
    train = [r for r in records if r["kind"] == "train" and "loss" in r]
    evals = [r for r in records if r["kind"] == "eval" and "loss" in r]
    if not train and not evals:
        return None
    accuracy = [r for r in evals if "accuracy" in r]
    fig = Figure(figsize=(8, 3.2 if not accuracy else 5.6), dpi=110, layout="constrained")
    axes = fig.subplots(2 if accuracy else 1, 1, sharex=True, squeeze=False)[:, 0]
    ax = axes[0]
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="training loss")
    if evals:
        ax.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="eval loss")
    if train and min(r["loss"] for r in train) > 0:
        ax.set_yscale("log")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    if accuracy:
        axes[1].plot([r["step"] for r in accuracy], [100 * r["accuracy"] for r in accuracy], "o-")
        axes[1].set_ylabel("eval accuracy (%)")
        axes[1].grid(True, alpha=0.3)
    axes[-1].set_xlabel("step")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return write_atomic(path, buffer.getvalue())

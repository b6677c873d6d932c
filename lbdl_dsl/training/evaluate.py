"""A trained model measured: ``lbdl evaluate`` and ``model.evaluate``.

The loss is the one ``lbdl train`` would train with (`tasks.choose`: next-token cross-entropy
for a token model, cross-entropy for a classifier, mean squared error otherwise), on the data
``lbdl train`` reads (`datasets.open_data`: built-in names, ``.npz`` and ``.txt`` files) or on
arrays in memory, through the same jitted evaluation step (`step.make_eval_step`) and padded
batches (`loader.eval_batches`). A classifier also gets its accuracy, a token model its
accuracy and perplexity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lbdl_dsl.core.errors import LbdlError

__all__ = ["Evaluation", "RunFacts", "evaluate", "load_params", "params_file", "run_facts"]


@dataclass(frozen=True)
class Evaluation:
    """What an evaluation measured: the means over ``samples`` of the loss and metrics."""

    data: str
    split: str  # "test", or "train" when the data has no test split
    samples: int
    task: str  # the task's description
    metrics: dict[str, float] = field(default_factory=dict)

    def lines(self) -> list[str]:
        shown = [f"{k} {_fmt(k, v)}" for k, v in self.metrics.items()]
        return [
            f"{self.data}, {self.split} split: {self.samples:,} samples",
            f"task: {self.task}",
            "   ".join(shown),
        ]

    def as_dict(self) -> dict[str, Any]:
        return {**self.metrics, "samples": self.samples, "split": self.split}


def _fmt(name: str, value: float) -> str:
    return f"{value:.2%}" if name == "accuracy" else f"{value:.4f}"


def evaluate(model: Any, params: Any, state: Any, data: Any, **options: Any) -> dict[str, Any]:
    """Means of the loss and metrics over ``data``'s test split (or its only split):
    ``{"loss", "accuracy", ["perplexity"], "samples", "split"}``; the options are `measure`'s
    (``task``, ``target``, ``batch``, ``samples``, ``seed``, ``vocab``, ``tokenizer``)."""
    return measure(model, params, state, data, **options).as_dict()


def measure(
    model: Any,
    params: Any,
    state: Any,
    data: Any,
    *,
    task: str = "auto",
    target: str | None = None,
    batch: int = 32,
    samples: int | None = None,
    seed: int = 0,
    vocab: str | None = None,
    tokenizer: Any = None,
) -> Evaluation:
    """`evaluate`, as the command line prints it. Text data is numbered as the model reads
    it: by ``tokenizer`` (`interop.text.Pretrained`, a checkpoint's), or by ``vocab``, the
    characters a run's tokens stand for (its ``run.json``); by neither, by its own sorted
    characters, as `lbdl train` numbers it."""
    import jax

    from lbdl_dsl.training import tasks
    from lbdl_dsl.training.datasets import from_arrays, open_data
    from lbdl_dsl.training.loader import eval_batches
    from lbdl_dsl.training.signature import signature
    from lbdl_dsl.training.step import make_eval_step

    for flag, value in (("--batch", batch), ("--samples", 1 if samples is None else samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LbdlError(
                f"{flag} must be a whole number ≥ 1, got {value!r}",
                None,
                hint="leave --samples out to evaluate every sample"
                if flag == "--samples"
                else None,
            )
    sig = signature(model.checked)
    chosen = tasks.choose(sig, task, target)
    if isinstance(data, Mapping):
        opened = from_arrays(dict(data), sig, chosen)
    elif isinstance(data, (str, Path)):
        opened = open_data(str(data), sig, chosen, seed, tokenizer or vocab)
    else:
        raise LbdlError(
            f"data must be a name, a file or a mapping of arrays, got {type(data).__name__}",
            None,
            hint="model.evaluate(params, state, 'digits') or (..., {'X': x, 'y': labels})",
        )
    split, dataset = ("test", opened.test) if opened.test is not None else ("train", opened.train)
    step = make_eval_step(model, chosen)
    # a batch beyond the samples evaluated would only be padding (and --batch 2^31 would ask
    # for gigabytes of it): the batch is at most the samples
    batch = max(1, min(batch, len(dataset), samples if samples else len(dataset)))
    sums: dict[str, float] = {}
    count = 0.0
    for rows, weights in eval_batches(dataset, batch, samples):
        out = jax.device_get(step(params, state, rows, weights))
        count += float(weights.sum())
        for key, value in out.items():
            sums[key] = sums.get(key, 0.0) + float(value)
    metrics = {key: sums[key] / count for key in sorted(sums, key=lambda k: k != "loss")}
    if chosen.kind == "next-token":
        metrics["perplexity"] = math.exp(min(metrics["loss"], 700.0))
    return Evaluation(opened.name, split, int(count), chosen.describe(), metrics)


@dataclass(frozen=True)
class RunFacts:
    """What a run folder given as ``--params`` says of its model: the ``--set`` values it was
    trained with, and the characters a text model numbers its tokens by."""

    overrides: dict[str, str] = field(default_factory=dict)
    vocab: str | None = None
    tokenizer: Path | None = None  # a Hugging Face checkpoint folder's tokenizer.json
    dtype: str = "float32"  # the compute type the run trained and evaluated in (--dtype)


def run_facts(params: str | Path, spec: str | Path) -> RunFacts:
    """The facts of ``params`` when it is a run folder of ``lbdl train`` with its ``run.json``,
    or a Hugging Face checkpoint folder with its ``tokenizer.json`` (else none). The ``--set``
    values are the run's only when ``spec`` is the run's spec (named from the current folder,
    or from where ``runs/`` was made, as ``lbdl generate`` finds it): a GPT trained with
    ``--set D=64`` is evaluated at D=64 without repeating it (and a ``--dtype bfloat16`` run in
    bfloat16, as its own evaluations were), and another spec is never handed values it may not
    have."""
    from lbdl_dsl.training.config import DTYPES
    from lbdl_dsl.training.rundir import spec_places, used_record

    folder = Path(params)
    if folder.is_dir() and (folder / "config.json").is_file():  # a Hugging Face checkpoint
        tokenizer = folder / "tokenizer.json"
        return RunFacts(tokenizer=tokenizer if tokenizer.is_file() else None)
    record = used_record(folder) if folder.is_dir() else None
    if record is None:
        return RunFacts()
    config = record["config"]
    data = record.get("data") or {}
    vocab = data.get("vocab") if isinstance(data.get("vocab"), str) else None
    mine = Path(spec).resolve()
    same = any(p.resolve() == mine for p in spec_places(folder, record))
    overrides = {str(k): str(v) for k, v in config.get("overrides", {}).items()} if same else {}
    dtype = config.get("dtype") if same and config.get("dtype") in DTYPES else None
    return RunFacts(overrides, vocab or None, dtype=dtype or "float32")


def load_params(model: Any, path: str | Path) -> tuple[Any, Any]:
    """``(params, state)`` of ``--params``: a file, a run folder (`params_file`), or a Hugging
    Face checkpoint folder (``config.json`` beside the weights), imported into ``model``
    through the map of its ``model_type`` (the spec `lbdl from-hf` wrote, or one alike)."""
    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file():
        from lbdl_dsl.backends.jax.runtime.module import unflatten
        from lbdl_dsl.interop.hf import spec_for
        from lbdl_dsl.interop.importer import import_weights

        done = import_weights(model, path, spec_for(path).family)
        return unflatten(done.params), unflatten(done.state)
    return model.load(params_file(path))  # type: ignore[no-any-return]


def params_file(path: str | Path) -> Path:
    """The parameters ``--params`` names: a file (``.safetensors``, ``.npz``), or a run folder
    of ``lbdl train`` (its ``params.safetensors``, written at the end of the run)."""
    path = Path(path)
    if path.is_dir():
        inside = path / "params.safetensors"
        if inside.is_file():
            return inside
        raise LbdlError(
            f"--params {path}: no params.safetensors in this folder",
            None,
            hint="a run folder of `lbdl train` holds it once the run has finished; or give "
            "a parameters file (.safetensors, .npz), or a Hugging Face checkpoint folder",
        )
    if not path.is_file():
        raise LbdlError(f"--params {path}: no such file or folder", None)
    return path

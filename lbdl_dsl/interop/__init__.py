"""Interoperability: weights in from PyTorch and Hugging Face checkpoints, models out to
StableHLO and ONNX.

``import_weights(spec, "model.safetensors", "gpt2", output="params.safetensors")`` fills a
spec's parameters from a reference checkpoint through a declarative map (``maps/``) and writes
them as `Model.load` reads them; ``export(spec, "model.onnx")`` writes the model for serving
stacks. Both import JAX (and the exporters their converter) only when called.
"""

from __future__ import annotations

from typing import Any


def import_weights(*args: Any, **kwargs: Any) -> Any:
    """See `lbdl_dsl.interop.importer.import_weights`."""
    from lbdl_dsl.interop.importer import import_weights as run

    return run(*args, **kwargs)


def export(*args: Any, **kwargs: Any) -> Any:
    """See `lbdl_dsl.interop.exporter.export`."""
    from lbdl_dsl.interop.exporter import export as run

    return run(*args, **kwargs)


__all__ = ["export", "import_weights"]

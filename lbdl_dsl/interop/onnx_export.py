"""ONNX through jax2onnx (the optional ``onnx`` extra), and onnxruntime to check the result.

The generated module is executed afresh with `onnx_ops`' two replacements swapped in, so the
user's `Model` is untouched and XLA keeps its faster functions. Graph inputs are the spec's
inputs (channels first, as the spec writes them) with a symbolic batch ``B``, preceded by the
parameters (``params/<path>``, ``state/<path>``) when they are inputs; outputs are the spec's
outputs, in its order.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from lbdl_dsl.core.errors import LbdlError

OPSET = 21  # what onnxruntime 1.2x runs in full, and Netron shows


def _converter() -> Any:
    """jax2onnx's ``to_onnx``, its plugins for JAX's own primitives loaded.

    By default jax2onnx imports every plugin it ships, for Flax, Equinox and dm-pix models and
    its examples too (about 20 s, and tracebacks in the log for those that no longer import);
    our modules use JAX's primitives only, whose plugins load in 2 s. Should a later jax2onnx
    move them, the full import still runs.
    """
    try:
        from jax2onnx import to_onnx
        from jax2onnx.plugins import plugin_system
    except ImportError:
        raise LbdlError(
            "ONNX export needs jax2onnx, which is not installed",
            None,
            hint="pip install 'lbdl-dsl[onnx]' (jax2onnx and onnxruntime)",
        ) from None
    for chatty in ("jax2onnx", "onnx_ir"):  # their warnings are about their own internals
        logging.getLogger(chatty).setLevel(logging.ERROR)
    if not getattr(plugin_system, "_already_imported_plugins", True):
        tree = Path(plugin_system.__file__).parent / "jax"
        if tree.is_dir() and hasattr(plugin_system, "_import_tree"):
            plugin_system._import_tree(tree, "jax2onnx.plugins.jax")
            plugin_system._already_imported_plugins = True
    return to_onnx


def _apply_for_onnx(model: Any) -> Any:
    """``apply`` of a fresh copy of the generated module, with `onnx_ops` swapped in."""
    from lbdl_dsl.interop.onnx_ops import REPLACEMENTS

    namespace: dict[str, Any] = {"__name__": f"lbdl_onnx_{model.name}"}
    exec(compile(model.source, f"<lbdl {model.compiled.file}>", "exec"), namespace)  # noqa: S102
    namespace.update({k: v for k, v in REPLACEMENTS.items() if k in namespace})
    return namespace["apply"]


NO_ONNX = {
    "moe": "its token dispatch (a one-hot into expert buffers whose capacity follows the batch) "
    "has no ONNX form that onnxruntime runs",
    "experts": "its token dispatch (a one-hot into expert buffers whose capacity follows the "
    "batch) has no ONNX form that onnxruntime runs",
    "scan": "its associative scan pads with interior padding, which ONNX's Pad has not",
    "mamba": "its selective scan is an associative scan, which pads with interior padding, "
    "which ONNX's Pad has not",
}
"""Boxes refused before converting, with the reason: the converter would fail deep inside, or
write a file onnxruntime cannot load (OneHot), and neither says which box is to blame."""


def _refuse_unsupported(model: Any) -> None:
    from lbdl_dsl.core.errors import LbdlError

    for _, inst, _ in model.compiled.walk():
        reason = NO_ONNX.get(inst.node.op or inst.kind)
        if reason is not None:
            raise LbdlError(
                f"`{inst.node.op or inst.kind}` cannot be exported to ONNX: {reason}",
                inst.node.span,
                hint="export it as StableHLO (--format stablehlo), which runs it",
            )


def write(model: Any, values: tuple[Any, Any], result: Any) -> None:
    import jax
    import jax.numpy as jnp

    from lbdl_dsl.backends.jax import weights as files
    from lbdl_dsl.interop.exporter import failure, forward

    _refuse_unsupported(model)
    to_onnx = _converter()
    apply = _apply_for_onnx(model)
    specs: list[Any] = []
    names: list[str] = []
    if result.params_as_inputs:
        flat = {f"params/{k}": v for k, v in files.flatten(values[0]).items()}
        flat |= {f"state/{k}": v for k, v in files.flatten(values[1]).items()}
        specs += [jax.ShapeDtypeStruct(np.shape(v), jnp.float32) for v in flat.values()]
        names += list(flat)
        inner = forward(model, values, True, apply)
        keys = list(flat)

        def f(*args: Any) -> Any:
            tree = dict(zip(keys, args[: len(keys)], strict=True))
            params = files.unflatten({k[7:]: v for k, v in tree.items() if k[:7] == "params/"})
            state = files.unflatten({k[6:]: v for k, v in tree.items() if k[:6] == "state/"})
            return inner(params, state, *args[len(keys) :])
    else:
        f = forward(model, values, False, apply)
    # one symbolic batch shared by every input (two calls of symbolic_shape make two symbols)
    dim = jax.export.symbolic_shape("B")[0] if result.batch is None else result.batch
    specs += [
        jax.ShapeDtypeStruct((dim, *shape), jnp.dtype(dtype))
        for shape, dtype in model.inputs.values()
    ]
    names += list(model.inputs)
    try:
        proto = to_onnx(
            f,
            specs,
            model_name=model.name,
            opset=OPSET,
            input_names=names,
            output_names=list(model.outputs),
        )
    except Exception as exc:  # noqa: BLE001 - named at the box the converter stopped at
        raise failure(model, exc, "the ONNX converter (jax2onnx)") from None
    from lbdl_dsl.output import write_atomic

    write_atomic(result.path, proto.SerializeToString())


def run(path: Path, values: tuple[Any, Any] | None, inputs: list[Any]) -> list[np.ndarray]:
    """The ONNX file's outputs in onnxruntime (CPU), for ``inputs`` (and the parameters, when
    they are inputs of the graph)."""
    import onnxruntime as ort

    from lbdl_dsl.backends.jax import weights as files

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed: dict[str, np.ndarray] = {}
    if values is not None:
        feed |= {f"params/{k}": np.asarray(v) for k, v in files.flatten(values[0]).items()}
        feed |= {f"state/{k}": np.asarray(v) for k, v in files.flatten(values[1]).items()}
    data = [i.name for i in session.get_inputs() if i.name not in feed]
    feed |= {name: np.asarray(x) for name, x in zip(data, inputs, strict=True)}
    return list(session.run(None, feed))

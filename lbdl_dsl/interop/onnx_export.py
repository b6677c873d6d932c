"""ONNX from the checked graph, else through jax2onnx; and onnxruntime to check the result.

A model whose every box has an ONNX lowering (`lbdl_dsl.backends.onnx`) is written box by box:
standard operators named by the boxes' paths, block calls as local functions, channels first
and no transposes. Otherwise, or with the parameters as inputs, the generated module is traced
by jax2onnx (the optional ``onnx`` extra), and a note names the boxes that made it so. For the
trace the module is executed afresh with `onnx_ops`' replacements swapped in, so the user's
`Model` is untouched and XLA keeps its faster functions. Graph inputs are the spec's inputs
(channels first, as the spec writes them) with a symbolic batch ``B``, preceded by the
parameters (``params/<path>``, ``state/<path>``) when they are inputs; outputs are the spec's
outputs, in its order; every name is ASCII (``Ŷ`` → ``Y_hat``).
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
    exec(compile(model.source, f"<lbdl {model.checked.file}>", "exec"), namespace)  # noqa: S102
    namespace.update({k: v for k, v in REPLACEMENTS.items() if k in namespace})
    return namespace["apply"]


NO_ONNX = {
    "moe": "its token dispatch (a one-hot into expert buffers whose capacity follows the batch) "
    "has no ONNX form that onnxruntime runs",
    "scan": "its associative scan pads with interior padding, which ONNX's Pad has not",
    "mamba": "its selective scan is an associative scan, which pads with interior padding, "
    "which ONNX's Pad has not",
}
"""Boxes refused before converting, with the reason: the converter would fail deep inside, or
write a file onnxruntime cannot load (OneHot), and neither says which box is to blame."""
NO_ONNX_GROUPS = {
    "experts": "its token dispatch (a one-hot into expert buffers whose capacity follows the "
    "batch) has no ONNX form that onnxruntime runs",
}
"""Groups refused the same way, by their kind: apart from the layers, whose names a kind may
share (the `scan` box is refused, a `scan h: H:` group is traced)."""


def _refuse_unsupported(model: Any) -> None:
    from lbdl_dsl.core.errors import LbdlError

    for _, inst, _ in model.checked.walk():
        reason = NO_ONNX.get(inst.node.op) if inst.node.op else NO_ONNX_GROUPS.get(inst.kind)
        if reason is not None:
            raise LbdlError(
                f"`{inst.node.op or inst.kind}` cannot be exported to ONNX: {reason}",
                inst.node.span,
                hint="export it as StableHLO (--format stablehlo), which runs it",
            )


def write(model: Any, values: tuple[Any, Any], result: Any) -> None:
    """Write ``result.path``: from the checked graph where every box has an ONNX lowering and
    the parameters are baked in, else traced, with a note saying why."""
    if result.params_as_inputs:
        result.notes.append("note: parameters as inputs: traced through jax2onnx")
    else:
        refused = _from_graph(model, values, result)
        if not refused:
            return
        result.notes.append(f"note: traced through jax2onnx: {_refused(refused)}")
    _traced(model, values, result)


def _refused(refused: list[Any]) -> str:
    """The boxes that have no ONNX lowering, each kind once with its line, its first path and
    how many more uses it has: ``no ONNX lowering here for `gru` (gru_0, 1 more; ...)``."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for r in refused:
        at = f"{Path(r.span.file).name}:{r.span.line}" if r.span is not None else "?"
        groups.setdefault((r.op, at, r.reason), []).append(r.path)
    parts = []
    for (op, at, reason), paths in groups.items():
        more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
        parts.append(f"`{op}` at {at} ({paths[0]}{more}: {reason})")
    return "no ONNX lowering here for " + "; ".join(parts)


def _from_graph(model: Any, values: tuple[Any, Any], result: Any) -> list[Any]:
    """Write the model from its checked graph; returns the boxes that have no ONNX form
    (nothing written then)."""
    try:
        from lbdl_dsl.backends.onnx import to_onnx
    except ImportError:
        raise LbdlError(
            "ONNX export needs the onnx package, which is not installed",
            None,
            hint="pip install 'lbdl-dsl[onnx]'",
        ) from None
    from lbdl_dsl.backends.jax import weights as files
    from lbdl_dsl.output import write_atomic

    arrays = {k: np.asarray(v) for k, v in files.flatten(values[0]).items()}
    arrays |= {k: np.asarray(v) for k, v in files.flatten(values[1]).items()}
    lowered = to_onnx(
        model.checked,
        arrays,
        name=model.name,
        fold=result.fold,
        functions=result.functions,
        batch=result.batch,
        output_names=result.output_names,
    )
    if lowered.model is None:
        return lowered.unsupported
    write_atomic(result.path, lowered.model.SerializeToString())
    result.lowering = "graph"
    result.nodes = _node_count(lowered.model)
    result.functions_written = len(lowered.model.functions)
    return []


def _node_count(model: Any) -> int:
    """The nodes of the graph with every function call replaced by the function's nodes."""
    import onnx.inliner

    return len(onnx.inliner.inline_local_functions(model).graph.node)


def _traced(model: Any, values: tuple[Any, Any], result: Any) -> None:
    import jax
    import jax.numpy as jnp

    from lbdl_dsl.backends.jax import weights as files
    from lbdl_dsl.backends.onnx.names import ascii_names
    from lbdl_dsl.interop.traced import failure, forward

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
    names += ascii_names(list(model.inputs))
    outputs = list(result.output_names) if result.output_names else ascii_names(list(model.outputs))
    try:
        proto = to_onnx(
            f,
            specs,
            model_name=model.name,
            opset=OPSET,
            input_names=names,
            output_names=outputs,
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
    types = {i.name: i.type for i in session.get_inputs()}
    feed |= {name: _as(types[name], x) for name, x in zip(data, inputs, strict=True)}
    return list(session.run(None, feed))


_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32}


def _as(onnx_type: str, x: Any) -> np.ndarray:
    """An input in the type the graph declares (token ids as int64 or int32)."""
    kind = _TYPES.get(onnx_type)
    return np.asarray(x) if kind is None else np.asarray(x).astype(kind, copy=False)

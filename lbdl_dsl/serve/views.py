"""What the studio shows, as pure functions of a spec's text: each calls what the CLI calls.

`check` is ``lbdl check`` and ``lbdl build --emit svg`` at once: the checker's diagnostics with
their spans, the summary (`report`), the figure (`backends.diagram`) and, for each drawn box,
where it was written and what it costs, so that the page can link the figure to the text.
`diff` is ``lbdl diff --figure``; `download` is ``lbdl build --emit`` of one format (and
``lbdl export --format onnx``). They run in a worker process (`worker`), whose folder is the
served one, so imports resolve there and nowhere else. Every result is plain JSON data.
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import Any

from lbdl_dsl.core.errors import Diagnostic, LbdlError, Span
from lbdl_dsl.serve.dot_process import DotProcess

Result = dict[str, Any]

_DOT = DotProcess()
"""This worker's Graphviz, started before the figure it will draw (`dot_process`)."""


def _span(span: Span | None) -> dict[str, Any] | None:
    if span is None:
        return None
    return {
        "file": span.file,
        "line": span.line,
        "column": span.column,
        "end_line": span.end_line,
        "end_column": span.end_column,
    }


def _diagnostic(d: Diagnostic, sources: Any) -> dict[str, Any]:
    return {
        "message": d.message,
        "hint": d.hint,
        "span": _span(d.span),
        "notes": [{"message": n.message, "span": _span(n.span)} for n in d.notes],
        "text": d.render(sources),
    }


def _compile(text: str, path: str, overrides: dict[str, str]) -> Any:
    from lbdl_dsl.compiler.driver import compile_spec

    return compile_spec(text, file=path, overrides=dict(overrides))


def _failure(err: LbdlError, path: str = "", text: str = "") -> Result:
    """The error's diagnostics, each rendered with its source line from the text being edited
    (``path``'s ``text``, not what is saved of it) or from the files it imports."""
    from lbdl_dsl.compiler.driver import CheckFailed
    from lbdl_dsl.compiler.imports import sources_for

    sources: Any = err.checked.sources if isinstance(err, CheckFailed) else None
    sources = dict(sources or err.sources or sources_for(err))
    if path:
        sources[path] = text
    return {"ok": False, "diagnostics": [_diagnostic(d, sources) for d in err.diagnostics]}


def _params(compiled: Any, overrides: dict[str, str]) -> list[dict[str, Any]]:
    """The model's parameters (``N``, ``D``, ...) with the values this check used, then the
    inputs' sizes left symbolic (``T``) or given one here: the fields of ``--set``."""
    out = []
    env = compiled.env
    declared = [p.name for p in compiled.program.model.params]
    for p in compiled.program.model.params:
        value = env.get(p.name, p.default)
        as_int = getattr(value, "as_int", None)
        value = as_int() if callable(as_int) and as_int() is not None else value
        kind = "number" if isinstance(value, int) and not isinstance(value, bool) else "text"
        out.append({"name": p.name, "value": str(value).lower() if kind == "text" else value})
        out[-1]["kind"] = kind
    symbols = [*compiled.free, *(k for k in overrides if k not in declared)]
    for name in dict.fromkeys(symbols):
        out.append({"name": name, "value": overrides.get(name, ""), "kind": "number"})
    return out


def _boxes(scene: Any) -> dict[str, Any]:
    """Each drawn element (box, frame) by its SVG title: where it was written and, for a
    checked one, its shapes and costs; ``opens`` names what a double click opens or closes
    (the `--expand` of the CLI)."""
    from lbdl_dsl.backends.diagram.scene import Box, walk_items

    out: dict[str, Any] = {}
    for item, _ in walk_items(scene.items):
        origin = scene.origins.get(_path(item))
        if origin is None:
            continue
        node, inst = origin.node, origin.inst
        info: dict[str, Any] = {"span": _span(node.span), "kind": node.kind, "op": node.op}
        info.update(_toggle(scene, item, node))
        if isinstance(item, Box):
            info["hparams"] = item.hparams
        if inst is not None:
            info.update(_costs(inst))
        out[item.id] = info
    return out


def _path(item: Any) -> str:
    """The walk's path of a drawn element (a frame's id is ``cluster:PATH``, a `+`'s
    ``PATH/+``)."""
    return str(item.id).removeprefix("cluster:").removesuffix("/+")


def _openable(node: Any) -> bool:
    """A block call, or a composite or mixture box of the registry: what ``--expand`` opens."""
    from lbdl_dsl.core.layers import lookup

    if node.kind == "call":
        return True
    layer = lookup(node.op) if node.kind == "layer" else None
    return layer is not None and (layer.composite or layer.expert is not None)


def _toggle(scene: Any, item: Any, node: Any) -> dict[str, Any]:
    """What a double click on ``item`` opens or closes, and whether it is open now."""
    from lbdl_dsl.backends.diagram.scene import Box, Frame

    if not isinstance(item, Frame):
        return {"opens": node.op, "open": False} if _openable(node) else {}
    if item.kind == "repeat" and item.block:  # a ×N frame merged with its open block call
        return {"opens": _inner_call(scene, _path(item), item.block), "open": True}
    if item.kind == "repeat" and len(item.items) == 1 and isinstance(item.items[0], Box):
        inner = scene.origins.get(item.items[0].id)  # a ×N frame around one closed call
        if inner is not None and _openable(inner.node):
            return {"opens": inner.node.op, "open": False}
    return {"opens": node.op, "open": True} if _openable(node) else {}


def _costs(inst: Any) -> dict[str, Any]:
    from lbdl_dsl.core.layers.base import fmt_shape
    from lbdl_dsl.core.symbolic import fmt_count

    out: dict[str, Any] = {
        "inputs": [fmt_shape(t.shape) for t in inst.inputs],
        "output": fmt_shape(inst.output.shape) if inst.output is not None else None,
        "hp": {k: str(v) for k, v in inst.hp.items() if v is not None and not k.startswith("_")},
    }
    if inst.totals:
        out["params"] = fmt_count(inst.totals.get("params", 0))
        out["macs"] = fmt_count(inst.totals.get("macs", 0))
    return out


def _inner_call(scene: Any, path: str, title: str) -> str:
    """The op of the open call a ×N frame was merged with (its title is the block's name)."""
    for key, origin in scene.origins.items():
        one_down = key.startswith(f"{path}/") and key.count("/") == path.count("/") + 1
        if one_down and _openable(origin.node):
            return str(origin.node.op)
    return title


def check(path: str, text: str, overrides: dict[str, str], expand: list[str]) -> Result:
    """The page's one view of a spec: diagnostics, or the figure, summary and boxes."""
    from lbdl_dsl import report
    from lbdl_dsl.backends import diagram
    from lbdl_dsl.backends.diagram import dot

    try:
        compiled = _compile(text, path, overrides)
        scene = diagram.scene(compiled, ",".join(expand) or None)
        figure = dot.write(scene)
        svg = _DOT.svg(figure) or diagram.render(figure, "svg")
    except LbdlError as err:
        return _failure(err, path, text)
    checked = compiled
    totals = report.to_json(checked, depth=0)
    return {
        "ok": True,
        "diagnostics": [],
        "svg": svg.decode() if isinstance(svg, bytes) else svg,
        "summary": report.render_html(checked, depth=1),
        "totals": {k: totals[k] for k in ("params", "state", "macs", "activations")},
        "params": _params(compiled, overrides),
        "boxes": _boxes(scene),
    }


def diff(
    a: tuple[str, str, dict[str, str]], b: tuple[str, str, dict[str, str]], expand: list[str]
) -> Result:
    """``lbdl diff A B --figure``: B's figure with its changes coloured, and the table."""
    from lbdl_dsl import diff as diffs
    from lbdl_dsl.backends import diagram
    from lbdl_dsl.backends.diagram import dot
    from lbdl_dsl.backends.diagram.paint import paint

    sides = []
    for path, text, overrides in (a, b):
        try:
            sides.append(_compile(text, path, overrides))
        except LbdlError as err:
            return _failure(err, path, text)
    first, second = sides
    try:
        result = diffs.diff(first, second)
        fills, legend = diffs.colours(result)
        scene = paint(diagram.scene(second, ",".join(expand) or None), fills, legend)
        svg = diagram.render(dot.write(scene), "svg")
    except LbdlError as err:
        return _failure(err)
    return {
        "ok": True,
        "diagnostics": [],
        "svg": svg.decode() if isinstance(svg, bytes) else svg,
        "table": diffs.render(result),
    }


MAX_ONNX_BYTES = 2**31
"""An ONNX file is one protobuf message, which cannot pass 2 GB: the float32 weights of the
largest model the download bakes in (it makes them, randomly, before it writes them)."""

DOWNLOADS = {
    "svg": "image/svg+xml",
    "png": "image/png",
    "py": "text/x-python",
    "json": "application/json",
    "onnx": "application/octet-stream",
}


def download(
    path: str, text: str, overrides: dict[str, str], expand: list[str], fmt: str
) -> Result:
    """One artefact of ``lbdl build`` (or ``lbdl export --format onnx``), base64-encoded."""
    from lbdl_dsl.compiler.driver import spec_name

    if fmt not in DOWNLOADS:
        return {"ok": False, "diagnostics": [{"message": f"no download format `{fmt}`"}]}
    try:
        compiled = _compile(text, path, overrides)
        data = _artefact(compiled, fmt, expand)
    except LbdlError as err:
        return _failure(err, path, text)
    except ImportError as err:
        extra = "onnx" if fmt == "onnx" else "jax"
        message = f"{fmt} needs the {extra} extra: pip install 'lbdl-dsl[{extra}]' ({err.name})"
        return {"ok": False, "diagnostics": [{"message": message, "text": message}]}
    raw = data.encode() if isinstance(data, str) else data
    return {
        "ok": True,
        "name": f"{spec_name(path)}.{fmt}",
        "type": DOWNLOADS[fmt],
        "data": base64.b64encode(raw).decode(),
    }


def _artefact(compiled: Any, fmt: str, expand: list[str]) -> str | bytes:
    if fmt in ("svg", "png"):
        from lbdl_dsl.backends import diagram

        return diagram.render(diagram.to_dot(compiled, ",".join(expand) or None), fmt)
    if fmt == "json":
        from lbdl_dsl import report

        return report.dumps(compiled)
    if fmt == "py":
        from lbdl_dsl.backends.jax import codegen

        return codegen.generate(compiled)
    params = compiled.totals["params"].as_int()
    if params is None or params * 4 > MAX_ONNX_BYTES:
        count = "a symbolic number of" if params is None else f"{params:,}"
        raise LbdlError(
            f"the ONNX download bakes in the weights, and {count} float32 parameters do not "
            "fit in the 2 GB of one ONNX file",
            hint="set the model's sizes smaller, or run `lbdl export SPEC --format onnx "
            "--params inputs`",
        )
    from lbdl_dsl.backends.jax.model import Model
    from lbdl_dsl.interop.exporter import export

    with tempfile.TemporaryDirectory(prefix="lbdl-serve-") as tmp:
        out = Path(tmp) / "model.onnx"
        export(Model(compiled), out, format="onnx", verify=False)
        return out.read_bytes()


def prepare() -> None:
    """Between requests: start the Graphviz the next figure will use."""
    _DOT.prepare()


def warm() -> Result:
    """Import what `check` needs, so that the first keystroke is not the one that pays."""
    check("warm.lbdl", "model warm:\n  input X: 4\n  fc 2\n  output Y\n", {}, [])
    return {"ok": True, "pid": os.getpid()}

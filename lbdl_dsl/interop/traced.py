"""The function an export traces, and the error that names the box a converter stopped at.

Shared by `exporter` (StableHLO, and the checks of every format) and `onnx_export` (jax2onnx's
trace), below both, so that neither imports the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lbdl_dsl.core.errors import LbdlError, Span

# -- the function exported -------------------------------------------------------------------


def forward(
    model: Any,
    values: tuple[Any, Any],
    as_inputs: bool,
    apply: Callable[..., tuple[Any, Any]] | None = None,
) -> Callable[..., Any]:
    """``f(*inputs)`` with the parameters closed over, or ``f(params, state, *inputs)``;
    several outputs come back as a tuple in the spec's order (a dict would be sorted)."""
    apply = apply or model.apply
    names = list(model.outputs)

    def outputs(out: Any) -> Any:
        return tuple(out[k] for k in names) if isinstance(out, dict) else out

    if as_inputs:
        return lambda params, state, *xs: outputs(apply(params, state, *xs)[0])
    params, state = values
    return lambda *xs: outputs(apply(params, state, *xs)[0])


def input_specs(model: Any, batch: int | None) -> list[Any]:
    """Abstract inputs, channels first as the spec writes them, with a symbolic batch ``b``."""
    import jax
    import jax.numpy as jnp

    b = jax.export.symbolic_shape("b")[0] if batch is None else batch
    return [
        jax.ShapeDtypeStruct((b, *shape), jnp.dtype(dtype))
        for shape, dtype in model.inputs.values()
    ]


# -- naming the box a converter stopped at ---------------------------------------------------


def failure(model: Any, exc: BaseException, converter: str) -> LbdlError:
    """The converter's error as a user's error at the box it could not translate."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    primitive, span, box = _culprit(model, exc)
    if span is not None:
        return LbdlError(
            f"`{box}` cannot be exported by {converter}"
            + (f" (JAX's `{primitive}`: {message})" if primitive else f": {message}"),
            span,
            hint="export the other formats, or write the box with others the converter knows",
        )
    return LbdlError(
        f"{model.checked.file}: {converter} cannot export this model: "
        f"{type(exc).__name__}: {message}",
        None,
        hint="rerun with LBDL_DEBUG=1 for the converter's traceback, and report it",
    )


def _culprit(model: Any, exc: BaseException) -> tuple[str | None, Span | None, str | None]:
    """The JAX primitive, and the span and text of the box, where a conversion failed: the
    equation in the innermost frame of the traceback that holds one, or else the first
    equation of the primitive the message names. A frame's equation that holds others (a
    ``jax.checkpoint`` whose body the converter translates inline) gives way to the first
    equation inside it of the primitive the message names."""
    eqn = None
    tb = exc.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("eqn")
        if hasattr(candidate, "primitive") and hasattr(candidate, "source_info"):
            eqn = candidate
        tb = tb.tb_next
    named = re.search(r"primitive '([\w-]+)'", str(exc))
    if eqn is None and named:
        eqn = _find_equation(model, named.group(1))
    elif eqn is not None and named and eqn.primitive.name != named.group(1):
        inside = (e for e in _equations_in(eqn) if e.primitive.name == named.group(1))
        eqn = next(inside, eqn)
    if eqn is None:
        return None, None, None
    span, box = _box_of(model, eqn)
    return eqn.primitive.name, span, box


def _find_equation(model: Any, primitive: str) -> Any:
    import jax

    values = jax.eval_shape(model.init, jax.random.key(0))
    closed = jax.make_jaxpr(forward(model, values, True))(*values, *input_specs(model, 2))
    for eqn in _equations(closed.jaxpr):
        if eqn.primitive.name == primitive:
            return eqn
    return None


def _equations(jaxpr: Any) -> Iterator[Any]:
    for eqn in jaxpr.eqns:
        yield eqn
        yield from _equations_in(eqn)


def _equations_in(eqn: Any) -> Iterator[Any]:
    """The equations of the jaxprs an equation holds (a scan's or a checkpoint's body)."""
    for v in eqn.params.values():
        for sub in v if isinstance(v, (list, tuple)) else [v]:
            inner = sub if hasattr(sub, "eqns") else getattr(sub, "jaxpr", None)  # open, closed
            if inner is not None:
                yield from _equations(getattr(inner, "jaxpr", inner))


# the comment above each statement of a generated module: ``# gpt2.lbdl:17: tlayer ×N ...``
# (a composite box's inside, written by the registry, comments ``# ffw:3: fc ...``)
_LINE = re.compile(r"^\s*# ([^\s:]+):(\d+): (.*?)(?:\s+->\s+.*)?$")


def _box_of(model: Any, eqn: Any) -> tuple[Span | None, str | None]:
    """The spec line a JAX equation lowers: its frames in the generated module, innermost
    first, then the nearest ``# FILE:LINE: BOX`` comment above the statement in the same
    function, then the box checked at that line. The comments of a composite box's inside
    (``# ffw:3: fc``) are passed over for the composite's own, the line the user wrote; a
    frame in a runtime function is passed over for its caller's."""
    from jax._src import source_info_util

    generated = f"<lbdl {model.checked.file}>"
    source = model.source.splitlines()
    for frame in source_info_util.user_frames(eqn.source_info.traceback):
        if frame.file_name != generated:
            continue
        for text in reversed(source[: frame.start_line]):
            if text.startswith("def "):  # a runtime function's frame: its caller's is next
                break
            m = _LINE.match(text)
            if m and m.group(1).endswith(".lbdl"):
                return _span_at(model, m.group(1), int(m.group(2)), m.group(3).strip())
    return None, None


def _span_at(model: Any, file: str, line: int, text: str) -> tuple[Span | None, str]:
    word = text.split()[0] if text.split() else ""
    candidates = [
        inst
        for _, inst, _ in model.checked.walk()
        if inst.node.span
        and inst.node.span.line == line
        and Path(inst.node.span.file).name == Path(file).name
    ]
    for inst in candidates:
        if inst.node.op == word:
            return inst.node.span, text
    return (candidates[0].node.span if candidates else None), text

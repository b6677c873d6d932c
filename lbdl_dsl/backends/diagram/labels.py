"""The words and numbers beside a box, written as the book writes them.

Only the hyper-parameters the spec wrote are shown (the book never writes a default), with the
values the checker resolved (``hidden=3072`` for ``hidden=4D``), booleans as ``causal=True``,
and a per-axis tuple as one number when its axes agree (``k=3`` for ``(3, 3)``). The output shape
is shown only where it differs from the box's input, which is the only place the book writes
the output channels of ``fc`` and ``conv-2d``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from lbdl_dsl.compiler.graph import Node, ParamRef
from lbdl_dsl.compiler.instance import Inst
from lbdl_dsl.core.layers.base import fmt_shape
from lbdl_dsl.core.symbolic import Expr, fmt_count


def fmt_value(value: Any) -> str:
    """One hyper-parameter value: ``3``, ``(1, 2)``, ``True``, ``0.1``, ``bilinear``."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, tuple):
        if value and all(v == value[0] for v in value):
            return fmt_value(value[0])
        return "(" + ", ".join(fmt_value(v) for v in value) + ")"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, ParamRef):
        return value.name
    return str(value)


def _written(node: Node, values: Mapping[str, Any]) -> str:
    parts = []
    for key, raw in node.hparams:
        if key in node.explicit:
            parts.append(f"{key}={fmt_value(values.get(key, raw))}")
    return " ".join(parts)


def hparams_text(node: Node, inst: Inst | None) -> str:
    """The blue text: the written hyper-parameters (or block arguments) with resolved values."""
    if inst is None:
        return _written(node, {})
    if node.kind == "call":
        return _written(node, inst.bindings)
    return _written(node, inst.hp)


def shape_text(inst: Inst | None) -> str:
    """The output shape, when the box changes it; empty otherwise or when it is unknown."""
    if inst is None or inst.output is None:
        return ""
    if inst.inputs and inst.inputs[0].shape == inst.output.shape:
        return ""
    return fmt_shape(inst.output.shape)


def tooltip(path: str, inst: Inst | None) -> str:
    """What an SVG viewer shows on hover: where the box is, and what it costs."""
    if inst is None or not inst.totals:
        return path
    params = inst.totals.get("params", Expr())
    macs = inst.totals.get("macs", Expr())
    return f"{path}: {fmt_count(params)} params, {fmt_count(macs)} MACs"


def has_params(inst: Inst | None) -> bool:
    """Whether the box embeds trainable parameters (its own, tied, or inside it)."""
    if inst is None:
        return False
    if inst.params or inst.tied:
        return True
    params = inst.totals.get("params")
    return params is not None and params != Expr.lift(0)


def wrap(message: str, width: int) -> list[str]:
    """A diagnostic cut into lines for the side of a box."""
    return textwrap.wrap(message, width, break_on_hyphens=False) or [message]

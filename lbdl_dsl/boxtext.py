"""How a box's hyper-parameters are written for people: the one formatter of the summary, the
figure and `lbdl diff`.

The spec says `tlayer ×N H=H F=4D`; a reader of the summary or the figure wants the values at
this use (`H=12 F=3072`), in the language's own spelling (`causal=true`, `k=3` for `(3, 3)`),
without what adds nothing: values left at their default, and a width the shape column already
shows (`fc out=2048` is `fc` with `T×2048` at its right). Two places that wrote the same box
two ways disagreed (the summary showed `H=H F=4D` where the figure showed `H=12 F=3072`), so
both call this module. It sits on the report's floor: it reads the compiler's tree and the
registry, and imports no backend.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import Any

from lbdl_dsl.compiler.graph import Block, Node, ParamRef
from lbdl_dsl.compiler.hparams import default_value
from lbdl_dsl.compiler.instance import CallInst, Inst, RepeatInst
from lbdl_dsl.core.formula import Formula
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.symbolic import Expr

FORMULA_SHOWN = 40
"""The characters of a table's formula the summary and the figure write (the spec has it all)."""


def fmt_value(value: Any) -> str:
    """One value as the language writes it: ``3`` (for ``(3, 3)``), ``(1, 2)``, ``true``,
    ``0.1``, ``bilinear``, or a block parameter's name where it is not resolved."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        if value and all(v == value[0] for v in value):
            return fmt_value(value[0])
        return "(" + ", ".join(fmt_value(v) for v in value) + ")"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, ParamRef):
        return value.name
    if isinstance(value, Formula) and len(value.text) > FORMULA_SHOWN:  # a table's formula:
        return f'"{value.text[: FORMULA_SHOWN - 1].rstrip()}…"'  # its start, as a figure has room
    return str(value)


def _defaults(node: Node, block: Block | None, values: Mapping[str, Any]) -> dict[str, str]:
    """Each hyper-parameter's default, written as its value would be; a block parameter's
    default may use the block's symbols (``F=4D``), so it is resolved with ``values``."""
    if node.kind == "call":
        if block is None:
            return {}
        exprs = {k: v for k, v in values.items() if isinstance(v, Expr)}
        out = {}
        for p in block.params:
            if p.default is not None:
                default = p.default.subs(exprs) if isinstance(p.default, Expr) else p.default
                out[p.name] = fmt_value(default)
        return out
    return _layer_defaults(node.op)


@functools.cache
def _layer_defaults(op: str) -> dict[str, str]:
    """A layer's defaults as `_defaults` writes them: the same for every box of the entry (the
    caller only reads the dict)."""
    layer = lookup(op)
    if layer is None:
        return {}
    return {hp.name: fmt_value(default_value(layer, hp)) for hp in layer.hparams if not hp.required}


def hparams_text(
    node: Node,
    inst: Inst | None,
    block: Block | None = None,
    hide: Collection[str] = (),
) -> str:
    """The hyper-parameters (or block arguments) the spec wrote, with the values resolved at this
    use (``inst``; the written text where there is none), less those at their default, those the
    shape column says, and those in ``hide`` (a convention of the figure, written once under it).
    ``block`` is the called block's definition, for its defaults."""
    values: Mapping[str, Any] = {}
    if inst is not None:
        values = inst.bindings if isinstance(inst, CallInst) else inst.hp
    explicit = getattr(node, "explicit", ())
    written = [(k, raw) for k, raw in getattr(node, "hparams", ()) if k in explicit]
    if not written:  # most boxes: nothing to write, nor any default to work out
        return ""
    defaults = _defaults(node, block, values)
    layer = lookup(node.op) if node.kind == "layer" else None
    widths = {name for name, _ in layer.from_annotation} if layer is not None else set()
    if layer is not None:
        given = dict(written)
        for hp in layer.hparams:  # a default that is another's value: a pool's stride, its k
            other = values.get(hp.default_from, given.get(hp.default_from))
            if hp.default_from and other is not None:
                defaults[hp.name] = fmt_value(other)
    parts = []
    for key, raw in written:
        if key in hide or key in widths:
            continue
        text = fmt_value(values.get(key, raw))
        if defaults.get(key) != text:
            parts.append(f"{key}={text}")
    return " ".join(parts)


def box_label(inst: Inst, blocks: Mapping[str, Block]) -> str:
    """A box as the summary and `lbdl diff` write it: its name, its hyper-parameters as
    `hparams_text` writes them, and ``×N`` for a frame around one box (``resblock ×2``)."""
    node = inst.node
    if isinstance(inst, RepeatInst):
        count = f"×{inst.hp.get('count', getattr(node, 'count', ''))}"
        bodies = inst.parts()
        if bodies and len(bodies[0]) == 1:
            return f"{box_label(bodies[0][0], blocks)} {count}"
        return count
    if node.kind == "experts":
        hp = inst.hp or {"e": getattr(node, "experts", ""), "k": getattr(node, "k", "")}
        cap = f" cap={hp['cap']}" if hp.get("cap", 1.25) != 1.25 else ""
        return f"experts e={hp['e']} k={hp['k']}{cap}"
    if node.kind == "scan":
        shape = getattr(node, "carry_shape", None)
        return f"scan {getattr(node, 'carry', '')}: {shape.text if shape else ''}"
    if node.kind == "residual":
        return "residual" + (" + shortcut" if getattr(node, "shortcut", None) is not None else "")
    text = hparams_text(node, inst, blocks.get(node.op) if node.kind == "call" else None)
    return f"{node.op} {text}" if text else node.op

"""The words and numbers beside a box, written as the book writes them.

A hyper-parameter is written only where the spec gave it a value other than the box's default
(the book never writes a default): ``s=1`` inside ``dresblock S=1`` or a transformer block's
``causal=false`` are left out, with the values the checker resolved (``hidden=3072`` for
``hidden=4D``), booleans as the language writes them, and a per-axis tuple as one number when its
axes agree (``k=3`` for ``(3, 3)``); `lbdl_dsl.boxtext` writes them, for the summary and `lbdl
diff` too, so the table and the figure never write one box two ways. The output shape is written
where it differs from the box's input, and always on a box whose output width is only given there
(``fc``, ``conv-2d``, ``lstm``: the registry's ``from_annotation``), which is the only place the
book writes it. Names are the book's spellings: a registry alias written with a space (``leaky
relu``) is how the book writes the box.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from lbdl_dsl.boxtext import fmt_value
from lbdl_dsl.compiler.graph import Block, Node
from lbdl_dsl.compiler.instance import Inst, Tensor
from lbdl_dsl.core.layers import Layer, lookup
from lbdl_dsl.core.layers.base import fmt_shape
from lbdl_dsl.core.symbolic import Expr, fmt_count


def book_name(op: str) -> str:
    """The box's name as the book writes it: ``leaky relu`` for the registry's ``leaky-relu``."""
    layer = lookup(op)
    if layer is None:
        return op
    return next((a for a in layer.aliases if " " in a), layer.name)


def always_text(node: Node, inst: Inst | None, text: str) -> str:
    """``text`` (the written hyper-parameters) with the box's defining numbers first, each once,
    even at their default: those its registry entry marks ``shown`` (a mixture's expert count
    and top-k, the token `take` keeps), under the entry's word for them: ``experts=8 k=2
    hidden=14336`` for ``moe e=8 hidden=14336``."""
    layer = lookup(node.op) if node.kind == "layer" else None
    pairs = [(hp.name, hp.word or hp.name) for hp in layer.hparams if hp.shown] if layer else []
    if not pairs or inst is None:
        return text
    names = {key for key, _ in pairs}
    head = [
        f"{word}={fmt_value(inst.hp[key])}" for key, word in pairs if inst.hp.get(key) is not None
    ]
    rest = [part for part in text.split() if part.split("=", 1)[0] not in names]
    return " ".join(head + rest)


def tensor_text(tensor: Tensor) -> str:
    """A tensor's shape, and its type when it holds tokens: ``T int<50257>``."""
    shape = str(tensor)
    if tensor.dtype == "int":
        return f"{shape} int<{tensor.vocab}>" if tensor.vocab is not None else f"{shape} int"
    if tensor.dtype == "bool":
        return f"{shape} bool"
    return shape


def shape_text(inst: Inst | None) -> str:
    """The output shape, where the box changes it or its width is written nowhere else."""
    if inst is None or inst.output is None:
        return ""
    layer = lookup(inst.node.op) if inst.node.kind == "layer" else None
    width_here = layer is not None and bool(layer.from_annotation)
    if not width_here and inst.inputs and inst.inputs[0].shape == inst.output.shape:
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


def declares_params(node: Node, blocks: Mapping[str, Block]) -> bool:
    """Whether a box holds trainable parameters, from its declaration alone: how a box the
    checker stopped at (or never reached) keeps the fill of its kind."""

    def graph_has(graph: Any, seen: frozenset[str]) -> bool:
        return any(visit(n, seen) for n in graph.nodes())

    def visit(n: Node, seen: frozenset[str]) -> bool:
        if n.kind == "layer":
            layer = lookup(n.op)
            return layer is not None and (layer.composite or layer.params is not _NO_PARAMS)
        if n.kind == "call":
            block = blocks.get(n.op)
            return block is not None and n.op not in seen and graph_has(block.body, seen | {n.op})
        groups = (getattr(n, "body", None), getattr(n, "shortcut", None))
        return any(graph_has(g, seen) for g in groups if g is not None)

    return visit(node, frozenset())


_NO_PARAMS = Layer.__dataclass_fields__["params"].default

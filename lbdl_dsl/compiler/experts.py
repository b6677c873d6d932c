"""One expert of a mixture box (`moe`), checked on a token, for the diagram to draw it open.

The `moe` box lowers as one primitive (its experts are stacked einsums), but the figure of a
mixture shows what an expert is, as an ``experts e=E:`` group shows its body. The entry declares
its expert as block text (`Layer.expert`, with the numbers of this use written in); this module
builds it once per text and checks it on the vector of one token, as the checker checks an
``experts`` group's body. Nothing here is counted: the box's own counts stay the entry's.
"""

from __future__ import annotations

from lbdl_dsl.compiler import composite
from lbdl_dsl.compiler.graph import Graph, Model, Program
from lbdl_dsl.compiler.infer import Checker
from lbdl_dsl.compiler.instance import Inst, LayerInst, Tensor
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers import lookup


def expert_body(inst: LayerInst) -> tuple[Graph, list[Inst]] | None:
    """The graph of one expert of the mixture box ``inst`` and its instances on one token;
    None for a box that declares no expert, or whose sizes are not all known."""
    layer = lookup(inst.node.op)
    if layer is None or layer.expert is None or inst.attrs is None or not inst.inputs:
        return None
    d = inst.inputs[0].shape[-1]
    try:
        block = composite.built_text(f"{layer.name} expert", layer.expert(inst.attrs, d))
    except LbdlError:  # a size left symbolic has no name in the expert's text: draw it shut
        return None
    program = Program(Model(block.name, (), block.body, block.span), {}, {}, block.span.file)
    token = Tensor((d,), made_by="the token an expert sees", span=inst.node.span)
    checker = Checker(program, {})
    body, result, _ = checker.graph(block.body, [token], {})
    return (block.body, body) if result is not None else None

"""A stable text form for each stage, so that tests can diff what a stage produced.

``ast``: the statements as parsed, one per line, indented like the spec. ``graph``: each graph's
nodes in order, with their inputs by port, canonical hyper-parameters and annotation. ``shapes``:
every checked box by its instance path, with its output shape, parameters, MACs and the
attribute record its entry resolved (what every backend reads).
"""

from __future__ import annotations

from typing import Any

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.graph import (
    CallNode,
    ExpertsNode,
    Graph,
    InputNode,
    LayerNode,
    Node,
    ParamRef,
    Program,
    RepeatNode,
    ResidualNode,
    ScanNode,
)
from lbdl_dsl.compiler.infer import Checked
from lbdl_dsl.compiler.instance import LayerInst
from lbdl_dsl.core.layers.base import fmt_shape
from lbdl_dsl.core.symbolic import Expr, fmt_count


def _value(v: Any) -> str:
    if isinstance(v, ast.SizeExpr | ast.Literal | ast.TupleValue):
        return v.text
    if isinstance(v, tuple):
        return "(" + ", ".join(_value(x) for x in v) + ")"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, ParamRef):
        return f"${v.name}"
    return str(v)


def _box(st: ast.Box) -> str:
    parts = [st.op]
    if st.args:
        parts[0] += "(" + ", ".join(a.name for a in st.args) + ")"
    if st.count:
        parts.append(f"×{st.count.text}")
    parts += [f"{h.key}={_value(h.value)}" for h in st.hparams]
    if st.shape:
        parts.append(f": {st.shape.text}")
    if st.name:
        parts.append(f"-> {st.name.name}")
    return "box " + " ".join(parts)


def _statement(st: Any) -> str:
    """One statement that is not a group, as one line."""
    if isinstance(st, ast.Box):
        return _box(st)
    if isinstance(st, ast.InputDecl):
        vocab = f"<{st.vocab.text}>" if st.vocab else ""
        return f"input {st.name.name}: {st.shape.text} {st.dtype}{vocab}"
    if isinstance(st, ast.AssertCount):
        return f"assert {st.quantity.name} {st.op} {_value(st.value)}"
    if isinstance(st, ast.AssertShape):
        return f"assert {st.name.name}: {st.shape.text}"
    word = {"OutputDecl": "output", "FromStmt": "from", "NameStmt": "name"}
    return f"{word[type(st).__name__]} {st.name.name}"


def ast_text(module: ast.Module) -> str:
    lines = [f'import "{i.path}"' for i in module.imports]

    def stmts(body: tuple[ast.Stmt, ...], indent: int) -> None:
        pad = "  " * indent
        for st in body:
            if isinstance(st, ast.RepeatGroup):
                lines.append(f"{pad}repeat ×{st.count.text}")
                stmts(st.body, indent + 1)
            elif isinstance(st, ast.ExpertsGroup):
                hps = " ".join(f"{h.key}={_value(h.value)}" for h in st.hparams)
                lines.append(f"{pad}experts {hps}")
                stmts(st.body, indent + 1)
            elif isinstance(st, ast.ScanGroup):
                init = f" = {st.init.name}" if st.init is not None else ""
                lines.append(f"{pad}scan {st.carry.name}: {st.shape.text}{init}")
                stmts(st.body, indent + 1)
            elif isinstance(st, ast.ResidualGroup):
                lines.append(f"{pad}residual")
                stmts(st.body, indent + 1)
                if st.shortcut is not None:
                    lines.append(f"{pad}shortcut")
                    stmts(st.shortcut, indent + 1)
            else:
                lines.append(pad + _statement(st))

    for b in module.blocks:
        params = ", ".join(
            p.name + (f"={_value(p.default)}" if p.default else "") for p in b.params
        )
        pats = ", ".join(
            (f"{t.name}: " if t.name else "")
            + t.shape.text
            + (f" {t.dtype}" if t.dtype else "")
            + (f"<{t.vocab.text}>" if t.vocab else "")
            for t in b.inputs
        )
        lines.append(f"block {b.name}({params}) on {pats}")
        stmts(b.body, 1)
    for m in module.models:
        params = ", ".join(
            p.name + (f"={_value(p.default)}" if p.default else "") for p in m.params
        )
        lines.append(f"model {m.name}({params})")
        stmts(m.body, 1)
    return "\n".join(lines) + "\n"


def _node_line(node: Node, preds: list[str]) -> str:
    """``fc(relu_0) out=10 : 10 -> logits``: one node of the graph text, less its id."""
    ins = ", ".join(preds)
    ann = f" : {node.annotation.text}" if node.annotation else ""
    head, hp, extra, share, name = node.op, "", "", "", ""
    match node:
        case InputNode():
            head = f"input {node.name or ''}".rstrip()
        case RepeatNode(count=count):
            head, extra = "repeat", f" ×{count}"
        case ResidualNode():
            head = "residual"
        case ScanNode():
            head = f"scan {node.carry}: {node.carry_shape.text}" + (" =" if node.init else "")
        case ExpertsNode():
            head = "experts"
            hp = f"e={node.experts} k={node.k}"
            hp += f" cap={node.capacity}" if node.capacity is not None else ""
        case LayerNode() | CallNode():
            hp = " ".join(f"{k}={_value(v)}" for k, v in node.hparams if v is not None)
            if isinstance(node, LayerNode) and node.shares:
                share = f" tie={node.shares}"
    if node.name and not isinstance(node, InputNode):
        name = f" -> {node.name}"
    return f"{head}{extra}({ins}) {hp}{share}{ann}{name}"


def graph_text(program: Program) -> str:
    lines: list[str] = []

    def graph(g: Graph, indent: int) -> None:
        pad = "  " * indent
        for node in g.nodes():
            lines.append(f"{pad}{node.id} = {_node_line(node, g.preds(node.id))}".rstrip())
            match node:
                case RepeatNode(body=body) | ExpertsNode(body=body) | ScanNode(body=body):
                    graph(body, indent + 1)
                case ResidualNode(body=body, shortcut=shortcut):
                    graph(body, indent + 1)
                    if shortcut is not None:
                        lines.append(f"{pad}  shortcut:")
                        graph(shortcut, indent + 2)
        if g.result:
            lines.append(f"{pad}return {g.result}")

    for name in sorted(program.blocks):
        block = program.blocks[name]
        lines.append(f"block {name}")
        graph(block.body, 1)
    lines.append(f"model {program.model.name}")
    graph(program.model.body, 1)
    for name, nid in program.model.body.outputs:
        lines.append(f"  output {name} = {nid}")
    return "\n".join(lines) + "\n"


def shapes_text(checked: Checked) -> str:
    lines = []
    for path, inst, mult in checked.walk():
        out = fmt_shape(inst.output.shape) if inst.output is not None else "?"
        times = "" if mult == Expr.lift(1) else f" (×{mult})"
        params = inst.totals.get("params", Expr())
        macs = inst.totals.get("macs", Expr())
        attrs = inst.attrs.text() if isinstance(inst, LayerInst) and inst.attrs else ""
        if inst.kind == "experts":
            attrs = " ".join(f"{k}={v}" for k, v in inst.hp.items() if v is not None)
        lines.append(
            f"{'/'.join(path)}: {inst.node.op or inst.kind} -> {out}"
            f"  params={fmt_count(params)} macs={fmt_count(macs)}{times}"
            + (f"  [{attrs}]" if attrs else "")
        )
    t = checked.totals
    lines.append(
        f"total params={fmt_count(t['params'])} state={fmt_count(t['state'])} "
        f"macs={fmt_count(t['macs'])}"
    )
    return "\n".join(lines) + "\n"

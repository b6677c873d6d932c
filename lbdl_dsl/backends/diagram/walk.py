"""From a checked program to a `Scene`: what to draw, in data-flow order.

Walks the graphs (which give the arrows: `Graph.preds` by port) and the instance tree beside them
(which gives shapes, resolved hyper-parameters and parameter counts). Each scope is drawn with a
list saying which element produces each of its input ports, and returns the element its result
comes from; that is how a captured outer tensor (Z in a decoder's ×N frame) becomes an arrow from
where it was made. A ×N group draws one copy inside a dashed frame; a block call is one tall box
unless `expand` asks for its inside; a residual group is its boxes plus a `+` node that its input
(or its shortcut path) bypasses into. Where the checker failed, the instance tree stops early:
boxes without an instance come from the graph alone and are painted as never checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from lbdl_dsl.backends.diagram import labels, mixture, wires
from lbdl_dsl.backends.diagram.conventions import Conventions
from lbdl_dsl.backends.diagram.expand import Expansion
from lbdl_dsl.backends.diagram.scene import (
    BRANCH,
    BYPASS,
    FAIL,
    FAN,
    MAIN,
    PARAM,
    PLAIN,
    POISON,
    SIDE,
    Box,
    Edge,
    Fork,
    Frame,
    Item,
    Plus,
    Scene,
    Stub,
    Terminal,
)
from lbdl_dsl.boxtext import hparams_text
from lbdl_dsl.compiler.experts import expert_body
from lbdl_dsl.compiler.graph import (
    ExpertsNode,
    Graph,
    InputNode,
    Node,
    ParamRef,
    Program,
    RepeatNode,
    ResidualNode,
    ScanNode,
)
from lbdl_dsl.compiler.instance import (
    CallInst,
    Checked,
    Copies,
    GroupInst,
    Inst,
    LayerInst,
    ResidualInst,
    ScanInst,
)
from lbdl_dsl.core.errors import Span
from lbdl_dsl.core.layers import lookup
from lbdl_dsl.core.layers.base import fmt_shape
from lbdl_dsl.core.symbolic import Expr

Srcs = list[tuple[Union[str, None], str]]  # per input port: the element it comes from, its name


@dataclass
class Site:
    """An element where checking stopped, with the source span that put it there."""

    element: Box | Plus | Frame | Terminal
    span: Span


def look_of(inst: Inst | None, n_inputs: int) -> str:
    """How to paint a box: a failure is an instance without output whose inputs all arrived."""
    if inst is None:
        return POISON
    if inst.output is None:
        return FAIL if len(inst.inputs) == n_inputs else POISON
    return PARAM if labels.has_params(inst) else PLAIN


@dataclass(frozen=True)
class Origin:
    """What a drawn path comes from: its node (with its source span), its checked instance and
    how many open boxes it sits in, for a reader of the figure that links it back to the text
    (the studio: a click on a box moves the cursor to its line)."""

    node: Node
    inst: Inst | None
    depth: int


class Walker:
    """One walk over a program; collects the scene's edges and its failure sites."""

    def __init__(
        self,
        program: Program,
        checked: Checked | None,
        expansion: Expansion,
        conventions: Conventions | None = None,
    ) -> None:
        self.program = program
        self.checked = checked
        self.expansion = expansion
        self.conventions = conventions or Conventions()
        self.edges: list[Edge] = []
        self.sites: list[Site] = []
        # A block drawn on its own whose parameters have no value: what could not be checked
        # is drawn from its declaration (its annotation), not as an error.
        self.sketch = False
        # The parameters of the open composites (self-att, ffw) the walk is inside: their boxes
        # take the composite's hyper-parameters, which its frame's title already writes.
        self.passed: list[frozenset[str]] = []
        self.rows: list[list[str]] = []  # elements drawn on one row (a mixture's experts)
        self.funnels: list[str] = []  # a mixture's Σ: the lanes come into it a rank apart
        self.opened: set[str] = set()  # block and composite names drawn open
        self.shut: set[str] = set()  # composites asked open with no inside to draw (unchecked)
        self.origins: dict[str, Origin] = {}  # each drawn node's path: where it was written

    def look_of(self, node: Node, inst: Inst | None, n_inputs: int) -> str:
        look = look_of(inst, n_inputs)
        if self.sketch and look in (FAIL, POISON):
            return PARAM if labels.declares_params(node, self.program.blocks) else PLAIN
        return look

    def shape(self, node: Node, inst: Inst | None) -> str:
        if self.sketch and (inst is None or inst.output is None):
            return node.annotation.text if node.annotation is not None else ""
        return labels.shape_text(inst)

    # -- scopes ---------------------------------------------------------------------------------
    def scope(
        self,
        graph: Graph,
        insts: list[Inst],
        ins: list[str | None],
        prefix: str,
        depth: int,
        into: list[Item],
    ) -> dict[str, str | None]:
        """Draw one graph into ``into``; returns the element each node's tensor leaves from."""
        by_id = {inst.id: inst for inst in insts}
        outs: dict[str, str | None] = dict(zip(graph.inputs, ins, strict=False))
        names = _names(graph)
        for nid in graph.order():
            node = graph.node(nid)
            if node.kind == "input":
                continue
            srcs = [(outs.get(p), names.get(p, "")) for p in graph.preds(nid)]
            draw = getattr(self, f"draw_{node.kind}")
            self.origins[f"{prefix}{nid}"] = Origin(node, by_id.get(nid), depth)
            outs[nid] = draw(node, by_id.get(nid), srcs, f"{prefix}{nid}", depth, into)
        return outs

    def result(
        self,
        graph: Graph,
        insts: list[Inst],
        ins: list[str | None],
        prefix: str,
        depth: int,
        into: list[Item],
    ) -> str | None:
        """Draw a body graph; returns the element its result leaves from."""
        outs = self.scope(graph, insts, ins, prefix, depth, into)
        return outs.get(graph.result) if graph.result else None

    def connect(
        self, srcs: Srcs, dst: str, look: str, item: object = None, node: Node | None = None
    ) -> None:
        """Arrows into a box: the flowing tensor from above, any other one from the side; a
        box whose entry names its ports (mha's Q, K, V) takes one arrow into each."""
        layer = lookup(node.op) if node is not None and node.kind == "layer" else None
        if isinstance(item, Box) and layer and layer.ports and srcs and srcs[0][0] is not None:
            self.named_ports(item, layer.ports, srcs, look)
            return
        for port, (src, name) in enumerate(srcs):
            if src is None:
                continue
            kind = MAIN if port == 0 else SIDE
            self.edges.append(Edge(src, dst, kind, name if kind == SIDE else "", look, name=name))

    def named_ports(
        self, box: Box, ports: tuple[tuple[str, int], ...], srcs: Srcs, look: str
    ) -> None:
        """One arrow per named port, the first (the flowing tensor) at the box's middle and the
        others to its right: ``[ ][ ][Q][K][V]``; inputs no port names (a mask) come after."""
        blank = len(ports) - 1
        box.ports = [""] * blank + [name for name, _ in ports]
        used: set[int] = set()
        for j, (_, wanted) in enumerate(ports):
            i = wanted if wanted < len(srcs) and srcs[wanted][0] is not None else 0
            src, name = srcs[i]
            # beside the flowing tensor's arrow, another of its own (K, V in self-attention)
            kind = MAIN if j == 0 else FAN if i == 0 else SIDE
            # Z named once, on its last arrow (V)
            last = all(min(w, len(srcs) - 1) != i for _, w in ports[j + 1 :])
            label = name if i > 0 and last else ""
            used.add(i)
            assert src is not None, "a box's first input always has a source"
            self.edges.append(Edge(src, box.id, kind, label, look, name=name, port=blank + j))
        for i, (src, name) in enumerate(srcs):
            if i not in used and src is not None:
                box.ports.append("")
                port = len(box.ports) - 1
                self.edges.append(Edge(src, box.id, SIDE, name, look, name=name, port=port))

    # -- boxes ----------------------------------------------------------------------------------
    def box(
        self, node: Node, inst: Inst | None, srcs: Srcs, path: str, into: list[Item], tall: bool
    ) -> str:
        """One box, its arrows in, and its failure if it is where checking stopped."""
        look = self.look_of(node, inst, len(srcs))
        element = Box(
            path,
            node.op if node.kind == "call" else labels.book_name(node.op),
            self.hparams(node, inst),
            self.shape(node, inst),
            look,
            tall=tall,
            tooltip=labels.tooltip(path, inst),
            trainable=look == PARAM
            or (look == FAIL and labels.declares_params(node, self.program.blocks)),
        )
        return self.place(element, node, srcs, path, into)

    def hparams(self, node: Node, inst: Inst | None) -> str:
        block = self.program.blocks.get(node.op) if node.kind == "call" else None
        hide = set(self.conventions.hide(node))
        if self.passed:
            hide |= {k for k, v in getattr(node, "hparams", ()) if _passed(v, self.passed[-1])}
        return labels.always_text(node, inst, hparams_text(node, inst, block, hide))

    def draw_layer(
        self, node: Node, inst: Inst | None, srcs: Srcs, path: str, depth: int, into: list[Item]
    ) -> str | None:
        layer = lookup(node.op)
        if layer is None or layer.glyph is None:
            composite = layer is not None and layer.composite
            # A composite whose checked instance carries its inside (self-att, ffw) opens as a
            # block call does.
            inside = inst.inside if composite and isinstance(inst, LayerInst) else None
            wanted = self.expansion.wants(node.op, depth) or (
                layer is not None and self.expansion.wants(layer.name, depth)
            )
            if composite and wanted and inside is None:
                self.shut.add(layer.name if layer is not None else node.op)
            if inside is not None and wanted:
                self.opened.add(layer.name if layer is not None else node.op)
                title = labels.book_name(node.op)
                passed = frozenset(p.name for p in inside.params)
                return self.open_block(
                    node, inst, srcs, path, depth, into, inside.body, title, passed
                )
            opens = layer is not None and layer.expert is not None and isinstance(inst, LayerInst)
            if layer is not None and layer.expert is not None and wanted and not opens:
                self.shut.add(layer.name)
            if opens and wanted and isinstance(inst, LayerInst) and layer is not None:
                body = expert_body(inst)
                if body is not None:
                    self.opened.add(layer.name)
                    frame = Frame(f"cluster:{path}", "experts", node.op, self.hparams(node, inst))
                    ek = (mixture.whole(inst.hp["e"]), mixture.whole(inst.hp["k"]))
                    return self.mixture(node, inst, srcs, path, depth, into, frame, body, ek)
            tall = composite or opens or (layer is not None and layer.tall)
            return self.box(node, inst, srcs, path, into, tall)
        look = self.look_of(node, inst, len(srcs))
        tip = labels.tooltip(path, inst)
        plus = Plus(path, PLAIN if look == PARAM else look, tip, symbol=layer.glyph)
        return self.place(plus, node, srcs, path, into)

    def place(self, item: Box | Plus, node: Node, srcs: Srcs, path: str, into: list[Item]) -> str:
        """Add a drawn box or `+` with its incoming edges; a failing one marks its site."""
        into.append(item)
        if item.look == FAIL:
            self.sites.append(Site(item, node.span))
        self.connect(srcs, path, item.look, item, node)
        return path

    def draw_call(
        self, node: Node, inst: Inst | None, srcs: Srcs, path: str, depth: int, into: list[Item]
    ) -> str | None:
        if not self.expansion.wants(node.op, depth):
            return self.box(node, inst, srcs, path, into, tall=True)
        body = self.program.blocks[node.op].body
        self.opened.add(node.op)
        return self.open_block(node, inst, srcs, path, depth, into, body, node.op)

    def open_block(
        self,
        node: Node,
        inst: Inst | None,
        srcs: Srcs,
        path: str,
        depth: int,
        into: list[Item],
        body: Graph,
        title: str,
        passed: frozenset[str] | None = None,
    ) -> str | None:
        """A block call, or a composite box, drawn open: its body inside a solid frame.
        ``passed`` are a composite's parameters, written on its frame and not inside it."""
        frame = Frame(f"cluster:{path}", "block", title, self.hparams(node, inst))
        into.append(frame)
        before = len(self.sites)
        if passed is not None:
            self.passed.append(passed)
        try:
            result = self.result(
                body,
                _body(inst),
                [s for s, _ in srcs],
                f"{path}/",
                depth + 1,
                frame.items,
            )
        finally:
            if passed is not None:
                self.passed.pop()
        self.settle(frame, inst, len(srcs), before, node)
        return result

    def draw_repeat(
        self, node: Node, inst: Inst | None, srcs: Srcs, path: str, depth: int, into: list[Item]
    ) -> str | None:
        assert isinstance(node, RepeatNode)
        count = inst.hp.get("count", node.count) if inst is not None else node.count
        copies = inst.copies if isinstance(inst, GroupInst) else []
        failed = inst is not None and inst.output is None
        # One copy stands for all N; a failed group shows the copy that failed (the last).
        body = (copies[-1] if failed else copies[0]).body if copies else []
        assert node.body is not None  # `verify` guarantees every group a body
        ins = [s for s, _ in srcs]
        if isinstance(count, Expr) and count.as_int() == 1 and inst is not None and not failed:
            return self.result(node.body, body, ins, f"{path}/", depth, into)  # no ×1 frame
        # a schedule over the copies names its index, whose formula the boxes inside show
        named = f" as {node.index}" if node.index else ""
        frame = Frame(f"cluster:{path}", "repeat", f"×{count}{named}")
        into.append(frame)
        before = len(self.sites)
        result = self.result(node.body, body, ins, f"{path}/", depth, frame.items)
        self.settle(frame, inst, len(srcs), before, node)
        if inst is not None and inst.output is not None and len(copies) > 1:
            _vary(frame, copies, f"{path}/", fmt_shape(inst.output.shape))
        _merge_open_call(frame)
        return result

    def draw_experts(
        self, node: Node, inst: Inst | None, srcs: Srcs, path: str, depth: int, into: list[Item]
    ) -> str | None:
        assert isinstance(node, ExpertsNode)
        ek = (inst.hp["e"], inst.hp["k"]) if inst is not None and inst.hp else (0, 0)
        e = ek[0] or node.experts.as_int() or 2
        k = ek[1] or node.k.as_int() or 1
        cap = f" cap={node.capacity:g}" if node.capacity is not None else ""
        frame = Frame(f"cluster:{path}", "experts", "experts", f"e={e} k={k}{cap}")
        copies = inst.copies[0].body if isinstance(inst, GroupInst) and inst.copies else []
        body = (node.body, copies)
        return self.mixture(node, inst, srcs, path, depth, into, frame, body, (e, k))

    def mixture(
        self,
        node: Node,
        inst: Inst | None,
        srcs: Srcs,
        path: str,
        depth: int,
        into: list[Item],
        frame: Frame,
        body: tuple[Graph, list[Inst]],
        ek: tuple[int, int],
    ) -> str:
        """A mixture of experts in its frame (`mixture.draw`): router, lanes, the gated sum."""
        into.append(frame)
        before = len(self.sites)
        src = srcs[0][0] if srcs else None
        result = mixture.draw(self, node, inst, src, path, depth, frame, body, ek)
        self.settle(frame, inst, len(srcs), before, node)
        return result

    def draw_scan(
        self, node: Node, inst: Inst | None, srcs: Srcs, path: str, depth: int, into: list[Item]
    ) -> str | None:
        """A recurrence: one step's boxes in a frame titled ``scan over T``, with the carry
        and its shape under the title; the boxes that read the previous carry take it from
        the start tensor (``= h0``) if there is one, else from the carry's name written in
        the frame."""
        assert isinstance(node, ScanNode)
        steps = inst.hp.get("steps") if inst is not None and inst.hp else None
        title = f"scan over {steps}" if steps is not None else "scan"
        carry = f"{node.carry}: {node.carry_shape.text}"
        frame = Frame(f"cluster:{path}", "block", title, carry)
        into.append(frame)
        before = len(self.sites)
        ins = [s for s, _ in srcs]
        start = ins[1] if node.init and len(ins) > 1 else None
        if start is None:  # the previous step's carry: its name, where it is read
            stub = Stub(f"{path}/{node.carry}", f"{node.carry} (previous step)")
            frame.items.append(stub)
            start = stub.id
        captures = ins[2:] if node.init else ins[1:]
        step = [ins[0] if ins else None, start, *captures]
        result = self.result(node.body, _body(inst), step, f"{path}/", depth + 1, frame.items)
        self.settle(frame, inst, len(srcs), before, node)
        return result

    def draw_residual(
        self, node: Node, inst: Inst | None, srcs: Srcs, path: str, depth: int, into: list[Item]
    ) -> str:
        assert isinstance(node, ResidualNode)
        assert node.body is not None  # `verify` guarantees every group a body
        plus = Plus(f"{path}/+", tooltip=path)
        before = len(self.sites)
        ins = [s for s, _ in srcs]
        if ins and ins[0] is not None:
            fork = Fork(f"{path}/fork")
            into.append(fork)
            unchecked = self.look_of(node, inst, len(srcs)) == POISON
            self.edges.append(Edge(ins[0], fork.id, MAIN, look=POISON if unchecked else PLAIN))
            ins[0] = fork.id
        mark = len(self.edges)  # the bypass goes before the boxes' arrows: leftmost, outermost
        n_body = len(node.body.inputs) - 1
        main = self.result(node.body, _body(inst), ins[: 1 + n_body], f"{path}/", depth, into)
        bypass_from: str | None = ins[0] if ins else None
        if node.shortcut is not None:
            first = len(self.edges)
            bypass_from = self.result(
                node.shortcut,
                inst.shortcut if isinstance(inst, ResidualInst) else [],
                ins[:1] + ins[1 + n_body :],
                f"{path}/shortcut/",
                depth,
                into,
            )
            for edge in self.edges[first:]:
                if edge.src == ins[0] and edge.kind == MAIN:
                    edge.kind = BRANCH  # beside the main path, not in line with it
        into.append(plus)
        plus.look = self.look_of(node, inst, len(srcs))
        plus.look = PLAIN if plus.look == PARAM else plus.look
        if plus.look == FAIL and len(self.sites) > before:
            plus.look = POISON  # the failure is inside, on a box of the group
        elif plus.look == FAIL:
            self.sites.append(Site(plus, node.span))
        if main is not None:
            self.edges.append(Edge(main, plus.id, MAIN, look=plus.look))
        if bypass_from is not None:
            self.edges.insert(mark, Edge(bypass_from, plus.id, BYPASS, look=plus.look))
        return plus.id

    def settle(
        self, frame: Frame, inst: Inst | None, n_inputs: int, before: int, node: Node
    ) -> None:
        """A frame whose group failed with nothing failing inside it is itself the failure
        (a ×N count, a block's annotation); one never checked is greyed."""
        look = self.look_of(node, inst, n_inputs)
        if look == FAIL and len(self.sites) == before:
            frame.look = FAIL
            self.sites.append(Site(frame, node.span))
        elif look == POISON:
            frame.look = POISON

    # -- the model ------------------------------------------------------------------------------
    def model(self, scene: Scene) -> None:
        graph = self.program.model.body
        inputs = self.checked.inputs if self.checked is not None else {}
        ins: list[str | None] = []
        for nid in graph.inputs:
            node = graph.node(nid)
            tensor = inputs.get(node.name or "")
            shape = labels.tensor_text(tensor) if tensor is not None else _declared(node)
            term = Terminal(nid, node.name or "", shape)
            if tensor is None and self.checked is not None:
                term.look = FAIL  # its declared shape is wrong: checking stopped right here
                self.sites.append(Site(term, node.span))
            scene.inputs.append(term)
            ins.append(nid)
        insts = self.checked.root if self.checked is not None else []
        outs = self.scope(graph, insts, ins, "", 0, scene.items)
        outputs = self.checked.outputs if self.checked is not None else {}
        for name, nid in graph.outputs:
            look = PLAIN if outputs.get(name) is not None or self.sketch else POISON
            scene.outputs.append(Terminal(f"output:{name}", name, look=look))
            src = outs.get(nid)
            if src is not None:
                self.edges.append(Edge(src, f"output:{name}", MAIN, look=look))
        scene.edges = self.edges
        scene.rows = [row for row in self.rows if len(row) > 1]
        scene.loose = {eid for row in scene.rows for eid in row}
        scene.funnels = set(self.funnels)
        scene.legend = list(self.conventions.notes)
        wires.name_broadcasts(scene)
        fan_out(scene.edges)


def _declared(node: Node) -> str:
    """An input's shape as the spec declares it, for a program that was never checked."""
    if node.annotation is None or not isinstance(node, InputNode):
        return ""
    if node.dtype == "int":
        return f"{node.annotation.text} int" + (f"<{node.vocab}>" if node.vocab else "")
    return node.annotation.text


def _shapes(insts: list[Inst], prefix: str, out: dict[str, str]) -> dict[str, str]:
    """The output shape of every instance under ``insts`` by the id the walk gives its box."""
    for inst in insts:
        path = f"{prefix}{inst.id}"
        out[path] = fmt_shape(inst.output.shape) if inst.output is not None else ""
        if isinstance(inst, GroupInst):  # one copy stands for all, as the figure draws it
            if inst.copies:
                _shapes(inst.copies[0].body, f"{path}/", out)
            continue
        for step, part, _ in inst.scopes():
            _shapes(part, f"{path}/{step}", out)
    return out


def _body(inst: Inst | None) -> list[Inst]:
    """The boxes inside a composite, a block call or a residual group's main path."""
    if isinstance(inst, (LayerInst, CallInst, ResidualInst, ScanInst)):
        return inst.body
    return []


def _vary(frame: Frame, copies: list[Copies], prefix: str, output: str) -> None:
    """A ×N group whose copies change the shape: the one copy drawn cannot give one shape for
    all of them where they differ, so those are left blank, and the group's output is written
    where it leaves the frame (on its last row, or beside the ×N)."""
    first = _shapes(copies[0].body, prefix, {})
    last = _shapes(copies[-1].body, prefix, {})

    def visit(items: list[Item]) -> None:
        for item in items:
            if isinstance(item, Box) and first.get(item.id) != last.get(item.id):
                item.shape = ""
            elif isinstance(item, Frame):
                visit(item.items)

    visit(frame.items)
    tail = frame.items[-1] if frame.items else None
    if isinstance(tail, Box):
        tail.shape = output
    else:
        frame.shape = output


def _merge_open_call(frame: Frame) -> None:
    """A ×N frame around one open block call becomes one frame: the dashed ×N frame titled with
    the block, around its boxes, as the book draws ``[self-att, ffw] ×N``."""
    if len(frame.items) != 1 or frame.message:
        return
    inner = frame.items[0]
    if isinstance(inner, Frame) and inner.kind == "block" and not inner.message:
        frame.items, frame.block, frame.hparams = inner.items, inner.title, inner.hparams
        if inner.look != PLAIN:
            frame.look = inner.look
        if inner.shape and not frame.shape:
            frame.shape = inner.shape


def fan_out(edges: list[Edge]) -> list[Edge]:
    """Only one reader of a tensor continues its column; the others fan out beside it.

    Two arrows from one box that both asked to be straight would pull their boxes onto the same
    column, and Graphviz would settle for a zig-zag through both. The column goes on into the
    first box where other streams join it (a concatenation that reads the tensor itself, as a
    pyramid pooling's does), else into the first reader: the next box of the spec."""
    merges = {e.dst for e in edges if e.kind == SIDE}
    readers: dict[str, list[Edge]] = {}
    for edge in edges:
        if edge.kind == MAIN:
            readers.setdefault(edge.src, []).append(edge)
    for group in readers.values():
        keep = next((e for e in group if e.dst in merges), None) or _joined(group, edges)
        others = [e for e in group if e is not keep]
        into = _chain_into(others[0].dst, keep.dst, edges) if len(others) == 1 else None
        if into is not None:
            # DenseNet's concat(x, new): the one other reader is a chain of boxes into the
            # same concat; that chain is the column, and x's own arrow a skip round its side
            keep.kind, into.kind = SIDE, MAIN
            continue
        for edge in others:
            edge.kind = FAN
    return edges


JOIN_WITHIN = 3  # boxes down a path where another reader's box may join it from the side: a
# gated unit's product, not a U-Net's concatenation at the bottom of the U


def _path(start: str, out: dict[str, list[Edge]]) -> list[str]:
    """The boxes down the data path from ``start``, while it goes on in one arrow."""
    path = [start]
    while len(path) < len(out) + 1:
        main = [e for e in out.get(path[-1], []) if e.kind == MAIN]
        if len(main) != 1 or main[0].dst in path:
            break
        path.append(main[0].dst)
    return path


def _joined(group: list[Edge], edges: list[Edge]) -> Edge:
    """Of the arrows that read one tensor, the one whose path another reader's box joins from
    the side a few boxes down (SwiGLU's gate: silu, then the product the up fc comes into),
    else the first: the column goes on through it, and the others run beside."""
    if len(group) < 2:
        return group[0]
    out: dict[str, list[Edge]] = {}
    for edge in edges:
        out.setdefault(edge.src, []).append(edge)
    for edge in group:
        mine = set(_path(edge.dst, out)[1:JOIN_WITHIN])
        for other in group:
            if other is not edge and any(
                s.kind == SIDE and s.dst in mine for s in out.get(other.dst, [])
            ):
                return edge
    return group[0]


def _chain_into(start: str, merge: str, edges: list[Edge]) -> Edge | None:
    """The side arrow into ``merge`` at the end of the single chain of data-path arrows that
    starts at ``start``, if there is one."""
    out: dict[str, list[Edge]] = {}
    for edge in edges:
        out.setdefault(edge.src, []).append(edge)
    here, seen = start, set()
    while here not in seen:
        seen.add(here)
        nxt = out.get(here, [])
        end = next((e for e in nxt if e.dst == merge and e.kind == SIDE), None)
        if end is not None:
            return end
        main = [e for e in nxt if e.kind == MAIN]
        if len(main) != 1:
            return None
        here = main[0].dst
    return None


def _names(graph: Graph) -> dict[str, str]:
    """The name each node's tensor goes by (``-> a``, a captured ``Z``), for labelling arrows."""
    out: dict[str, str] = {}
    for name, nid in graph.names.items():
        out.setdefault(nid, name)
    for nid in graph.inputs:
        node = graph.node(nid)
        if node.name:
            out.setdefault(nid, node.name)
    return out


def _passed(value: object, params: frozenset[str]) -> bool:
    """Whether a written value is one of ``params`` passed on (``causal=causal``, ``h=h``)."""
    if isinstance(value, ParamRef):
        return value.name in params
    if isinstance(value, Expr):
        names = value.free_symbols
        return bool(names) and names <= params
    return False

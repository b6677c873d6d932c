"""Stage 2, build: the graph each construct becomes, and `verify` on every spec of specs/.

The graph is what every later stage reads, so these tests pin its structure rather than its text
(test_stages.py holds the text): node kinds and ids, the order of input ports (concat and
cross-attention depend on it), hyper-parameters in canonical form, and the hierarchy of block
calls, ×N frames and residual groups kept as nested graphs with their captures.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lbdl_dsl.compiler import build as build_stage
from lbdl_dsl.compiler.build import _LayerPlan
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.graph import (
    CountAssert,
    Graph,
    LayerNode,
    ParamRef,
    Program,
    ShapeAssert,
    verify,
    walk,
)
from lbdl_dsl.compiler.hparams import default_value
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.compiler.paths import arrays
from lbdl_dsl.compiler.stages import Built
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers import HP, LAYERS, Layer
from lbdl_dsl.core.layers.base import example_model
from lbdl_dsl.core.symbolic import Expr, sym

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "specs").glob("*.lbdl"))


@pytest.fixture
def build(compile_text: Callable[..., Checked]) -> Callable[[str], Program]:
    def run(text: str) -> Program:
        program = compile_text(text, stop_after="build").program
        assert program is not None
        verify(program, set(LAYERS))
        return program

    return run


def ops(graph: Graph) -> list[str]:
    return [n.op or n.kind for n in graph.nodes()]


def edges(graph: Graph, node_id: str) -> list[str]:
    return graph.preds(node_id)


# -- every spec in the repository ----------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_every_spec_builds_into_a_graph_that_verifies(spec: Path) -> None:
    compiled = compile_spec(spec, stop_after="build")
    assert isinstance(compiled, Built) and compiled.parsed.file == str(spec)
    verify(compiled.program, set(LAYERS))
    for _, node in walk(compiled.program.model.body, compiled.program.blocks):
        assert node.span.file  # every node points back into a file


def test_the_specs_folder_is_not_empty() -> None:
    assert any(p.name == "resnet50.lbdl" for p in SPECS)


# -- boxes ---------------------------------------------------------------------------------


def test_a_chain_of_boxes(build) -> None:
    program = build("model m:\n  input X: 1×28×28\n  conv-2d k=5  32×24×24\n  relu\n")
    g = program.model.body
    assert ops(g) == ["input", "conv-2d", "relu"]
    assert [n.id for n in g.nodes()] == ["input:X", "conv_2d_0", "relu_0"]
    assert edges(g, "conv_2d_0") == ["input:X"] and edges(g, "relu_0") == ["conv_2d_0"]
    assert g.inputs == ["input:X"] and g.result == "relu_0"
    assert g.outputs == [("Y", "relu_0")]  # an unnamed model output is Y


def test_hyper_parameters_are_canonical_and_defaults_filled(build) -> None:
    program = build(
        "model m:\n  input X: 3×8×8\n  conv-2d k=3 p=same bias=false  8×8×8\n"
        "  leaky relu a=0.2\n  gelu approximate=true\n  dropout\n"
    )
    conv, leaky, gelu, drop = list(program.model.body.nodes())[1:]
    hp = conv.hp
    assert hp["k"] == (Expr.lift(3), Expr.lift(3))
    assert hp["s"] == (Expr.lift(1), Expr.lift(1)) and hp["p"] == "same"
    assert hp["bias"] is False and hp["c"] is None  # from the annotation, at check time
    assert conv.explicit == frozenset({"k", "p", "bias"})
    assert conv.annotation is not None and conv.annotation.text == "8×8×8"
    assert leaky.op == "leaky-relu" and leaky.hp["a"] == 0.2
    assert gelu.hp["approximate"] is True
    assert drop.hp["p"] == 0.5 and drop.explicit == frozenset()


def test_parameters_stay_symbolic_until_checked(build) -> None:
    program = build(
        "block b(S, causal=false) on T×D:\n  self-att h=S causal=causal\n"
        "model m(N=2):\n  input X: 4×8\n  b S=2\n  fc out=N*4\n"
    )
    nodes = list(program.blocks["b"].body.nodes())
    assert nodes[1].hp["h"] == sym("S")
    assert nodes[1].hp["causal"] == ParamRef("causal", nodes[1].hp["causal"].span)
    fc = list(program.model.body.nodes())[-1]
    assert fc.hp["out"] == 4 * sym("N")


def test_extra_inputs_are_ports_in_the_order_written(build) -> None:
    program = build(
        "model m:\n  input K: 4×8\n  input V: 4×8\n  input X: 4×8\n"
        "  attention(K, V)\n  -> a\n  concat(X, K, a) axis=0  16×8\n  cross-att(K) h=2\n"
        "  +(X, X)\n"
    )
    g = program.model.body
    assert edges(g, "attention_0") == ["input:X", "input:K", "input:V"]
    assert edges(g, "concat_0") == ["attention_0", "input:X", "input:K", "attention_0"]
    assert edges(g, "cross_att_0") == ["concat_0", "input:K"]
    assert edges(g, "add_0") == ["cross_att_0", "input:X", "input:X"]  # parallel edges kept


def test_names_froms_and_several_outputs(build) -> None:
    program = build(
        "model m:\n  input X: 8\n  fc  4  -> a\n  relu\n  -> r\n  from a\n  tanh\n"
        "  output Y\n  from r\n  output Z\n"
    )
    g = program.model.body
    assert g.names["a"] == "a" and g.names["r"] == "relu_0"  # `fc 4 -> a` is the box `a`
    assert edges(g, "tanh_0") == ["a"]
    assert g.outputs == [("Y", "tanh_0"), ("Z", "relu_0")]


def test_several_input_streams(build) -> None:
    program = build(
        "model m:\n  input A: 3×8×8\n  input B: 3×8×8\n  +(A)\n  from A\n  relu\n  output Y\n"
    )
    g = program.model.body
    assert g.inputs == ["input:A", "input:B"]
    assert edges(g, "add_0") == ["input:B", "input:A"]
    assert edges(g, "relu_0") == ["input:A"]


def test_tokens_keep_their_type_and_range(build) -> None:
    program = build("model m(V=100):\n  input X: T int<V>\n  embed  T×16\n")
    x = program.model.body.node("input:X")
    assert x.dtype == "int" and x.vocab == sym("V")
    assert x.annotation is not None and x.annotation.dims == (sym("T"),)


def test_tie_points_at_the_layer_whose_parameters_are_shared(build) -> None:
    program = build(
        "model m:\n  input X: T int<100>\n  embed  T×16  -> tokens\n  layernorm\n"
        "  fc bias=false tie=tokens  T×100\n"
    )
    fc = program.model.body.node("fc_0")
    assert fc.shares == "tokens" and "tie" not in fc.hp


# -- hierarchy -----------------------------------------------------------------------------


def test_a_block_call_keeps_the_block_body_once(build) -> None:
    program = build(
        "block b(S=1) on C×H×W:\n  conv-2d k=1 s=S  C×H/S×W/S\n"
        "model m:\n  input X: 8×8×8\n  b\n  b S=2\n"
    )
    g = program.model.body
    assert ops(g) == ["input", "b", "b"]
    first, second = g.node("b_0"), g.node("b_1")
    assert first.kind == second.kind == "call"
    assert first.hp == {} and second.hp == {"S": Expr.lift(2)}
    assert second.explicit == frozenset({"S"})
    block = program.blocks["b"]
    assert [p.name for p in block.params] == ["S"] and block.params[0].default == 1
    assert block.inputs[0].dims == (sym("C"), sym("H"), sym("W"))
    assert ops(block.body) == ["input", "conv-2d"]


def test_a_block_with_two_inputs(build) -> None:
    program = build(
        "block merge on C×H×W, skip: D×H×W:\n  concat(skip)  (C+D)×H×W\n"
        "model m:\n  input X: 4×8×8\n  relu  -> s\n  merge(s)  8×8×8\n"
    )
    block = program.blocks["merge"]
    assert [s.name for s in block.inputs] == [None, "skip"]
    assert block.body.inputs == ["input", "input_1"]
    assert edges(block.body, "concat_0") == ["input", "input_1"]
    assert edges(program.model.body, "merge_0") == ["s", "s"]


def test_nested_blocks_and_blocks_from_a_library(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "blocks.lbdl").write_text(
        "block inner on C:\n  fc  C\nblock outer on C:\n  inner\n  relu\n", "utf-8"
    )
    spec = tmp_path / "m.lbdl"
    spec.write_text('import "lib/blocks.lbdl"\nmodel m:\n  input X: 8\n  outer ×2\n', "utf-8")
    compiled = compile_spec(spec, stop_after="build")
    program = compiled.program
    assert sorted(program.blocks) == ["inner", "outer"]
    assert ops(program.blocks["outer"].body) == ["input", "inner", "relu"]
    assert len(compiled.loaded.modules) == 2
    assert [n.op for _, n in walk(program.model.body, program.blocks) if n.kind == "call"] == [
        "outer",
        "inner",
    ]


def test_a_repeat_on_a_box_is_a_frame_around_one_box(build) -> None:
    program = build("model m(N=3):\n  input X: 8\n  relu ×N  -> r\n  fc x2  8\n")
    g = program.model.body
    rep, rep2 = g.node("repeat_0"), g.node("repeat_1")
    assert rep.kind == "repeat" and rep.count == sym("N") and rep.body is not None
    assert ops(rep.body) == ["input", "relu"] and rep.body.result == "relu_0"
    assert g.names["r"] == "repeat_0"
    assert rep2.count == 2 and ops(rep2.body) == ["input", "fc"]


def test_a_repeat_frame_and_its_captures(build) -> None:
    program = build(
        "model m(N=2):\n  input X: 8\n  fc  8  -> a\n  ×N:\n    relu\n    +(a)\n    fc  8\n"
    )
    g = program.model.body
    rep = g.node("repeat_0")
    assert edges(g, "repeat_0") == ["a", "a"]  # port 0 flows in, port 1 captures `a`
    body = rep.body
    assert body.inputs == ["input", "capture_1"]
    assert body.node("capture_1").name == "a"
    assert ops(body) == ["input", "relu", "input", "+", "fc"]
    assert edges(body, "add_0") == ["relu_0", "capture_1"]


def test_residual_groups_with_and_without_a_shortcut(build) -> None:
    program = build(
        "model m:\n  input X: 8×4×4\n  relu  -> r\n"
        "  residual:\n    conv-2d k=1  8×4×4\n    +(r)\n"
        "  residual:\n    conv-2d k=1 s=2  16×2×2\n  shortcut:\n    conv-2d k=1 s=2  16×2×2\n"
    )
    g = program.model.body
    plain, short = g.node("residual_0"), g.node("residual_1")
    assert plain.shortcut is None and ops(plain.body) == ["input", "conv-2d", "input", "+"]
    assert edges(g, "residual_0") == ["r", "r"]
    assert short.shortcut is not None and ops(short.shortcut) == ["input", "conv-2d"]
    assert edges(g, "residual_1") == ["residual_0"]


def test_groups_nest(build) -> None:
    program = build(
        "model m:\n  input X: 8\n  ×2:\n    residual:\n      ×3:\n        fc  8\n      relu\n"
    )
    rep = program.model.body.node("repeat_0")
    res = rep.body.node("residual_0")
    inner = res.body.node("repeat_0")
    assert inner.count == 3 and ops(inner.body) == ["input", "fc"]
    kinds = [n.kind for _, n in walk(program.model.body)]
    assert kinds.count("input") == 4 and kinds.count("layer") == 2  # one input per scope


def test_assertions_are_kept_on_the_model_graph(build) -> None:
    program = build(
        "model m:\n  input X: 8\n  fc  4  -> h\n  assert params <= 1K\n  assert h: 4\n"
        "  assert macs == 32\n"
    )
    asserts = program.model.body.asserts
    counts = [(a.quantity, a.op, a.bound) for a in asserts if isinstance(a, CountAssert)]
    assert counts == [("params", "<=", 1000), ("macs", "==", 32)]
    (shape,) = [a for a in asserts if isinstance(a, ShapeAssert)]
    assert shape.node == "h" and shape.annotation.dims == (Expr.lift(4),) and shape.name == "h"


def test_named_boxes_keep_their_names_and_others_skip_them(build) -> None:
    """A box named in the spec is the box of that name (its parameters are `up/w`); the
    positional ids of the others skip the names given in their scope, so naming one box
    shifts nothing, and a name that is already an internal id falls back to a positional one."""
    program = build(
        "block b on C:\n  fc  C  -> input\n  relu\nmodel m:\n  input X: 8\n"
        "  fc  4  -> fc_1\n  fc  4\n  fc 8  -> up\n  b\n"
    )
    g = program.model.body
    assert ops(g) == ["input", "fc", "fc", "fc", "b"]
    assert [n.id for n in g.nodes()] == ["input:X", "fc_1", "fc_0", "up", "b_0"]
    assert [n.id for n in program.blocks["b"].body.nodes()] == ["input", "fc_0", "relu_0"]


def test_model_parameters_are_declared_in_order(build) -> None:
    program = build("model m(D=8, H=D*4, p=0.1):\n  input X: D\n  fc  H\n  dropout p=p\n")
    params = program.model.params
    assert [(p.name, p.default) for p in params] == [
        ("D", Expr.lift(8)),
        ("H", 4 * sym("D")),
        ("p", 0.1),
    ]
    assert isinstance(list(program.model.body.nodes())[-1].hp["p"], ParamRef)


def test_ids_are_stable_from_run_to_run(build) -> None:
    text = "model m:\n  input X: 8\n  fc  8\n  relu\n  fc  8\n  relu\n"
    first = [n.id for n in build(text).model.body.nodes()]
    assert first == ["input:X", "fc_0", "relu_0", "fc_1", "relu_1"]
    assert [n.id for n in build(text).model.body.nodes()] == first


def test_what_build_refuses_is_a_spec_error_not_a_crash(build) -> None:
    with pytest.raises(LbdlError, match="undefined name `nope`"):
        build("model m:\n  input X: 8\n  +(nope)\n")
    with pytest.raises(LbdlError, match="unknown layer `conv2`"):
        build("model m:\n  input X: 8\n  conv2 k=3\n")
    with pytest.raises(LbdlError, match="calls itself"):
        build("block a on C:\n  a\nmodel m:\n  input X: 8\n  a\n")


def test_hyphenated_words_are_words(build, compile_text) -> None:
    """`act=gelu-tanh` reads as one word, in a box and passed to a block; `D-K` stays a size."""
    program = build("model m:\n  input X: 8×16\n  ffw hidden=64 act=gelu-tanh\n")
    assert list(program.model.body.nodes())[1].hp["act"] == "gelu-tanh"
    text = (
        "block tl(F, act=gelu, K=1) on X: T×D:\n  ffw hidden=F act=act\n  fc  T×D-K\n\n"
        "model m(D=16):\n  input X: 8×D\n  tl F=64 act=gelu-tanh K=2\n  output Y\n"
    )
    compiled = compile_text(text)
    ffw = compiled.root[0].body[0]
    assert ffw.node.hp["act"] == ParamRef("act", ffw.node.hp["act"].span)
    assert ffw.hp["act"] == "gelu-tanh"
    assert [d.as_int() for d in compiled.outputs["Y"].shape] == [8, 14]
    with pytest.raises(
        LbdlError,
        match="is one of `gelu`, `gelu-tanh`, `relu`, `swiglu`, `geglu`, `geglu-tanh`, "
        "not `gelu-tan`",
    ):
        compile_text("model m:\n  input X: 8×16\n  ffw hidden=64 act=gelu-tan\n")


def test_a_box_added_in_one_scope_renames_no_box_of_another() -> None:
    """Positional names count per scope, so weights saved before an edit still load."""
    before = """model m(D=8):
  input X: T×D
  fc out=D
  residual:
    fc out=D
    relu
  output Y
"""
    after = before.replace("  fc out=D\n  residual:", "  fc out=D\n  fc out=D\n  residual:")

    def paths(text: str) -> set[str]:
        return {a.path for a in arrays(compile_spec(text, file="m.lbdl").root)}

    old, new = paths(before), paths(after)
    inner = {p for p in old if p.count("/") > 1}
    assert inner and inner <= new
    assert new - old == {"fc_1/w", "fc_1/b"}


def _examples() -> list[tuple[str, str]]:
    """(layer, example model) for every layer of the registry with an example, and its cases."""
    out = []
    for name, layer in sorted(LAYERS.items()):
        for shape, line in [layer.example, *layer.cases]:
            if line:
                out.append((name, example_model(shape, line, output="Y")))
    return out


@pytest.mark.parametrize(("name", "text"), _examples())
def test_the_hyper_parameters_a_box_leaves_out_are_its_layers_defaults(
    name: str, text: str
) -> None:
    """A box's hyper-parameters: those written, in their order, then every other one the layer
    declares, in its order, each its default in canonical form (None if required and given by
    the annotation). The builder works the second part out once per layer (`_LayerPlan`); the
    expectation here is made from the registry, box by box."""
    layer = LAYERS[name]
    program = compile_spec(text, file="example.lbdl", stop_after="build").program
    nodes = [n for _, n in walk(program.model.body) if isinstance(n, LayerNode) and n.op == name]
    assert nodes
    for node in nodes:
        written = node.hparams[: len(node.explicit)]
        assert {key for key, _ in written} == node.explicit
        rest: dict[str, object] = {}
        for decl in layer.hparams:
            if decl.name not in node.explicit and decl.name not in rest:
                rest[decl.name] = None if decl.required else default_value(layer, decl)
        assert node.hparams[len(node.explicit) :] == tuple(rest.items())


def test_a_layer_is_planned_once_a_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-layer work of `layer_node` is done once per name a build writes (an alias is a
    name of its own), however many boxes use it; a name no layer has is looked up once too."""
    made: list[str] = []

    class Counted(_LayerPlan):
        __slots__ = ()

        def __init__(self, layer: Layer) -> None:
            made.append(layer.name)
            super().__init__(layer)

    monkeypatch.setattr(build_stage, "_LayerPlan", Counted)
    lines = ["block unit on D:", "  fc D", "  relu", "", "model m:", "  input X: 16"]
    lines += ["  fc 16", "  relu", "  layernorm", "  unit", "  linear 16"] * 40
    program = compile_spec("\n".join(lines) + "\n", file="m.lbdl", stop_after="build").program
    assert len(program.model.body) == 201
    assert sorted(made) == ["fc", "fc", "layernorm", "relu"]  # `linear` is an alias of `fc`


def test_a_missing_hyper_parameter_is_named_with_or_without_an_annotation(
    build: Callable[[str], Program],
) -> None:
    """With nothing written, the first required hyper-parameter is missing, unless an
    annotation gives it; then the first one an annotation cannot give."""
    with pytest.raises(LbdlError, match=r"`fc` needs `out`.*\n.*or the output shape"):
        build("model m:\n  input X: 8\n  fc\n  output Y\n")
    program = build("model m:\n  input X: 8\n  fc 4\n  output Y\n")
    assert program.model.body.node("fc_0").hp["out"] is None
    with pytest.raises(LbdlError, match="`conv-2d` needs `k`"):
        build("model m:\n  input X: 3×8×8\n  conv-2d  4×6×6\n  output Y\n")
    with pytest.raises(LbdlError, match="`conv-2d` needs `c`"):
        build("model m:\n  input X: 3×8×8\n  conv-2d\n  output Y\n")


def test_building_collects_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build stage runs with the collector's thresholds raised (`fewer_collections`: it
    took half the stage on 190,000 boxes) and gives the caller's back."""
    from lbdl_dsl.compiler import driver
    from lbdl_dsl.core.collector import YOUNG

    seen: list[int] = []
    build_graphs = driver.build

    def watched(loaded: Any) -> Program:
        seen.append(gc.get_threshold()[0])
        return build_graphs(loaded)

    monkeypatch.setattr(driver, "build", watched)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        compile_spec(SPECS[0], stop_after="build")
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
    assert seen == [YOUNG]


def test_a_plan_counts_a_name_declared_twice_once() -> None:
    """As in a box, the first declaration of a name is the one that counts."""
    layer = Layer(
        name="twice",
        doc="",
        category="",
        hparams=(HP("a", "size", 1), HP("a", "size"), HP("b", "size"), HP("c", "size")),
        from_annotation=(("b", 0),),
    )
    plan = _LayerPlan(layer)
    assert plan.unwritten == (("a", Expr.lift(1)), ("b", None), ("c", None))
    assert plan.first_required is not None and plan.first_required.name == "b"
    assert plan.first_unfilled is not None and plan.first_unfilled.name == "c"


def test_every_stage_of_compile_spec_collects_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """`compile_spec` itself holds the collector off, parse and check included (the decorator
    once sat on an ``@overload``, which never runs, and the stages ran with Python's defaults)."""
    from lbdl_dsl.compiler import driver
    from lbdl_dsl.core.collector import YOUNG

    seen: dict[str, int] = {}
    load, check = driver.load, driver.check

    def watched_load(*args: Any) -> Any:
        seen["parse"] = gc.get_threshold()[0]
        return load(*args)

    def watched_check(*args: Any, **kwargs: Any) -> Any:
        seen["check"] = gc.get_threshold()[0]
        return check(*args, **kwargs)

    monkeypatch.setattr(driver, "load", watched_load)
    monkeypatch.setattr(driver, "check", watched_check)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        compile_spec(SPECS[0])
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
    assert seen == {"parse": YOUNG, "check": YOUNG}


def test_a_hint_names_the_hyper_parameter_its_doc_names_first(
    build: Callable[[str], Program],
) -> None:
    """`heads=4` on attention meant `h` ("number of heads"), which the hint once missed for
    `kv` ("key/value heads"): the doc that names the word first wins."""
    with pytest.raises(LbdlError) as err:
        build("model m:\n  input X: 8×16\n  self-att heads=4\n")
    assert err.value.first.hint == "did you mean `h` (number of heads)?"

"""ONNX from the checked graph (`lbdl_dsl.backends.onnx`): ResNet-50 in no more than 1.2× the
nodes of `torch.onnx.export` of the same network (measured once, tests/fixtures/onnx/make.py),
every name ASCII and every node named by its box's path; GPT-2 as one local function call per
block; and every spec of specs/ (the gallery's) either lowered box by box and within 1e-5 of
the JAX model in onnxruntime, or refused box by box with the boxes named, and then exported
by tracing with a note that names them.

Sizes are the export tests' small ones (tests/interop/test_export.py), so that the sweep runs in
seconds per spec; the node count does not depend on the image's size.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
import onnx.inliner  # noqa: E402

import lbdl_dsl  # noqa: E402
from lbdl_dsl.backends.jax import storage  # noqa: E402
from lbdl_dsl.backends.jax import weights as files  # noqa: E402
from lbdl_dsl.backends.onnx import to_onnx  # noqa: E402
from lbdl_dsl.backends.onnx.lowering import ONNX  # noqa: E402
from lbdl_dsl.backends.onnx.names import ascii_name, ascii_names  # noqa: E402
from lbdl_dsl.cli import main  # noqa: E402
from lbdl_dsl.core.layers import LAYERS  # noqa: E402
from lbdl_dsl.interop.exporter import relative_error  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "interop"))
from test_export import SPECS, heavy, sizes, small  # noqa: E402

TORCH = json.loads((REPO / "tests" / "fixtures" / "onnx" / "torch_counts.json").read_text())
TOLERANCE = 1e-5

FALLBACK = {  # spec → the boxes with no ONNX lowering here, which send it to the traced path
    "mixtral-8x7b": {"moe"},  # (which refuses it: tests/interop/test_export.py)
    "qwen3-30b-a3b": {"moe"},
    "mamba-130m": {"mamba"},  # the selective scan (issue 41) has no ONNX lowering yet
    "t5-small": {"mha"},  # T5's score bias: none yet (its bucket `table` exports as a constant)
}


def arrays(model, values) -> dict[str, np.ndarray]:
    params, state = values
    return {k: np.asarray(v) for k, v in (files.flatten(params) | files.flatten(state)).items()}


def run(proto, xs) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: np.asarray(x) for i, x in zip(session.get_inputs(), xs, strict=True)}
    return session.run(None, feed)


def error(model, values, proto, batch: int = 2) -> float:
    xs = model.example_inputs(jax.random.key(1), batch=batch)
    want, _ = model.apply(*values, *xs)
    want = [want[k] for k in model.outputs] if isinstance(want, dict) else [want]
    return relative_error(run(proto, xs), want)


def all_names(proto) -> list[str]:
    """Every name a reader sees: the graph's, its inputs' and outputs', its values', its
    nodes', its functions' and theirs."""
    graph = proto.graph
    names = [graph.name, *(v.name for v in [*graph.input, *graph.output])]
    names += [t.name for t in graph.initializer]
    for fn in [graph, *proto.functions]:
        names += [getattr(fn, "name", "")]
        for node in fn.node:
            names += [node.name, node.op_type, *node.input, *node.output]
    return names


@pytest.fixture(scope="module")
def resnet50():
    model = lbdl_dsl.compile(REPO / "specs" / "resnet50.lbdl", H=64, W=64)
    values = model.init(jax.random.key(0))
    return model, values


def test_resnet50_has_no_more_than_1_2_times_torch_s_nodes(resnet50) -> None:
    model, values = resnet50
    folded = to_onnx(model.checked, arrays(model, values), fold=True, functions=False).model
    ops = [n.op_type for n in folded.graph.node]
    assert len(ops) <= 1.2 * TORCH["resnet50"]["nodes"], len(ops)
    assert "Transpose" not in ops and "BatchNormalization" not in ops
    assert ops.count("Conv") == TORCH["resnet50"]["ops"]["Conv"] == 53
    # with block functions the same nodes, once each function is inlined
    called = to_onnx(model.checked, arrays(model, values), fold=True).model
    assert len(onnx.inliner.inline_local_functions(called).graph.node) == len(ops)
    # one function per distinct body: the first downscaling block has stride 1, the others 2
    assert {f.name for f in called.functions} == {"resblock", "dresblock", "dresblock_1"}
    # unfolded: one BatchNormalization per batchnorm, and still no transposes
    plain = to_onnx(model.checked, arrays(model, values), functions=False).model
    plain_ops = [n.op_type for n in plain.graph.node]
    assert plain_ops.count("BatchNormalization") == 53 and "Transpose" not in plain_ops
    for proto in (folded, called, plain):
        onnx.checker.check_model(proto, full_check=True)
        assert error(model, values, proto) <= TOLERANCE


def test_resnet50_s_names_are_ascii_box_paths_and_its_batch_dynamic(resnet50) -> None:
    model, values = resnet50
    proto = to_onnx(model.checked, arrays(model, values), functions=False).model
    assert all(name.isascii() for name in all_names(proto))
    assert [o.name for o in proto.graph.output] == ["Y_hat"]
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "B"
    stored = {a.path.rsplit("/", 1)[0] for a in storage.stored(model.checked.root)}
    boxes = {"/".join(p) for p, _, _ in model.checked.walk()}
    for node in proto.graph.node:
        assert not re.search(r"jax2onnx|_\d+_\d+$", node.name), node.name
        if node.op_type in ("Conv", "BatchNormalization", "Gemm"):
            assert node.name in stored, node.name  # the box whose arrays it holds
        else:  # a relu, a pool, a residual sum: its path, less the copies' numbers
            assert re.sub(r"/\d+/", "/", node.name) in boxes, node.name
    assert "dresblock_1/residual_0/conv_2d_1" in {n.name for n in proto.graph.node}
    assert error(model, values, proto, batch=3) <= TOLERANCE


def test_gpt2_is_one_named_function_call_per_block() -> None:
    model = lbdl_dsl.compile(REPO / "specs" / "gpt2.lbdl", **(sizes("gpt2") | {"N": 3}))
    values = model.init(jax.random.key(0))
    proto = to_onnx(model.checked, arrays(model, values)).model
    calls = [n for n in proto.graph.node if n.domain == "lbdl"]
    assert [(n.op_type, n.name) for n in calls] == [
        ("tlayer", f"repeat_0/{k}/tlayer_0") for k in range(3)
    ]
    (fn,) = proto.functions
    inside = [n.op_type for n in fn.node]
    assert fn.name == "tlayer" and inside.count("Attention") == 1
    assert "self_att_0/att" in {n.name for n in fn.node}  # the composite names its mha `att`
    assert all(name.isascii() for name in all_names(proto))
    assert error(model, values, proto) <= TOLERANCE


def spec_cases() -> list:
    return [pytest.param(n, marks=pytest.mark.full) if heavy(n) else pytest.param(n) for n in SPECS]


@pytest.mark.parametrize("name", spec_cases())
def test_every_spec_lowers_box_by_box_or_names_what_it_cannot(name) -> None:
    model = small(name)
    values = model.init(jax.random.key(0))
    lowered = to_onnx(model.checked, arrays(model, values), name=model.name)
    if name in FALLBACK:
        assert lowered.model is None
        assert {r.op for r in lowered.unsupported} == FALLBACK[name]
        assert all(r.span is not None and r.reason for r in lowered.unsupported)
        return
    assert not lowered.unsupported, lowered.unsupported
    assert all(name.isascii() for name in all_names(lowered.model))
    assert error(model, values, lowered.model) <= TOLERANCE


def test_the_table_lowers_registry_entries_and_no_composite() -> None:
    assert set(ONNX) <= set(LAYERS)
    assert not [n for n in ONNX if LAYERS[n].inside is not None]


def test_names_are_made_ascii() -> None:
    assert ascii_name("Ŷ") == "Y_hat"
    assert ascii_name("x̂ₜ") == "x_hat" + "_"  # a subscript letter has no ASCII form
    assert ascii_name("α²") == "alpha2"
    assert ascii_names(["Ŷ", "Y_hat"]) == ["Y_hat", "Y_hat_1"]


def test_the_command_line_lowers_names_folds_and_falls_back(tmp_path, capsys) -> None:
    out = tmp_path / "r18.onnx"
    spec = str(REPO / "specs" / "resnet18.lbdl")
    sets = ["--set", "W=4", "I=32", "classes=10"]
    args = ["export", spec, *sets, "-o", str(out), "--fold", "--output-names", "logits"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert re.search(r"lowered box by box: \d+ nodes, 2 block functions, batchnorms folded", err)
    assert "checked in onnxruntime" in err and "traced" not in err
    proto = onnx.load(str(out))
    assert [o.name for o in proto.graph.output] == ["logits"]
    pooled = REPO / "tests" / "fixtures" / "onnx" / "pooled.lbdl"  # adaptive pooling: none
    assert main(["export", str(pooled), "-o", str(tmp_path / "p.onnx")]) == 0
    err = capsys.readouterr().err
    assert "note: traced through jax2onnx: no ONNX lowering here for `adaptive-avgpool` at " in err
    assert "pooled.lbdl:6 (adaptive_avgpool_0: no ONNX operator)" in err
    assert "checked in onnxruntime" in err
    proto = onnx.load(str(tmp_path / "p.onnx"))
    assert [o.name for o in proto.graph.output] == ["Y_hat"]  # ASCII on the traced path too
    assert main(["export", str(pooled), "--format", "stablehlo", "--fold"]) == 1
    assert "--fold and --output-names are for --format onnx" in capsys.readouterr().err


def test_a_batchnorm_is_not_folded_into_weights_another_box_shares() -> None:
    text = (
        "model tied:\n  input X: 4×8×8\n  conv-2d k=3 p=1 bias=false 4×8×8 -> a\n  batchnorm\n"
        "  conv-2d k=3 p=1 bias=false tie=a 4×8×8\n  output Y\n"
    )
    model = lbdl_dsl.compile("tied.lbdl", text=text)
    values = model.init(jax.random.key(0))
    (refused,) = to_onnx(model.checked, arrays(model, values), fold=True).unsupported
    assert (refused.path, refused.span.line) == ("conv_2d_0", 5)
    assert "folded" in refused.reason
    plain = to_onnx(model.checked, arrays(model, values)).model
    assert [n.op_type for n in plain.graph.node] == ["Conv", "BatchNormalization", "Conv"]
    assert error(model, values, plain) <= TOLERANCE

"""The sharding pass and the memory pass: flags, rules, placements, errors, bytes (no JAX).

Goldens pin GPT-3's layout under fsdp+tp and the messages of the errors the issue names; a
change made on purpose is accepted with ``LBDL_ACCEPT=1``. Bytes are checked against sums
written here from the placements, and the arrays the pass walks against the JAX module's own
parameter table for every spec of the library.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest

from lbdl_dsl.compiler import memory
from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.compiler.sharding import (
    Layout,
    layout_text,
    parse_mesh,
    parse_rules,
    placed_arrays,
    resolve,
    spec_text,
)
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.symbolic import Expr, sym

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "sharding"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"
SPECS = sorted(p.name for p in (REPO / "specs").glob("*.lbdl"))
GPT3_MESH = "data=8,fsdp=16,tensor=8"


def golden(name: str, actual: str) -> str:
    path = GOLDEN / name
    if ACCEPT:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, "utf-8")
    if not path.is_file():
        pytest.fail(f"no golden {path.name}; run with LBDL_ACCEPT=1 to write it")
    return path.read_text("utf-8")


@cache
def compiled(name: str, **overrides: int) -> Checked:
    return compile_spec(REPO / "specs" / name, overrides=overrides)


def layout(name: str, mesh: str, *words: str, **overrides: int) -> Layout:
    spec = parse_mesh(mesh)
    return resolve(compiled(name, **overrides), spec, parse_rules(list(words), spec))


def failure(name: str, mesh: str, *words: str) -> str:
    with pytest.raises(LbdlError) as info:
        layout(name, mesh, *words)
    return info.value.render(compiled(name).sources).replace(f"{REPO}/", "")


# -- flags ---------------------------------------------------------------------------------------


def test_a_mesh_is_named_axes_and_sizes_in_order() -> None:
    mesh = parse_mesh("data=8, fsdp=16,tensor=8")
    assert mesh.names == ("data", "fsdp", "tensor") and mesh.shape == (8, 16, 8)
    assert mesh.devices == 1024 and str(mesh) == GPT3_MESH
    assert mesh.size(("fsdp", "tensor")) == 128 and mesh.size(None) == 1


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("data", "`data` is not NAME=SIZE"),
        ("data=0", "must be a whole number ≥ 1"),
        ("data=two", "must be a whole number ≥ 1"),
        ("data=2,data=2", "named twice"),
        ("1x=2", "is not NAME=SIZE"),
    ],
)
def test_a_malformed_mesh_names_the_flag(text: str, says: str) -> None:
    with pytest.raises(LbdlError) as info:
        parse_mesh(text)
    message = info.value.render()
    assert message.startswith("error: --mesh: ") and says in message
    assert "hint: " in message


def test_presets_combine_and_put_structure_before_preferences() -> None:
    mesh = parse_mesh(GPT3_MESH)
    a = parse_rules(["fsdp+tp"], mesh)
    b = parse_rules(["tp+fsdp"], mesh)
    assert a.rules == b.rules and a.presets == ("fsdp", "tp")
    assert [r.source for r in a.rules][:4] == ["tp"] * 4  # heads, kv, mlp, vocab first
    assert a.batch == ("data", "fsdp")  # the mesh axes of data parallelism split the batch
    user = parse_rules(["fsdp", "embed=tensor", "batch=data"], mesh)
    assert user.rules[0].target == "embed" and user.rules[0].strict
    assert user.batch == ("data",)
    assert parse_rules([], mesh).presets == ("dp",)


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["zero3"], "no preset `zero3`"),
        (["fsdb"], "did you mean `fsdp`?"),
        (["heads=model"], "the mesh has no axis `model`"),
        (["heads=data,data"], "names a mesh axis twice"),
        (["heads"], "no preset `heads`"),
        (["heads=ten sor"], "is not TARGET=AXIS"),
    ],
)
def test_bad_rules_name_the_flag(words: list[str], says: str) -> None:
    with pytest.raises(LbdlError) as info:
        parse_rules(words, parse_mesh("data=2,tensor=2"))
    message = info.value.render()
    assert message.startswith("error: --shard: ") and says in message


def test_a_preset_needs_its_mesh_axis() -> None:
    with pytest.raises(LbdlError, match="`tp` needs a mesh axis named `tensor`"):
        parse_rules(["tp"], parse_mesh("data=4"))


# -- placements ----------------------------------------------------------------------------------


def test_gpt3_under_fsdp_and_tp_is_megatron_with_fsdp_on_the_width() -> None:
    lay = layout("gpt3.lbdl", GPT3_MESH, "fsdp+tp")
    assert layout_text(lay) == golden("gpt3.fsdp+tp.txt", layout_text(lay))
    spec = {p.path.split("/", 1)[1]: p.spec for p in lay.params.values() if "/" in p.path}
    assert spec["self_att_0/att/wq"] == (None, "fsdp", "tensor")  # column-parallel: heads split
    assert spec["self_att_0/att/wo"] == (None, "tensor", "fsdp")  # row-parallel: heads' inputs
    # ffw's fc1 and fc2 are a column-then-row pair: the hidden width between them is mlp
    assert lay.arrays["repeat_0/ffw_0/fc1/w"].roles == ("layers", "in", "mlp")
    assert spec["ffw_0/fc1/w"] == (None, "fsdp", "tensor")
    assert spec["ffw_0/fc2/w"] == (None, "tensor", "fsdp")
    # 50,257 rows divide neither tensor=8 nor fsdp=16: the embedding is split along D only
    assert lay.arrays["tokens/table"].spec == (None, "fsdp")


def test_dp_replicates_every_parameter_and_splits_the_batch() -> None:
    lay = layout("resnet18.lbdl", "data=4")
    assert all(p.pieces == 1 for p in lay.arrays.values())
    assert lay.batch == ("data",) and lay.batch_pieces == 4
    assert lay.state  # batchnorm's running averages are placed too


def test_fsdp_splits_each_parameter_along_its_first_axis_that_divides() -> None:
    lay = layout("resnet18.lbdl", "fsdp=16", "fsdp")
    stem = lay.arrays["conv_2d_0/w"]  # 7×7×3×64: kernel axes never, 3 does not divide 16
    assert stem.roles == ("kernel", "kernel", "in", "out")
    assert stem.spec == (None, None, None, "fsdp")
    assert lay.arrays["fc_0/w"].spec == ("fsdp", None)
    assert lay.arrays["fc_0/b"].pieces == 1  # 1,000 classes: not a multiple of 16
    assert any("fc_0/b" in note for note in lay.notes)


def test_symbols_find_the_axes_of_their_size() -> None:
    lay = layout("gpt.lbdl", "data=2,fsdp=2", "D=fsdp")
    wo = next(p for p in lay.params.values() if p.path.endswith("self_att_0/att/wo"))
    assert wo.spec == (None, "fsdp", None)  # two axes of size D: the first takes fsdp
    w2 = next(p for p in lay.params.values() if p.path.endswith("ffw_0/fc2/w"))
    assert w2.spec == (None, None, "fsdp")  # 4D×D: D is the second
    assert lay.arrays["fc_0/b"].pieces == 1  # V, not D


def test_a_users_rule_comes_before_the_presets() -> None:
    lay = layout("gpt3.lbdl", GPT3_MESH, "fsdp+tp", "embed=tensor")
    wq = lay.arrays["repeat_0/self_att_0/att/wq"]
    assert wq.spec == (None, "tensor", "fsdp")  # embed took tensor; heads fell to fsdp


def test_several_mesh_axes_may_split_one_axis() -> None:
    lay = layout("gpt3.lbdl", GPT3_MESH, "mlp=fsdp,tensor")
    w1 = lay.arrays["repeat_0/ffw_0/fc1/w"]
    assert w1.spec == (None, None, ("fsdp", "tensor"))
    assert w1.pieces == 128
    assert spec_text(w1.spec) == "(·, ·, fsdp+tensor)"


def test_a_symbolic_size_is_assumed_to_divide() -> None:
    text = "model m:\n  input X: T×8\n  pos-embed\n  output Y\n"
    checked = compile_spec(text, file="m.lbdl")
    mesh = parse_mesh("fsdp=4")
    lay = resolve(checked, mesh, parse_rules(["positions=fsdp"], mesh))
    assert lay.arrays["pos_embed_0/table"].spec == ("fsdp", None)
    assert lay.assumptions == ("T is a multiple of 4 (pos_embed_0/table over fsdp)",)


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spec", "mesh", "words"),
    [
        ("gpt3.tensor5", "gpt3.lbdl", "data=8,fsdp=16,tensor=5", ["fsdp+tp"]),
        ("gpt.experts", "gpt.lbdl", "data=2,tensor=2", ["experts=tensor"]),
        ("gpt.H", "gpt.lbdl", "data=2,tensor=2", ["H=tensor"]),
        ("gpt.F", "gpt.lbdl", "data=2,tensor=2", ["F=tensor"]),
        ("resnet18.tp", "resnet18.lbdl", "data=2,tensor=2", ["tp"]),
        ("resnet18.layers", "resnet18.lbdl", "data=2,fsdp=2", ["layers=fsdp"]),
        ("gpt.heads5", "gpt.lbdl", "tensor=5", ["heads=tensor"]),
    ],
)
def test_golden_error(name: str, spec: str, mesh: str, words: list[str]) -> None:
    message = failure(spec, mesh, *words) + "\n"
    assert message == golden(f"{name}.error.txt", message)


def test_a_size_that_does_not_divide_is_reported_at_the_box_once_per_role() -> None:
    message = failure("gpt3.lbdl", "data=8,fsdp=16,tensor=5", "fsdp+tp")
    assert message.count("error:") == 3  # self-att's heads and its kv heads, ffw's mlp
    assert message.startswith("specs/gpt3.lbdl:16:5: error: `self-att`: its heads axis")
    assert "specs/gpt3.lbdl:17:5: error: `ffw`: its mlp axis of 49,152" in message


def test_inside_a_block_the_error_says_where_the_block_is_used() -> None:
    message = failure("gpt.lbdl", "tensor=5", "heads=tensor")
    assert message.startswith("specs/blocks/transformer.lbdl:")
    assert "note: in block `tlayer`, used here" in message


# -- arrays and memory ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SPECS)
def test_the_pass_walks_the_arrays_of_the_jax_module(name: str) -> None:
    from lbdl_dsl.backends.jax import storage
    from lbdl_dsl.backends.jax.codegen import param_table

    c = compiled(name)
    params, state = param_table(c)
    walked = {
        a.path: (a.kind, tuple(Expr.lift(d).as_int() for d in a.shape)) for a in placed_arrays(c)
    }
    table = [(r[0], "param", r[1]) for r in params] + [(r[0], "state", r[1]) for r in state]
    # the module stores some groups' copies apart: each is one copy of a logical array
    cut = storage.cut(c.root)
    logical: dict[str, tuple[str, tuple[int, ...]]] = {}
    for path, kind, shape in table:
        view, index, whole = cut.get(path, (path, (), ()))
        lead = tuple(Expr.lift(d).as_int() for d in whole[: len(index)])
        logical[view] = (kind, (*lead, *shape))
    assert logical == walked
    order = list(dict.fromkeys(cut.get(r[0], (r[0],))[0] for r in params))
    assert order == [p for p, (kind, _) in walked.items() if kind == "param"]


def test_memory_per_device_is_each_arrays_share() -> None:
    lay = layout("gpt3.lbdl", GPT3_MESH, "fsdp+tp")
    checked = compiled("gpt3.lbdl")
    whole, rows = memory.per_device(checked, lay, [], optimizer="adam")
    params = sum(int(p.numel.as_int()) * 4 // p.pieces for p in lay.params.values())
    assert whole.params == Expr.lift(params) == whole.grads
    assert whole.optimizer == Expr.lift(2 * params + 4)  # mu, nu and Adam's int32 count
    assert whole.state == Expr() and rows == []
    # all 174.6 billion parameters, float32, over 128 pieces at most: 5.2 GiB a device
    assert 174_604_259_328 * 4 / 1024 < params < 174_604_259_328 * 4 / 16
    b, t = sym("B"), sym("T")
    assert whole.inputs == 4 * b * t  # int32 tokens, B sequences a device
    # per sample: outside the ×96 group, every box's output; inside, what its loop keeps: each
    # copy's input, the products (attention's output projection, fc2; fc1's hidden width and
    # attention's Q, K and V, which tp splits as it splits the hidden width and the heads)
    per_layer = t * 12288 * 3 + (3 * t * 12288 + t * 49152) / 8
    outside = t * 12288 * 3 + t * 50257
    # and, apart, what the backward pass of one copy computes again besides those: its two
    # layernorms, sums and dropout (T·12288 each), gelu (T·49152 over 8) and attention's
    # weights (96 heads of T×T over 8)
    again = 5 * t * 12288 + t * 49152 / 8 + 96 * t * t / 8
    assert whole.activations == (96 * per_layer + outside) * 4 * b
    assert whole.recomputed == again * 4 * b
    # going back through the output layer: the gradients of its T·50257 logits and of the
    # final layernorm's T·12288 values, the largest pair of neighbours; and through attention,
    # those of its Q, K, V and weights (over 8), larger for a long T: neither bounds the other
    # whatever T, so both count
    pair, att = t * 12288 + t * 50257, 3 * t * 12288 / 8 + 96 * t * t / 8
    assert whole.backward == (pair + att) * 4 * b
    # fsdp=16 gathers the (tied) token table whole for the output layer, and its gradient is
    # whole before it is summed: 15/16 of 50257·12288 float32 more, twice
    assert whole.gathered == Expr.lift(50257 * 12288 * 4 * 15 // 16 * 2)
    held = whole.recomputed + whole.backward + whole.gathered
    assert whole.total == whole.arguments + whole.grads + whole.activations + held


def test_optimisers_keep_their_moments_and_counters() -> None:
    lay = layout("mlp.lbdl", "data=2")
    checked = compiled("mlp.lbdl")
    params = 1_557 * 4
    for name, (moments, counters, _) in memory.OPTIMIZERS.items():
        whole, _ = memory.per_device(checked, lay, [], optimizer=name, batch=3)
        assert whole.optimizer == Expr.lift(moments * params + 4 * counters), name
        assert whole.inputs == Expr.lift(50 * 4 * 3)
        assert whole.arguments == whole.params + whole.optimizer + whole.inputs


def test_a_box_inside_a_group_counts_all_its_copies() -> None:
    lay = layout("gpt3.lbdl", GPT3_MESH, "fsdp+tp")
    checked = compiled("gpt3.lbdl")
    group = checked.root[2]
    att = group.copies[0].body[0]
    rows = [("repeat_0", group, Expr.lift(1)), ("repeat_0/self_att_0", att, Expr.lift(96))]
    _, boxes = memory.per_device(checked, lay, rows)
    whole_group, one = boxes[0].bytes, boxes[1].bytes
    assert one.params.as_int() < whole_group.params.as_int()
    assert one.params == Expr.lift(
        sum(int(p.numel.as_int()) * 4 // p.pieces for k, p in lay.params.items() if "self_att" in k)
    )
    t = sym("T")
    assert one.activations == 96 * (t * 12288 + t * 3 * 12288 / 8) * 4 * sym("B")


def test_attention_keeps_its_weights_outside_a_group_and_not_inside(tmp_path: Path) -> None:
    """Attention's registry entry (`kept`): Q, K and V always; its h·T·S weights only where no
    ×N loop computes them again; and a group's backward pass holds one copy's again."""
    figures = {}
    for name, body in (("lone", "self-att h=2"), ("looped", "self-att ×2 h=2")):
        spec = tmp_path / f"{name}.lbdl"
        spec.write_text(f"model m(D=8):\n  input X: 6×D\n  {body}\n  output Y\n", "utf-8")
        checked = compile_spec(spec)
        mesh = parse_mesh("data=1")
        lay = resolve(checked, mesh, parse_rules([], mesh))
        figures[name] = memory.per_device(checked, lay, [], batch=1)[0]
    t, d, h = 6, 8, 2
    qkv, weights = 3 * t * d, h * t * t
    # layernorm, mha, the sum: their outputs, Q, K and V, and the weights
    assert figures["lone"].activations == Expr.lift((3 * t * d + qkv + weights) * 4)
    assert figures["lone"].recomputed == Expr()
    # each copy: its input, mha's output (a product), Q, K and V; once: layernorm, the sum and
    # the weights computed again
    assert figures["looped"].activations == Expr.lift(2 * (t * d + t * d + qkv) * 4)
    assert figures["looped"].recomputed == Expr.lift((2 * t * d + weights) * 4)
    # going back through attention: the gradients of Q, K, V and the weights, more than its
    # output's and input's (2·T·D), in a loop too (the copy is computed again whole)
    for name in ("lone", "looped"):
        assert figures[name].backward == Expr.lift((qkv + weights) * 4)


def test_tensor_parallelism_splits_a_mixtures_experts_values_not_its_dispatch() -> None:
    """`Layer.kept_whole`: a mixture's router probabilities, dispatch buffers and gathered
    outputs stay whole under tp; its experts' gate, up and product values split with their
    hidden width."""
    from lbdl_dsl.compiler.instance import LayerInst

    checked = compiled("mixtral-8x7b.lbdl", N=1, D=16, H=2, KV=1, F=16, E=4, V=32, T=32)
    box = next(i for _, i, _ in checked.walk() if isinstance(i, LayerInst) and i.id == "moe")
    t, d, e, k, f = 32, 16, 4, 2, 16
    whole, inner = t * e + t * e * d + t * k * d, t * e * f * 3  # no capacity: E·T rows
    for mesh_text, rules, pieces in (("data=2", [], 1), ("data=2,tensor=2", ["tp"], 2)):
        mesh = parse_mesh(mesh_text)
        splits = memory._splits(checked, resolve(checked, mesh, parse_rules(rules, mesh)))
        assert memory._held(box, False, splits) == Expr.lift(whole + inner // pieces)


def test_the_backward_pass_holds_the_gradients_of_the_largest_pair_of_neighbours(
    tmp_path: Path,
) -> None:
    """`backward`: going back through relu, the gradient of its 32 outputs and of fc's 32
    before it (the first fc's input is the data: nothing differentiates it)."""
    spec = tmp_path / "m.lbdl"
    spec.write_text("model m(D=8):\n  input X: D\n  fc 32\n  relu\n  fc 4\n  output Y\n", "utf-8")
    checked = compile_spec(spec)
    mesh = parse_mesh("data=2")
    whole, _ = memory.per_device(
        checked, resolve(checked, mesh, parse_rules([], mesh)), [], batch=3
    )
    assert whole.backward == Expr.lift((32 + 32) * 4 * 3)  # 3 samples, float32
    assert whole.total == whole.arguments + whole.grads + whole.activations + whole.backward


def test_fsdp_holds_the_largest_weight_and_its_gradient_whole(tmp_path: Path) -> None:
    """`gathered`: fc 32's 8×32 weight, the largest, whole on each of fsdp=4's devices while its
    layer runs, and its gradient whole before the sum; dp splits no weight."""
    spec = tmp_path / "m.lbdl"
    spec.write_text("model m(D=8):\n  input X: D\n  fc 32\n  relu\n  fc 4\n  output Y\n", "utf-8")
    checked = compile_spec(spec)
    figures = {}
    for mesh_text, rules in (("fsdp=4", ["fsdp"]), ("data=4", [])):
        mesh = parse_mesh(mesh_text)
        lay = resolve(checked, mesh, parse_rules(rules, mesh))
        figures[mesh_text] = memory.per_device(checked, lay, [], batch=3)[0]
    assert figures["fsdp=4"].gathered == Expr.lift(8 * 32 * 4 * 3 // 4 * 2)
    assert figures["data=4"].gathered == Expr()


def test_a_rule_that_splits_a_convolutions_channels_splits_its_output() -> None:
    """Under `out=tensor` (the rule `lbdl check` suggests for a CNN under tp) each device
    computes its half of every convolution's channels: the kept values halve with them."""
    checked = compiled("resnet18.lbdl", W=4, I=32, classes=10, L2=1, L3=1, L4=1)
    acts = {}
    for mesh_text, rules in (("data=2,tensor=2", ["out=tensor"]), ("data=2", [])):
        mesh = parse_mesh(mesh_text)
        lay = resolve(checked, mesh, parse_rules(rules, mesh))
        acts[mesh_text] = memory.per_device(checked, lay, [], batch=1)[0].activations.as_int()
    assert acts["data=2"] / 2 < acts["data=2,tensor=2"] < acts["data=2"]

"""The vocabulary of maps: each layout operation's effect on a shape is its effect on an array;
name patterns; the streaming writer's files are plain safetensors; every map's rules name
distinct parameters."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file

from lbdl_dsl.interop import layout
from lbdl_dsl.interop.maps import MAPS
from lbdl_dsl.interop.writer import StreamWriter

OPS = [
    (layout.transpose(), (3, 5)),
    (layout.transpose(2, 0, 1), (2, 3, 4)),
    (layout.conv_weight(), (8, 3, 7, 5)),
    (layout.conv_weight(), (8, 3, 7)),
    (layout.tconv_weight(), (3, 8, 4, 4)),
    (layout.conv_as_fc(), (32, 3, 4, 4)),
    (layout.squeeze(), (1, 17, 1, 32)),
    (layout.split(3, 1), (32, 96)),
    (layout.split(3, 0), (96,)),
    (layout.split_to(3, 1, (16, 8, 8)), (32, 32)),  # Phi-3's q, k, v with 2 key/value heads of 4
    (layout.split_heads(3, 4), (96, 32)),  # GPT-NeoX's query_key_value, 4 heads of 8
    (layout.split_heads(3, 4), (96,)),
]


def test_a_split_by_heads_takes_each_head_s_slices_in_turn() -> None:
    """GPT-NeoX's rows are head 0's q, k, v, then head 1's...: q gathers every head's first
    slice, in head order (an even split would give head 0's q, k, v and head 1's q as q)."""
    rows = np.arange(2 * 3 * 4)  # 2 heads, 3 parts, 4 rows each
    q, k, v = layout.split_heads(3, 2).apply(rows)
    assert q.tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    assert k.tolist() == [4, 5, 6, 7, 16, 17, 18, 19]
    assert v.tolist() == [8, 9, 10, 11, 20, 21, 22, 23]
    with pytest.raises(ValueError, match="is not 5 heads of 3 parts"):
        layout.split_heads(3, 5).shape((24,))


@pytest.mark.parametrize(("op", "shape"), OPS, ids=[f"{o.name} {s}" for o, s in OPS])
def test_each_op_says_what_it_does_to_a_shape(op, shape) -> None:
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    out = op.apply(a)
    parts = list(out) if op.parts > 1 else [out]
    assert len(parts) == op.parts
    assert [p.shape for p in parts] == op.part_shapes(shape)
    assert parts[0].shape == op.shape(shape)


def test_conv_weight_is_pytorch_oihw_as_hwio() -> None:
    w = np.random.default_rng(0).normal(size=(8, 3, 5, 7)).astype(np.float32)
    hwio = layout.conv_weight().apply(w)
    assert hwio[4, 6, 2, 7] == w[7, 2, 4, 6]
    fc = layout.conv_as_fc().apply(w)  # rows: channel first, then the patch's rows, columns
    assert fc[2 * 35 + 4 * 7 + 6, 7] == w[7, 2, 4, 6]


def test_a_split_that_does_not_divide_says_so() -> None:
    with pytest.raises(ValueError, match="does not split into 3"):
        layout.split(3, 1).shape((32, 97))


def test_an_uneven_split_takes_its_widths_from_the_targets() -> None:
    """Phi-3's qkv_proj: H·d query rows, then KV·d key and KV·d value rows; the map says
    neither, the spec's targets do (`Rule.fitted`), and each part is its target's rows."""
    rule = layout.Rule(
        "qkv.weight", ("wq", "wk", "wv"), (layout.transpose(), layout.split_to(3, 1))
    )
    with pytest.raises(ValueError, match="those of the spec's targets"):
        rule.out_shapes((64, 32))
    fitted = rule.fitted(((32, 32), (32, 16), (32, 16)))
    assert fitted.out_shapes((64, 32)) == [(32, 32), (32, 16), (32, 16)]
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    q, k, v = fitted.apply(w)
    np.testing.assert_array_equal(k, w[32:48].T)
    np.testing.assert_array_equal(v, w[48:].T)
    assert np.array_equal(q, w[:32].T)
    with pytest.raises(ValueError, match="does not split into 32 \\+ 16 \\+ 16"):
        fitted.out_shapes((96, 32))
    assert rule.fitted(((32, 32),) * 3).out_shapes((96, 32)) == [(32, 32)] * 3


def test_patterns_index_from_their_start_and_match_whole_names() -> None:
    rule = layout.Rule("layer1.{i+1}.conv1.weight", "x")
    m = layout.pattern(rule.sources[0]).match("layer1.3.conv1.weight")
    assert m and rule.index(m) == (2,)
    assert rule.name((2,)) == "layer1.3.conv1.weight"
    before = layout.pattern(rule.sources[0]).match("layer1.0.conv1.weight")
    assert before and rule.index(before) is None  # the stage's first block, written apart
    assert not layout.pattern(rule.source).match("layer1.3.conv1.weight_orig")
    assert layout.pattern("{*}num_batches_tracked").match("layer2.0.bn1.num_batches_tracked")


def test_a_stepped_index_takes_every_other_layer() -> None:
    """``{2i}`` and ``{2i+1}`` split alternating layers between two rules (Gemma 2's sliding
    and global layers, a ×N/2 group of two): each name is one rule's, counted in steps."""
    even, odd = (layout.Rule(f"layers.{{{k}}}.w", "x") for k in ("2i", "2i+1"))
    names = {f"layers.{n}.w": n for n in range(6)}
    for rule, want in ((even, [0, 2, 4]), (odd, [1, 3, 5])):
        rx = layout.pattern(rule.sources[0])
        indices = {n: rule.index(m) for name, n in names.items() if (m := rx.match(name))}
        assert len(indices) == 6  # the pattern matches every layer's name...
        kept = {k: n for n, k in indices.items() if k is not None}  # ...the index keeps its own
        assert sorted(kept.values()) == want and sorted(kept) == [(0,), (1,), (2,)]
        assert [rule.name((k,)) for k in range(3)] == [f"layers.{n}.w" for n in want]
    # an end: every other layer before 4 (the two left over are another group's)
    bounded = layout.Rule("layers.{2i+1<4}.w", "x")
    rx = layout.pattern(bounded.sources[0])
    kept = {n: bounded.index(m) for name, n in names.items() if (m := rx.match(name))}
    assert {n: k for n, k in kept.items() if k is not None} == {1: (0,), 3: (1,)}


@pytest.mark.parametrize("family", sorted(MAPS))
def test_each_map_fills_each_parameter_once(family) -> None:
    for variant in MAPS[family]:
        targets = [t for r in variant.rules for t in r.targets]
        assert len(targets) == len(set(targets)), variant.spec
        for r in variant.rules:
            assert len(r.targets) == int(np.prod([op.parts for op in r.ops])), r


def test_the_streaming_writer_writes_plain_safetensors(tmp_path) -> None:
    arrays = {"params/a/w": np.ones((2, 3), np.float32), "state/b": np.arange(5.0)}
    path = tmp_path / "x.safetensors"
    with StreamWriter(path, {k: v.shape for k, v in arrays.items()}) as w:
        w.write_all(arrays.items())
    back = load_file(str(path))
    assert back.keys() == arrays.keys()
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)
    with pytest.raises(ValueError), StreamWriter(tmp_path / "y.safetensors", {"a": (2,)}) as w:
        w.write("a", np.zeros(3))
    assert not (tmp_path / "y.safetensors").exists()
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_a_second_index_counts_the_copies_inside_a_layer() -> None:
    rule = layout.Rule("layers.{i}.experts.{j}.w1.weight", "moe/gate")
    assert rule.letters == ("i", "j") and rule.indexed
    m = layout.pattern(rule.sources[0]).match("layers.3.experts.7.w1.weight")
    assert m and rule.index(m) == (3, 7)
    assert rule.name((3, 7)) == "layers.3.experts.7.w1.weight"
    # each index counted from its own start; {j} alone is the outermost stacked axis
    alone = layout.Rule("blocks.{j+1}.w", "moe/up")
    assert alone.letters == ("j",) and alone.name((0,)) == "blocks.1.w"
    first = layout.pattern(alone.sources[0]).match("blocks.0.w")
    assert first and alone.index(first) is None
    assert layout.Rule("norm.weight", "x").letters == ()


def test_the_streaming_writer_takes_a_stacked_tensor_copy_by_copy(tmp_path) -> None:
    experts = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)  # (N, E, D, F)
    path = tmp_path / "x.safetensors"
    with StreamWriter(path, {"params/gate": experts.shape, "params/b": (2,)}) as w:
        for i in range(2):
            for j in range(3):
                w.write("params/gate", experts[i, j])  # one expert at a time
        w.write("params/b", np.ones(2, np.float32))
    np.testing.assert_array_equal(load_file(str(path))["params/gate"], experts)
    with pytest.raises(ValueError), StreamWriter(tmp_path / "y.safetensors", {"a": (2, 3)}) as w:
        w.write("a", np.zeros(3))
        w.write("a", np.zeros(4))  # not a copy of `a`
    with pytest.raises(ValueError), StreamWriter(tmp_path / "z.safetensors", {"a": (2, 3)}) as w:
        w.write("a", np.zeros(3))  # one copy of two: incomplete
    assert not (tmp_path / "y.safetensors").exists() and not (tmp_path / "z.safetensors").exists()

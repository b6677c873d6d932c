"""Importing reference checkpoints: each tiny fixture of tests/fixtures/interop (made by the
reference implementations, see make.py there) computes, once imported into its spec, what the
reference computed, within 1e-5 of the largest output (float32, CPU)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import lbdl_dsl
from lbdl_dsl.backends.jax.runtime.module import unflatten
from lbdl_dsl.cli import main
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.interop import import_weights

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "interop"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text("utf-8"))
TOLERANCE = 1e-5


def relative_error(got, want) -> float:
    want = np.asarray(want, np.float64)
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want)))


def compute(model, params, state, name: str) -> dict[str, np.ndarray]:
    """The model's outputs on the inputs of fixture ``name``, by the fixture's output names."""
    entry = MANIFEST[name]
    io = load_file(str(FIXTURES / f"{name}.io.safetensors"))
    inputs = [jnp.asarray(io[f"input/{k}"]) for k in entry["inputs"]]
    out, _ = model.jit_apply(unflatten(params), unflatten(state), *inputs)
    out = out if isinstance(out, dict) else {entry["outputs"][0]: out}
    return {k: np.asarray(out[k]) for k in entry["outputs"]}


def run_fixture(model, params, state, name: str) -> dict[str, float]:
    io = load_file(str(FIXTURES / f"{name}.io.safetensors"))
    out = compute(model, params, state, name)
    return {k: relative_error(v, io[f"output/{k}"]) for k, v in out.items()}


@pytest.mark.parametrize("name", list(MANIFEST))
def test_imported_fixture_computes_what_the_reference_computed(name: str, tmp_path) -> None:
    entry = MANIFEST[name]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    written = import_weights(
        model, FIXTURES / f"{name}.safetensors", entry["map"], output=tmp_path / "p.safetensors"
    )
    params, state = model.load(written.path)  # the file is what `model.load` reads
    flat = {k: np.asarray(v) for k, v in lbdl_dsl_flatten(params).items()}
    errors = run_fixture(model, flat, lbdl_dsl_flatten(state), name)
    assert max(errors.values()) <= TOLERANCE, errors
    # in memory, the same arrays as in the file
    again = import_weights(model, FIXTURES / f"{name}.safetensors", entry["map"])
    assert again.params.keys() == flat.keys()
    for k, v in again.params.items():
        np.testing.assert_array_equal(v, flat[k])


def lbdl_dsl_flatten(tree):
    from lbdl_dsl.backends.jax.weights import flatten

    return {k: np.asarray(v) for k, v in flatten(tree).items()}


def test_batchnorm_running_averages_go_into_the_state() -> None:
    entry = MANIFEST["resnet18"]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    result = import_weights(model, FIXTURES / "resnet18.safetensors", "resnet")
    with safe_open(str(FIXTURES / "resnet18.safetensors"), "numpy") as f:
        mean = f.get_tensor("layer2.0.downsample.1.running_mean")
        conv = f.get_tensor("layer1.1.conv2.weight")
    np.testing.assert_array_equal(
        result.state["dbasicblock_0/residual_0/shortcut/batchnorm_0/mean"], mean
    )
    # copy 1 of the first stage's ×N group (kept apart: `storage`), from OIHW to HWIO
    np.testing.assert_array_equal(
        result.params["repeat_0/1/basicblock_0/residual_0/conv_2d_1/w"],
        conv.transpose(2, 3, 1, 0),
    )
    assert "layer1.0.bn1.num_batches_tracked" in result.ignored


def test_the_names_of_older_libraries_are_read_too(tmp_path) -> None:
    """Hub checkpoints of ViT keep transformers 4's names (``encoder.layer.{i}.attention...``)."""
    renames = {
        "layers.": "encoder.layer.",
        "attention.q_proj": "attention.attention.query",
        "attention.k_proj": "attention.attention.key",
        "attention.v_proj": "attention.attention.value",
        "attention.o_proj": "attention.output.dense",
        "mlp.fc1": "intermediate.dense",
        "mlp.fc2": "output.dense",
    }
    old = {}
    for k, v in load_file(str(FIXTURES / "vit.safetensors")).items():
        for a, b in renames.items():
            k = k.replace(a, b)
        old[k.removeprefix("vit.")] = v  # and a ViTModel's names: no prefix
    save_file(old, str(tmp_path / "old.safetensors"))
    entry = MANIFEST["vit"]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    new = import_weights(model, FIXTURES / "vit.safetensors", "vit")
    result = import_weights(model, tmp_path / "old.safetensors", "vit")
    for k, v in new.params.items():
        np.testing.assert_array_equal(result.params[k], v)


def test_sharded_checkpoints_and_model_folders_are_read(tmp_path) -> None:
    tensors = load_file(str(FIXTURES / "gpt2.safetensors"))
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    weight_map = {}
    for i, part in enumerate(halves):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({k: tensors[k] for k in part}, str(tmp_path / shard))
        weight_map |= dict.fromkeys(part, shard)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    entry = MANIFEST["gpt2"]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    whole = import_weights(model, FIXTURES / "gpt2.safetensors", "gpt2")
    for source in (index, tmp_path):
        sharded = import_weights(model, source, "gpt2")
        for k, v in whole.params.items():
            np.testing.assert_array_equal(sharded.params[k], v)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(LbdlError, match="1 shard"):
        import_weights(model, index, "gpt2")


def test_tensors_are_read_once_each_and_only_after_the_check(tmp_path, monkeypatch) -> None:
    from lbdl_dsl.interop import readers

    reads: list[str] = []
    original = readers.Checkpoint.read

    def counting(self, name):
        reads.append(name)
        return original(self, name)

    monkeypatch.setattr(readers.Checkpoint, "read", counting)
    entry = MANIFEST["gpt2"]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    import_weights(model, FIXTURES / "gpt2.safetensors", "gpt2", output=tmp_path / "a.safetensors")
    assert sorted(reads) == sorted(set(reads))  # c_attn is split three ways, read once
    reads.clear()
    with pytest.raises(LbdlError):
        import_weights(
            REPO / entry["spec"],
            FIXTURES / "gpt2.safetensors",
            "gpt2",
            overrides={**entry["set"], "D": 64},
        )
    assert reads == []


def test_a_pytorch_file_needs_torch_only_when_given(tmp_path) -> None:
    pytest.importorskip("jax")
    try:
        import torch  # noqa: F401
    except ImportError:
        path = tmp_path / "model.pt"
        path.write_bytes(b"not read")
        with pytest.raises(LbdlError, match="needs torch") as err:
            import_weights(REPO / "specs" / "mlp.lbdl", path, "gpt2")
        assert "safetensors" in str(err.value.first.hint)
    else:  # pragma: no cover - a machine with torch reads the fixture as a pickle
        pytest.skip("torch is installed here")


def test_the_command_line_writes_what_model_load_reads(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    entry = MANIFEST["bert"]
    sets = [f"{k}={v}" for k, v in entry["set"].items()]
    out = tmp_path / "bert.safetensors"
    argv = ["import", entry["spec"], "tests/fixtures/interop/bert.safetensors", "--map", "bert"]
    assert main([*argv, "--set", *sets, "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    model = lbdl_dsl.compile(entry["spec"], **entry["set"])
    params, state = model.load(out)
    flat = lbdl_dsl_flatten(params)
    errors = run_fixture(model, flat, lbdl_dsl_flatten(state), "bert")
    assert max(errors.values()) <= TOLERANCE
    # a wrong map: exit code 1, no traceback, nothing written
    bad = tmp_path / "bad.safetensors"
    assert main([*argv[:-1], "llama", "--set", *sets, "-o", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--map bert" in err
    assert not bad.exists()


def test_the_checkpoint_is_never_overwritten(tmp_path) -> None:
    ckpt = tmp_path / "gpt2.safetensors"
    ckpt.write_bytes((FIXTURES / "gpt2.safetensors").read_bytes())
    entry = MANIFEST["gpt2"]
    with pytest.raises(LbdlError, match="the checkpoint being read"):
        import_weights(REPO / entry["spec"], ckpt, "gpt2", output=ckpt, overrides=entry["set"])
    assert ckpt.read_bytes() == (FIXTURES / "gpt2.safetensors").read_bytes()


def test_an_unknown_map_is_named_with_the_maps_there_are(tmp_path) -> None:
    with pytest.raises(LbdlError, match="no map named `gtp2`") as err:
        import_weights(REPO / "specs" / "mlp.lbdl", FIXTURES / "gpt2.safetensors", "gtp2")
    assert "gpt2" in str(err.value.first.hint)


def test_unused_tensors_are_refused_unless_allowed(tmp_path) -> None:
    tensors = load_file(str(FIXTURES / "gpt2.safetensors"))
    tensors["transformer.extra_head.weight"] = np.zeros((2, 2), np.float32)
    save_file(tensors, str(tmp_path / "more.safetensors"))
    entry = MANIFEST["gpt2"]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    with pytest.raises(LbdlError, match="fill no parameter"):
        import_weights(model, tmp_path / "more.safetensors", "gpt2")
    result = import_weights(model, tmp_path / "more.safetensors", "gpt2", allow_unused=True)
    assert result.unused == ["transformer.extra_head.weight"]


def test_the_fixture_script_and_its_versions_are_committed() -> None:
    versions = json.loads((FIXTURES / "versions.json").read_text("utf-8"))
    assert {"torch", "transformers", "seed"} <= set(versions)
    assert (FIXTURES / "make.py").is_file()
    total = sum(p.stat().st_size for p in FIXTURES.glob("*.safetensors"))
    assert total < 1_000_000  # tiny models: a few hundred KB


def test_the_resnet_map_takes_the_variant_of_the_spec_and_warns_of_the_book_s_stride() -> None:
    from lbdl_dsl.interop.importer import choose_variant

    def variant(spec: str, **sets):
        model = lbdl_dsl.compile(REPO / "specs" / spec, **sets)
        return choose_variant(MAPS["resnet"], model.module["PARAMS"])

    from lbdl_dsl.interop.maps import MAPS

    assert variant("resnet18.lbdl", W=4, I=32).spec == "specs/resnet18.lbdl"
    tv = variant("resnet50-torchvision.lbdl", W=4, I=32)
    assert tv.spec == "specs/resnet50-torchvision.lbdl" and not tv.note
    book = variant("resnet50.lbdl", H=32, W=32)
    assert "specs/resnet50-torchvision.lbdl" in book.note


# The tiny LLaMA through the released specs' --set (W ≥ T: the window keeps every causal key).
RELEASED = {
    "llama2-7b": ("llama", dict(N=2, D=32, H=4, F=64, V=64, T=16)),
    "mistral-7b": ("mistral", dict(N=2, D=32, H=4, KV=2, F=64, V=64, W=16, T=16)),
}


def shared_heads_repeated(tmp_path: Path, heads: int, kv: int) -> Path:
    """The fixture with each of its ``kv`` key/value heads repeated for the ``heads // kv``
    query heads that read it: the same model, written with one key/value head per query head."""
    tensors = load_file(str(FIXTURES / "llama.safetensors"))
    for name, t in tensors.items():
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            tensors[name] = np.repeat(t.reshape(kv, -1, t.shape[1]), heads // kv, 0).reshape(
                -1, t.shape[1]
            )
    save_file(tensors, str(tmp_path / "mha.safetensors"))
    return tmp_path / "mha.safetensors"


@pytest.mark.parametrize("spec", list(RELEASED))
def test_the_llama_map_fills_the_released_specs(spec: str, tmp_path) -> None:
    """specs/llama2-7b.lbdl and specs/mistral-7b.lbdl take the tiny LLaMA and compute what
    llama-tiny.lbdl (checked against transformers above) computes with their ε, 1e-5: their
    parameter paths are the map's, and nothing but ε (a literal in them, 1e-6 in the
    fixture) separates them from the reference."""
    family, sets = RELEASED[spec]
    model = lbdl_dsl.compile(REPO / "specs" / f"{spec}.lbdl", **sets)
    source = FIXTURES / "llama.safetensors"
    if "KV" not in sets:  # LLaMA-2 7B has one key/value head per query head
        source = shared_heads_repeated(tmp_path, heads=4, kv=2)
    result = import_weights(model, source, family)
    assert sorted(result.params) == sorted(model.module["PARAMS"])
    got = compute(model, result.params, result.state, "llama")["P"]
    tiny = lbdl_dsl.compile(FIXTURES / "llama-tiny.lbdl", T=16, E=1e-5)
    ref = import_weights(tiny, FIXTURES / "llama.safetensors", "llama")
    want = compute(tiny, ref.params, ref.state, "llama")["P"]
    assert relative_error(got, want) <= 1e-6
    io = load_file(str(FIXTURES / "llama.io.safetensors"))
    assert 1e-5 < relative_error(got, io["output/P"]) < 1e-3  # ε's effect, and only that


# -- Mixtral: experts stored apart ({j}) or fused, and the released spec -------------------

MIXTRAL = dict(N=2, D=16, H=4, KV=2, F=32, E=4, V=64, T=16)  # the fixture, through --set
EXPERT = "model.layers.{}.block_sparse_moe.experts.{}.{}.weight"


def test_transformers_5_s_fused_experts_import_as_the_hub_s_experts_apart() -> None:
    """mixtral.safetensors is what the Hub's checkpoints and ``save_pretrained`` hold (each
    expert's w1, w2, w3 apart); mixtral-fused.safetensors, the same model as transformers 5
    holds it (``experts.gate_up_proj``, ``experts.down_proj``): the same parameters."""
    entry = MANIFEST["mixtral"]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    apart = import_weights(model, FIXTURES / "mixtral.safetensors", "mixtral")
    fused = import_weights(model, FIXTURES / "mixtral-fused.safetensors", "mixtral")
    assert (apart.tensors, fused.tensors) == (41, 21)
    assert apart.note == ""  # a dropless spec: nothing to say
    assert apart.params.keys() == fused.params.keys() == model.module["PARAMS"].keys()
    for k, v in apart.params.items():
        np.testing.assert_array_equal(fused.params[k], v)
    # layer 1's expert 2, its w1 transposed, at [2] of layer 1's (E, D, F) gate (the 2 layers
    # keep their arrays apart: `storage`)
    with safe_open(str(FIXTURES / "mixtral.safetensors"), "numpy") as f:
        w1 = f.get_tensor("model.layers.1.block_sparse_moe.experts.2.w1.weight")
        router = f.get_tensor("model.layers.0.block_sparse_moe.gate.weight")
    np.testing.assert_array_equal(apart.params["repeat_0/1/residual_0/moe/gate"][2], w1.T)
    np.testing.assert_array_equal(apart.params["repeat_0/0/residual_0/moe/router"], router.T)
    # the load-balancing losses are the model's to compute: they start at 0
    for layer in (0, 1):
        np.testing.assert_array_equal(apart.state[f"repeat_0/{layer}/residual_0/moe/aux"], 0.0)


def test_the_mixtral_map_fills_the_released_spec_which_drops_no_token() -> None:
    """specs/mixtral-8x7b.lbdl takes the tiny Mixtral through --set: its parameter paths are
    the fixture spec's, and it computes what the reference computes, since its `moe` asks for
    no capacity (before, a default capacity factor of 1.25 dropped tokens the reference keeps,
    0.51 of the largest logit away). A spec that asks for one in training gets a note."""
    model = lbdl_dsl.compile(REPO / "specs" / "mixtral-8x7b.lbdl", **MIXTRAL)
    result = import_weights(model, FIXTURES / "mixtral.safetensors", "mixtral")
    assert result.note == ""
    capped = lbdl_dsl.compile(FIXTURES / "mixtral-tiny.lbdl", T=16, C=1.25)
    assert "in training" in import_weights(capped, FIXTURES / "mixtral.safetensors", "mixtral").note
    tiny = lbdl_dsl.compile(FIXTURES / "mixtral-tiny.lbdl", T=16)
    ref = import_weights(tiny, FIXTURES / "mixtral.safetensors", "mixtral")
    assert result.params.keys() == ref.params.keys()
    for k, v in ref.params.items():
        np.testing.assert_array_equal(result.params[k], v)
    got = compute(model, result.params, result.state, "mixtral")["P"]
    want = compute(tiny, ref.params, ref.state, "mixtral")["P"]
    assert relative_error(got, want) <= 1e-6
    io = load_file(str(FIXTURES / "mixtral.io.safetensors"))
    assert relative_error(got, io["output/P"]) <= 1e-5  # no token dropped: the reference


def released_mixtral() -> dict[str, dict[str, tuple[int, ...]]]:
    """Mixtral-8x7B's tensor names and shapes in both layouts, as transformers makes them
    (make.py, on the meta device): a released checkpoint's header without its data."""
    text = gzip.decompress((FIXTURES / "mixtral-8x7b.names.json.gz").read_bytes())
    return {k: {n: tuple(s) for n, s in v.items()} for k, v in json.loads(text).items()}


@pytest.mark.parametrize(("layout", "tensors"), [("experts", 995), ("fused", 291)])
def test_a_released_mixtral_checkpoint_fits_the_spec_from_its_names(layout, tensors) -> None:
    """The whole check on Mixtral-8x7B's real names and shapes against specs/mixtral-8x7b.lbdl
    as published, nothing read: every parameter filled, every tensor used, the right layout."""
    from lbdl_dsl.interop.importer import plan_import
    from lbdl_dsl.interop.maps import mixtral

    shapes = released_mixtral()[layout]
    assert len(shapes) == tensors
    assert sum(int(np.prod(s)) for s in shapes.values()) == 46_702_792_704  # the spec's count
    model = lbdl_dsl.compile(REPO / "specs" / "mixtral-8x7b.lbdl")
    plan, problems, computed = plan_import(model, shapes, "mixtral")
    assert problems == []
    assert plan.family is (mixtral.EXPERTS if layout == "experts" else mixtral.FUSED)
    assert sum(len(b.names) for b in plan.bindings) == tensors
    assert plan.unused == plan.ignored == []
    assert set(plan.targets) == set(model.module["PARAMS"])
    assert list(computed) == ["repeat_0/residual_0/moe/aux"]
    gate = next(b for b in plan.bindings if b.rule.targets[0].endswith("moe/gate"))
    if layout == "experts":  # 32 layers of 8 experts, each found under its own name
        assert sorted(gate.names) == [(i, j) for i in range(32) for j in range(8)]
        assert gate.names[(31, 7)] == "model.layers.31.block_sparse_moe.experts.7.w1.weight"
    # one expert short in one layer: found from the names alone, said with both shapes
    del shapes[gate.names[(5, 3) if layout == "experts" else (5,)]]
    problems = plan_import(model, shapes, "mixtral")[1]
    assert [p.kind for p in problems] == ["missing"]
    assert "layers.5." in problems[0].message


def test_mixtral_s_experts_are_read_once_each_and_written_one_by_one(tmp_path, monkeypatch) -> None:
    """Each expert's tensor is read when its copy of the stacked parameter is written, and
    written alone: an import holds one expert at a time, not a layer's (E, D, F), nor, for
    layers kept apart (`storage`), the stacked view's (N, E, D, F)."""
    from lbdl_dsl.interop import readers, writer

    reads: list[str] = []
    writes: list[tuple[str, tuple[int, ...]]] = []
    read, write = readers.Checkpoint.read, writer.StreamWriter.write
    monkeypatch.setattr(readers.Checkpoint, "read", lambda s, n: reads.append(n) or read(s, n))
    monkeypatch.setattr(
        writer.StreamWriter, "write", lambda s, k, a: writes.append((k, a.shape)) or write(s, k, a)
    )
    entry = MANIFEST["mixtral"]
    model = lbdl_dsl.compile(REPO / entry["spec"], **entry["set"])
    out = tmp_path / "a.safetensors"
    import_weights(model, FIXTURES / "mixtral.safetensors", "mixtral", output=out)
    with safe_open(str(FIXTURES / "mixtral.safetensors"), "numpy") as f:
        assert sorted(reads) == sorted(f.keys())
    w1 = [n for n in reads if n.endswith("w1.weight")]  # layer-major, then expert by expert
    assert w1 == [EXPERT.format(i, j, "w1") for i in (0, 1) for j in range(4)]
    assert [s for k, s in writes if k.endswith("moe/gate")] == [(16, 32)] * 8
    params, _ = model.load(out)
    whole = import_weights(model, FIXTURES / "mixtral.safetensors", "mixtral")
    for k, v in lbdl_dsl_flatten(params).items():
        np.testing.assert_array_equal(v, whole.params[k])

"""`lbdl from-hf` and `lbdl_dsl.from_pretrained` on the checkpoints of tests/fixtures/hf/ (tiny
random-weight models saved by transformers' own ``save_pretrained``, with the reference's
outputs: tests/fixtures/hf/make.py).

For each: the spec written checks to the sum of the checkpoint's tensor sizes (a tied tensor is
stored, so counted, once), asserts that count itself, draws, and computes what transformers
computed; then the refusals (an unknown model_type, no config.json, tensors that do not
fit the config) as the user reads them.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

import lbdl_dsl
from lbdl_dsl.cli import main
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.interop import hf

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "hf"
CAUSAL = [
    "gpt2",
    "llama",
    "llama3",
    "llama-yarn",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3-moe",
    "phi",
    "gemma",
    "gemma2",
    "gemma3",
    "phi3",
    "starcoder2",
    "gpt-neox",
    "olmo2",
    "gpt-bigcode",
    "olmo",
]
STORED = ["llama-sharded", "gpt2-fp16", "qwen2-bf16"]  # shards, half and bfloat16 storage
# configs from-hf once computed otherwise (phi-rot1, gpt2-unscaled) or could not import
VARIANTS = ["phi-rot1", "gpt2-unscaled", "llama-bias", "phi-qkln", "gpt-bigcode-mha"]
ALL = [*CAUSAL, "bert", "vit", *STORED, *VARIANTS]


def stored_sizes(folder: Path) -> int:
    """The sum of the sizes of every tensor the checkpoint's files hold."""
    files = sorted(folder.glob("*.safetensors"))
    total = 0
    for f in files:
        with safe_open(str(f), "np") as h:
            total += sum(math.prod(h.get_slice(k).get_shape()) for k in h.keys())  # noqa: SIM118
    return total


@pytest.mark.parametrize("name", ALL)
def test_the_spec_counts_the_checkpoint_and_asserts_it(name: str) -> None:
    spec = hf.spec_for(FIXTURES / name)
    total = stored_sizes(FIXTURES / name)
    assert spec.params == total
    assert f"assert params == {total:_}" in spec.text
    checked = lbdl_dsl.check(f"{name}.lbdl", text=spec.text)
    assert checked.totals["params"].as_int() == total


@pytest.mark.parametrize("name", ["gpt2", "mixtral", "phi", "bert", "phi3"])
def test_the_written_spec_checks_and_draws(name: str, tmp_path: Path, capsys) -> None:
    """The command writes the spec and its parameters; the spec, compiled from its own file in
    another folder, imports the library's blocks, and `lbdl build --emit svg` draws it."""
    out = tmp_path / "elsewhere" / f"{name}.lbdl"
    assert main(["from-hf", str(FIXTURES / name), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert (
        f"wrote {out} (model {name}" in said
        and (tmp_path / "elsewhere" / f"{name}.safetensors").is_file()
    )
    text = out.read_text("utf-8")
    assert text.startswith("# ") and f"`{name}`" in text.splitlines()[0]
    assert main(["check", str(out)]) == 0
    assert f"{stored_sizes(FIXTURES / name):,} trainable" in capsys.readouterr().out
    assert main(["build", str(out), "--emit", "svg", "-o", str(tmp_path / "fig")]) == 0
    svg = next((tmp_path / "fig").glob("*.svg")).read_text("utf-8")
    assert svg.lstrip().startswith("<?xml") or "<svg" in svg


def test_the_written_spec_diffs_and_shards_like_the_librarys(tmp_path: Path, capsys) -> None:
    """LLaMA's spec beside the library's LLaMA-2 7B: the same boxes, other sizes; and its memory
    split over a mesh of devices."""
    out = tmp_path / "llama.lbdl"
    assert main(["from-hf", str(FIXTURES / "llama"), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["diff", str(REPO / "specs" / "llama2-7b.lbdl"), str(out)]) == 0
    said = capsys.readouterr().out
    assert "llama2_7b → llama" in said and "×32 → ×2" in said
    assert main(["check", str(out), "--set", "T=32", "--mesh", "data=2"]) == 0
    assert "per device" in capsys.readouterr().out


def _logits(model, params, state, ids: np.ndarray) -> np.ndarray:
    out, _ = model.apply(params, state, ids[None].astype(np.int32))
    return np.asarray(out)[0]


@pytest.mark.parametrize("name", CAUSAL + STORED + VARIANTS)
def test_a_causal_lm_computes_the_references_logits(name: str) -> None:
    """One forward pass over the prompt and its 32 greedy tokens: every position's logits as
    transformers', within 1e-4, so each greedy token is the reference's."""
    ref = np.load(FIXTURES / name / "reference.npz")
    model, params, state = lbdl_dsl.from_pretrained(FIXTURES / name)
    got = _logits(model, params, state, ref["ids"])
    np.testing.assert_allclose(got, ref["forward"], atol=1e-4, rtol=0)
    prompt = len(ref["prompt"])
    steps = got[prompt - 1 : -1]
    np.testing.assert_allclose(steps, ref["logits"], atol=1e-4, rtol=0)
    assert (steps.argmax(-1) == ref["ids"][prompt:]).all()


def test_bert_and_vit_compute_the_references_outputs() -> None:
    ref = np.load(FIXTURES / "bert" / "reference.npz")
    model, params, state = lbdl_dsl.from_pretrained(FIXTURES / "bert")
    out, _ = model.apply(params, state, ref["X"][None].astype(np.int32), ref["Seg"][None])
    np.testing.assert_allclose(np.asarray(out["Z"])[0], ref["Z"], atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.asarray(out["pooled"])[0], ref["pooled"], atol=1e-4, rtol=0)
    ref = np.load(FIXTURES / "vit" / "reference.npz")
    model, params, state = lbdl_dsl.from_pretrained(FIXTURES / "vit")
    out, _ = model.apply(params, state, ref["X"][None])
    np.testing.assert_allclose(np.asarray(out)[0], ref["logits"], atol=1e-4, rtol=0)


def test_the_mistral_spec_keeps_the_window_and_the_kv_heads() -> None:
    text = hf.spec_for(FIXTURES / "mistral").text
    assert "W=8" in text and "window=W" in text and "kv=KV" in text and "KV=2" in text
    assert "bias=true obias=false" in hf.spec_for(FIXTURES / "qwen2").text
    assert 'import "blocks/transformer.lbdl"' in hf.spec_for(FIXTURES / "phi").text


def test_a_pre_training_head_is_left_out_and_not_counted(tmp_path: Path, capsys) -> None:
    """BertForPreTraining's `cls.*` heads are not the spec's: said, and not in the assert."""
    from safetensors.numpy import load_file, save_file

    folder = _copy(tmp_path, "bert")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors = {f"bert.{k}": v for k, v in tensors.items()}
    tensors["cls.predictions.bias"] = np.zeros(96, np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    assert main(["from-hf", str(folder), "-o", str(tmp_path / "bert.lbdl")]) == 0
    said = capsys.readouterr().out
    assert "left out 1 tensors the spec does not hold: cls.predictions.bias" in said
    total = stored_sizes(FIXTURES / "bert")
    assert f"assert params == {total:_}" in (tmp_path / "bert.lbdl").read_text("utf-8")


# -- refusals ----------------------------------------------------------------------------------


def _run(capsys, *args: str) -> tuple[int, str]:
    code = main(["from-hf", *args])
    captured = capsys.readouterr()
    return code, captured.err


def test_gemma_s_spec_says_its_norms_gate_and_scaled_embedding() -> None:
    """Gemma came with issue 41's `offset=1` and `geglu-tanh`: its norms' gains are 1 + w, read
    as stored (never shifted), its gate is tanh-GELU, its embedding scaled by √D."""
    text = hf.spec_for(FIXTURES / "gemma").text
    assert text.count("offset=1") == 3 and "act=geglu-tanh" in text
    assert "times sqrt=D" in text and "tie=tokens" in text


def _copy(tmp_path: Path, name: str, **config) -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    data = json.loads((folder / "config.json").read_text("utf-8"))
    (folder / "config.json").write_text(json.dumps(data | config), "utf-8")
    return folder


def test_an_unknown_model_type_lists_the_supported_ones(tmp_path: Path, capsys) -> None:
    code, err = _run(capsys, str(_copy(tmp_path, "gpt2", model_type="t5")))
    assert code == 1
    assert "model_type `t5` is not supported" in err
    listed = "gpt2, llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, phi, bert, vit, gemma, gemma2"
    assert listed + ", gemma3_text, starcoder2, gpt_neox, phi3, olmo2, olmo, gpt_bigcode" in err


def test_a_folder_without_config_json_says_so(tmp_path: Path, capsys) -> None:
    folder = _copy(tmp_path, "llama")
    (folder / "config.json").unlink()
    code, err = _run(capsys, str(folder))
    assert code == 1 and "no config.json in this folder" in err
    code, err = _run(capsys, str(tmp_path / "absent"))
    assert code == 1 and "no such folder" in err


def test_tensors_that_do_not_fit_the_config_are_named(tmp_path: Path, capsys) -> None:
    """A config that says 48 where the tensors are 64 wide: every misfit is named, with the
    checkpoint's tensor and both shapes."""
    code, err = _run(
        capsys,
        str(_copy(tmp_path, "llama", intermediate_size=48)),
        "-o",
        str(tmp_path / "out" / "llama.lbdl"),
    )
    assert code == 1 and "Traceback" not in err
    assert "mlp.gate_proj.weight" in err and "64" in err and "48" in err


def test_a_config_the_spec_cannot_say_is_refused(tmp_path: Path, capsys) -> None:
    folder = _copy(tmp_path, "llama", hidden_act="gelu")
    code, err = _run(capsys, str(folder))
    assert code == 1 and "`hidden_act` 'gelu' is not supported" in err
    folder = _copy(tmp_path, "mistral", rope_parameters={"rope_type": "dynamic", "factor": 8.0})
    code, err = _run(capsys, str(folder))
    assert code == 1 and "rotary scaling `dynamic` is not supported for `mistral`" in err
    assert "`linear`, `llama3` or `yarn`" in err
    yarn = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16}
    folder = _copy(tmp_path / "3", "llama", rope_parameters=yarn | {"truncate": False})
    code, err = _run(capsys, str(folder))
    assert code == 1 and "rope_scaling's `truncate` is false" in err
    folder = _copy(tmp_path, "phi", rope_parameters={"rope_type": "linear", "factor": 2.0})
    code, err = _run(capsys, str(folder))
    assert code == 1 and "rotary scaling `linear` is not supported for `phi`" in err
    folder = _copy(tmp_path / "2", "mistral", rope_parameters={"rope_type": "llama3", "factor": 8})
    code, err = _run(capsys, str(folder))
    assert code == 1 and "rope_scaling's `low_freq_factor` must be a positive number" in err


def test_gemma2_layers_must_come_in_pairs_of_a_sliding_and_a_full_one(tmp_path, capsys) -> None:
    """The spec's ×N/2 group holds one sliding and one full layer: another order is refused,
    naming `layer_types`, never read into the wrong boxes. Caps set to null are left out, and a
    query_pre_attn_scalar equal to the head size writes no scale."""
    full = ["full_attention"] * 4
    code, err = _run(capsys, str(_copy(tmp_path, "gemma2", layer_types=full)))
    assert code == 1 and "are not pairs of a sliding layer and a full one" in err
    assert "`layer_types`" in err and "Traceback" not in err
    # caps of null are off (Gemma 2's configs may turn them off); left out, the defaults
    off = dict(attn_logit_softcapping=None, final_logit_softcapping=None)
    text = hf.spec_for(_copy(tmp_path / "off", "gemma2", **off)).text
    assert "softcap" not in text
    text = hf.spec_for(_copy(tmp_path / "default", "gemma2", query_pre_attn_scalar=16)).text
    assert "softcap=2.0" in text and "softcap c=5.0" in text and "scale=" not in text


def test_gemma3_groups_six_layers_and_names_the_map_by_the_first_left_over(
    tmp_path, capsys
) -> None:
    """8 layers: a group of six, two left over, through `--map gemma3@6`; each kind of layer
    has its own rotary base (transformers 5's rope_parameters by kind, or 4's rope_theta,
    rope_local_base_freq and a rope_scaling for the global layers); another order of layers
    is refused, and so is a map name whose number is not one."""
    spec = hf.spec_for(FIXTURES / "gemma3")
    assert spec.family == "gemma3@6" and "model gemma3(G=1, R=2," in spec.text
    assert spec.text.count("theta=100 window=W") == 6  # 5 in the group of six, 1 in ×R
    assert spec.text.count("theta=1000 rscale=linear rfactor=4.0") == 1
    v4 = dict(rope_parameters=None, rope_theta=1000.0, rope_local_base_freq=100.0,
              rope_scaling={"rope_type": "linear", "factor": 4.0})  # fmt: skip
    assert hf.spec_for(_copy(tmp_path / "v4", "gemma3", **v4)).text == spec.text
    code, err = _run(
        capsys, str(_copy(tmp_path / "odd", "gemma3", layer_types=["full_attention"] * 8))
    )
    assert code == 1 and "are not groups of five sliding layers and a full one" in err
    # transformers' Gemma 3 never reads attn_logit_softcapping: neither does its spec
    capped = hf.spec_for(_copy(tmp_path / "cap", "gemma3", attn_logit_softcapping=3.0)).text
    assert "softcap" not in capped
    assert main(["import", str(REPO / "specs" / "gemma3-4b.lbdl"), str(FIXTURES / "gemma3"),
                 "--map", "gemma3@x", "-o", str(tmp_path / "p.safetensors")]) == 1  # fmt: skip
    assert "`gemma3@` takes a whole number, the first layer left over" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["gpt_neox", "gpt_bigcode"])
def test_a_map_made_for_a_head_count_says_so(tmp_path: Path, capsys, family: str) -> None:
    """``FAMILY@K``'s refusal names what K is for that family: a head count here."""
    assert main(["import", str(REPO / "specs" / "gpt2.lbdl"), str(FIXTURES / "gpt2"),
                 "--map", f"{family}@x", "-o", str(tmp_path / "p.safetensors")]) == 1  # fmt: skip
    err = capsys.readouterr().err
    assert f"`{family}@` takes a whole number, the head count" in err and "Traceback" not in err


def test_a_scaled_rotary_is_written_as_the_config_says(tmp_path: Path) -> None:
    """transformers 4's ``rope_scaling`` beside ``rope_theta`` and 5's ``rope_parameters``
    give the same box; `linear` takes its factor alone."""
    llama3 = hf.spec_for(FIXTURES / "llama3").text
    said = "rope=true theta=10000 rscale=llama3 rfactor=32.0 rlow=1.0 rhigh=4.0 rctx=64"
    assert said in llama3
    data = json.loads((FIXTURES / "llama3" / "config.json").read_text("utf-8"))
    old = data.pop("rope_parameters")
    old_style = {"rope_theta": old.pop("rope_theta"), "rope_scaling": {**old, "type": "llama3"}}
    del old_style["rope_scaling"]["rope_type"]
    folder = _copy(tmp_path, "llama3", **old_style)
    (folder / "config.json").write_text(json.dumps(data | old_style), "utf-8")
    assert said in hf.spec_for(folder).text
    linear = {"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0}
    text = hf.spec_for(_copy(tmp_path / "linear", "llama", rope_parameters=linear)).text
    assert "rope=true theta=500000 rscale=linear rfactor=4.0 norm=rmsnorm" in text
    # YaRN: the factor left out is the context's growth; the rotated features' factor is the
    # spec's default 0.1·ln(8) + 1 unless the config gives another (written then)
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "original_max_position_embeddings": 8}
    text = hf.spec_for(_copy(tmp_path / "yarn", "llama", rope_parameters=yarn)).text
    assert "rscale=yarn rfactor=8.0 rlow=1.0 rhigh=32.0 rctx=8 norm=" in text
    given = yarn | {"factor": 2.0, "attention_factor": 1.5, "beta_fast": 16, "beta_slow": 2}
    text = hf.spec_for(_copy(tmp_path / "yarn2", "llama", rope_parameters=given)).text
    assert "rscale=yarn rfactor=2.0 rlow=2.0 rhigh=16.0 rctx=8 rattn=1.5 norm=" in text
    said = "rscale=yarn rfactor=4.0 rlow=1.0 rhigh=4.0 rctx=64 rattn=0.964326914892074"
    assert said in hf.spec_for(FIXTURES / "llama-yarn").text  # mscale over mscale_all_dim


def test_phi_rotates_the_fraction_its_config_says_where_either_version_writes_it(
    tmp_path: Path,
) -> None:
    """transformers 5 writes ``partial_rotary_factor`` inside ``rope_parameters`` (phi-rot1's
    1.0), 4 beside it: both are read; from-hf once read only the top level, found nothing, and
    rotated half of each head (logits off by 3.2)."""
    assert " rot=1 " in hf.spec_for(FIXTURES / "phi-rot1").text
    data = json.loads((FIXTURES / "phi-rot1" / "config.json").read_text("utf-8"))
    rope = data.pop("rope_parameters")
    old = {"partial_rotary_factor": rope.pop("partial_rotary_factor"), "rope_theta": 10000.0}
    folder = _copy(tmp_path, "phi-rot1")
    (folder / "config.json").write_text(json.dumps(data | old), "utf-8")
    assert " rot=1 " in hf.spec_for(folder).text
    assert " rot=0.5 " in hf.spec_for(FIXTURES / "phi").text


def test_phi_with_qk_layernorm_normalises_each_head_s_queries_and_keys(tmp_path: Path) -> None:
    """``qk_layernorm: true`` (from-hf once refused it): the parallel block's ``qk=layernorm``
    with the layers' ε, each head's queries and keys layer-normalised before the rotary, the
    map's variant reading q_layernorm and k_layernorm. Its logits are transformers' within
    1e-5 (2.1e-6; with mha's default ε of 1e-6 they are off by 3.3e-5); the same weights
    without the q/k norm are off by 1.7."""
    from safetensors.numpy import load_file, save_file

    spec = hf.spec_for(FIXTURES / "phi-qkln")
    said = "parallel ×N H=H KV=KV F=F rot=0.5 theta=10000 eps=1e-5 qk=layernorm qkeps=1e-5"
    assert said in spec.text
    assert "qk=" not in hf.spec_for(FIXTURES / "phi").text
    ref = np.load(FIXTURES / "phi-qkln" / "reference.npz")
    got = _logits(*lbdl_dsl.from_pretrained(FIXTURES / "phi-qkln"), ref["ids"])
    np.testing.assert_allclose(got, ref["forward"], atol=1e-5, rtol=0)
    bare = _copy(tmp_path, "phi-qkln", qk_layernorm=False)
    tensors = load_file(str(bare / "model.safetensors"))
    kept = {k: v for k, v in tensors.items() if "self_attn.q_layer" not in k}
    kept = {k: v for k, v in kept.items() if "self_attn.k_layer" not in k}
    assert len(tensors) - len(kept) == 8  # weight and bias, q and k, 2 layers
    save_file(kept, str(bare / "model.safetensors"))
    off = _logits(*lbdl_dsl.from_pretrained(bare), ref["ids"])
    assert np.abs(off - ref["forward"]).max() > 1.0


def test_phi3_s_spec_is_llama_s_with_its_rotary_fraction_and_window() -> None:
    """Phi-3's fused q, k, v (2 key/value heads of 4: an uneven cut) and gate, up are cut by
    its map; 0.75 of each head rotates (read inside rope_parameters); its sliding window of 8
    is on every layer, as transformers' Phi3Model masks them (the fixture's sequence is 55)."""
    spec = hf.spec_for(FIXTURES / "phi3")
    assert (
        spec.family == "phi3" and "model phi3(N=2, D=32, H=4, KV=2, F=64, V=96, W=8)" in spec.text
    )
    said = "self-att h=H kv=KV causal=true rope=true theta=10000 rot=0.75 window=W norm=rmsnorm"
    assert said in spec.text and "eps=1e-5" in spec.text and "bias=true" not in spec.text
    assert "tie=tokens" not in spec.text and "import" not in spec.text


def whole_rotary() -> dict[str, object]:
    return {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}


def test_phi3_s_other_configs_are_written_or_refused(tmp_path: Path, capsys) -> None:
    """LongRoPE (the 128k variants; transformers' `su` and `yarn` are its old names) is
    refused naming it; so is `linear`, which transformers' Phi3Config itself refuses. A whole
    rotary and no window write neither; a tied output layer ties; another activation, and a
    config whose key/value heads are not the fused tensor's, are refused naming the key or
    the tensor."""
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 3,
                "long_factor": [2.0] * 3, "partial_rotary_factor": 0.75}  # fmt: skip
    for kind in ("longrope", "su", "linear"):
        folder = _copy(tmp_path / kind, "phi3", rope_parameters=longrope | {"rope_type": kind})
        code, err = _run(capsys, str(folder), "-o", str(tmp_path / "out.lbdl"))
        assert code == 1 and f"rotary scaling `{kind}` is not supported for `phi3`" in err
        assert "Traceback" not in err and not (tmp_path / "out.lbdl").exists()
    # transformers 4's configs: rope_scaling, the base and the fraction beside it (5 takes
    # rope_scaling over rope_parameters where a config has both)
    v4 = {"rope_parameters": None, "rope_theta": 10000.0, "partial_rotary_factor": 0.75}
    folder = _copy(tmp_path / "v4", "phi3", **v4)
    assert " rot=0.75 " in hf.spec_for(folder).text
    for more in ({}, {"rope_parameters": whole_rotary()}):
        scaled = v4 | more | {"rope_scaling": {"type": "su", "short_factor": [1.0] * 3}}
        folder = _copy(tmp_path / f"v4-{len(more)}", "phi3", **scaled)
        code, err = _run(capsys, str(folder))
        assert code == 1 and "rotary scaling `su` is not supported for `phi3`" in err
    folder = _copy(tmp_path / "whole", "phi3", rope_parameters=whole_rotary(), sliding_window=None)
    text = hf.spec_for(folder).text
    assert "rot=" not in text and "window" not in text and "W=" not in text
    odd = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.625}
    with pytest.raises(LbdlError, match="0.625 of heads of 8 rotates 5 features, an odd"):
        hf.spec_for(_copy(tmp_path / "odd", "phi3", rope_parameters=odd))
    folder = _copy(tmp_path / "gelu", "phi3", hidden_act="gelu")
    code, err = _run(capsys, str(folder))
    assert code == 1 and "`hidden_act` 'gelu' is not supported" in err
    folder = _copy(tmp_path / "kv", "phi3", num_key_value_heads=4)
    code, err = _run(capsys, str(folder), "-o", str(tmp_path / "kv.lbdl"))
    assert code == 1 and "Traceback" not in err
    assert "model.layers.0.self_attn.qkv_proj.weight" in err and "does not split into" in err


def test_gpt2_writes_out_the_layer_where_tlayer_cannot_say_the_config() -> None:
    """Unscaled attention scores (``scale_attn_weights: false``) and another ε are the layer's
    two boxes with `scale=none` and `eps=`; the library's tlayer otherwise; a scale per layer
    is refused naming its key."""
    text = hf.spec_for(FIXTURES / "gpt2-unscaled").text
    assert "tlayer" not in text and "import" not in text
    assert "self-att h=H causal=true bias=true scale=none eps=1e-6" in text
    assert "ffw hidden=4D act=gelu-tanh p=0.1 eps=1e-6" in text and "layernorm eps=1e-6" in text
    assert "tlayer ×N" in hf.spec_for(FIXTURES / "gpt2").text


def test_gpt2_s_other_layer_options_are_written_or_refused(tmp_path: Path) -> None:
    relu = hf.spec_for(_copy(tmp_path / "relu", "gpt2", activation_function="relu")).text
    assert "act=relu" in relu
    folder = _copy(tmp_path / "inv", "gpt2", scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(LbdlError, match="`scale_attn_by_inverse_layer_idx` is True"):
        hf.spec_for(folder)


@pytest.mark.parametrize("name", ["mixtral", "phi3"])
def test_a_tied_model_reads_its_output_layer_from_the_embedding(name: str, tmp_path: Path) -> None:
    """``tie_word_embeddings: true`` (a tied Mixtral; Phi-4-mini): save_pretrained stores no
    ``lm_head.weight``, and the spec ties its fc to the embedding; it computes what the untied
    fixture computes with lm_head set to the embedding (from-hf once wanted an lm_head.weight
    the checkpoint lacked)."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(FIXTURES / name / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    untied = _copy(tmp_path / "untied", name)
    save_file(tensors, str(untied / "model.safetensors"))
    del tensors["lm_head.weight"]
    tied = _copy(tmp_path / "tied", name, tie_word_embeddings=True)
    save_file(tensors, str(tied / "model.safetensors"))
    assert "tie=tokens" in hf.spec_for(tied).text
    ids = np.load(FIXTURES / name / "reference.npz")["ids"]
    want = _logits(*lbdl_dsl.from_pretrained(untied), ids)
    np.testing.assert_allclose(_logits(*lbdl_dsl.from_pretrained(tied), ids), want, atol=1e-5)


def test_mistral_has_no_attention_bias_whatever_its_config_says(tmp_path: Path) -> None:
    """transformers' Mistral builds its projections without biases, even with
    ``attention_bias: true`` in its config (LLaMA's and Gemma's have them then)."""
    folder = _copy(tmp_path, "mistral", attention_bias=True)
    assert "bias=true" not in hf.spec_for(folder).text
    ref = np.load(FIXTURES / "mistral" / "reference.npz")
    got = _logits(*lbdl_dsl.from_pretrained(folder), ref["ids"])
    np.testing.assert_allclose(got, ref["forward"], atol=1e-4, rtol=0)
    llama = hf.spec_for(FIXTURES / "llama-bias").text  # attention_bias and mlp_bias
    assert "causal=true rope=true theta=10000 bias=true" in llama
    assert "ffw hidden=F act=swiglu bias=true" in llama


def test_bert_with_another_activation_writes_out_its_layers(tmp_path: Path) -> None:
    """BERT's postnorm block has gelu: for gelu_new (or relu) from-hf writes its boxes out in a
    ×N group (map variant bert.INLINE). That group, with the gelu put back, computes the
    fixture's reference: so the boxes and the map are BERT's, and only the activation moved."""
    from dataclasses import replace

    spec = hf.spec_for(_copy(tmp_path, "bert", hidden_act="gelu_new"))
    assert "postnorm" not in spec.text and "    gelu approximate=true\n" in spec.text
    assert "    relu\n" in hf.spec_for(_copy(tmp_path / "relu", "bert", hidden_act="relu")).text
    back = replace(spec, text=spec.text.replace("gelu approximate=true", "gelu"))
    model, params, state = hf.load(back)
    ref = np.load(FIXTURES / "bert" / "reference.npz")
    out, _ = model.apply(params, state, ref["X"][None].astype(np.int32), ref["Seg"][None])
    np.testing.assert_allclose(np.asarray(out["Z"])[0], ref["Z"], atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.asarray(out["pooled"])[0], ref["pooled"], atol=1e-4, rtol=0)


def test_an_untied_gemma_reads_its_own_output_layer(tmp_path: Path) -> None:
    """``tie_word_embeddings: false``: save_pretrained stores ``lm_head.weight`` and the spec's
    fc is its own (from-hf once tied it anyway and refused the tensor). With lm_head set to
    the embedding, it computes the tied fixture's reference."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(FIXTURES / "gemma" / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    folder = _copy(tmp_path, "gemma", tie_word_embeddings=False)
    save_file(tensors, str(folder / "model.safetensors"))
    assert "tie=tokens" not in hf.spec_for(folder).text
    ref = np.load(FIXTURES / "gemma" / "reference.npz")
    got = _logits(*lbdl_dsl.from_pretrained(folder), ref["ids"])
    np.testing.assert_allclose(got, ref["forward"], atol=1e-4, rtol=0)


def test_vit_s_activation_is_the_config_s(tmp_path: Path) -> None:
    text = hf.spec_for(_copy(tmp_path, "vit", hidden_act="gelu_new")).text
    assert "ffw hidden=F p=0 act=gelu-tanh eps=" in text
    assert "ffw hidden=F p=0 eps=" in hf.spec_for(FIXTURES / "vit").text


def test_qwen2_slides_only_the_layers_its_config_says(tmp_path: Path) -> None:
    """Qwen2 slides from layer ``max_window_layers`` on, and only with ``use_sliding_window``
    (transformers' ``layer_types``): a window of 4 on none of the fixture's two layers computes
    its reference exactly (a window on both would not: its sequence is 55 long); on both, the
    box says it; on one of two, from-hf refuses rather than windowing both."""
    ref = np.load(FIXTURES / "qwen2" / "reference.npz")
    none = {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2}
    folder = _copy(tmp_path / "none", "qwen2", **none, layer_types=None)
    assert "window" not in hf.spec_for(folder).text
    got = _logits(*lbdl_dsl.from_pretrained(folder), ref["ids"])
    np.testing.assert_allclose(got, ref["forward"], atol=1e-4, rtol=0)
    both = _copy(tmp_path / "both", "qwen2", **none | {"max_window_layers": 0}, layer_types=None)
    assert "window=W" in hf.spec_for(both).text and "W=4" in hf.spec_for(both).text
    listed = ["full_attention", "sliding_attention"]
    for folder in (
        _copy(tmp_path / "one", "qwen2", **none | {"max_window_layers": 1}, layer_types=None),
        _copy(tmp_path / "listed", "qwen2", **none, layer_types=listed),
    ):
        with pytest.raises(LbdlError, match="layers 1 of 2 attend through a sliding window"):
            hf.spec_for(folder)


def test_from_hf_never_replaces_a_file_of_the_user_s(tmp_path: Path, capsys) -> None:
    """-o names a spec, and from-hf writes three files: a spec it did not write, or weights
    beside one, are refused before anything is written; its own outputs are replaced; --force
    replaces anything."""
    mine = tmp_path / "mine.lbdl"
    mine.write_text("model mine(D=4):\n  input X: D\n  output X\n", "utf-8")
    code, err = _run(capsys, str(FIXTURES / "gpt2"), "-o", str(mine))
    assert code == 1 and "a file of that name exists, and lbdl from-hf did not write it" in err
    assert "--force" in err and mine.read_text("utf-8").startswith("model mine")
    assert not (tmp_path / "mine.safetensors").exists()
    weights = tmp_path / "gpt.safetensors"
    weights.write_bytes(b"the user's weights")
    code, err = _run(capsys, str(FIXTURES / "gpt2"), "-o", str(tmp_path / "gpt.lbdl"))
    assert code == 1 and "gpt.safetensors exists beside it" in err
    assert weights.read_bytes() == b"the user's weights"
    assert not (tmp_path / "gpt.lbdl").exists()
    assert _run(capsys, str(FIXTURES / "gpt2"), "-o", str(tmp_path / "gpt.lbdl"), "--force")[0] == 0
    assert weights.read_bytes() != b"the user's weights"
    assert _run(capsys, str(FIXTURES / "gpt2"), "-o", str(tmp_path / "gpt.lbdl"))[0] == 0

"""The errors of `lbdl import`, as the user reads them: golden files in tests/golden/interop/.

Each case runs the command line on a checkpoint that does not fit (made from the GPT-2
fixture, or the LLaMA and Mixtral ones), and compares everything it prints with the golden text;
every problem is listed at once, at the spec line of the box owning the parameter, with both
shapes. A change made on purpose is accepted with
``LBDL_ACCEPT=1 pytest tests/interop/test_import_errors.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lbdl_dsl.cli import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "interop"
GPT2 = "tests/fixtures/interop/gpt2.safetensors"
LLAMA = "tests/fixtures/interop/llama.safetensors"
MIXTRAL = "tests/fixtures/interop/mixtral.safetensors"
SETS = ["N=2", "D=32", "H=4", "V=64", "L=16", "T=16"]
MIXTRAL_SETS = ["N=2", "D=16", "H=4", "KV=2", "F=32", "E=4", "V=64"]
EXPERT = "model.layers.{}.block_sparse_moe.experts.{}.{}.weight"
ACCEPT = os.environ.get("LBDL_ACCEPT") == "1"


def _without(tmp: Path, *names: str) -> str:
    tensors = load_file(str(REPO / GPT2))
    for n in names:
        del tensors[n]
    save_file(tensors, str(tmp / "gpt2-partial.safetensors"))
    return str(tmp / "gpt2-partial.safetensors")


def _wider(tmp: Path) -> str:
    """The fixture with a vocabulary of 80 and an MLP twice as wide."""
    tensors = load_file(str(REPO / GPT2))
    tensors["transformer.wte.weight"] = np.zeros((80, 32), np.float32)
    for i in (0, 1):
        tensors[f"transformer.h.{i}.mlp.c_fc.weight"] = np.zeros((32, 256), np.float32)
    save_file(tensors, str(tmp / "gpt2-wider.safetensors"))
    return str(tmp / "gpt2-wider.safetensors")


def _experts(tmp: Path) -> str:
    """The Mixtral fixture with one expert short in layer 1 (its w1 and w3 gone), an expert 5
    beside experts 0 to 3 in layer 0, and layer 1's expert 3 with a wider w2."""
    tensors = load_file(str(REPO / MIXTRAL))
    del tensors[EXPERT.format(1, 2, "w1")], tensors[EXPERT.format(1, 2, "w3")]
    for w in ("w1", "w2", "w3"):
        tensors[EXPERT.format(0, 5, w)] = tensors[EXPERT.format(0, 0, w)]
    tensors[EXPERT.format(1, 3, "w2")] = np.zeros((16, 48), np.float32)
    save_file(tensors, str(tmp / "mixtral-experts.safetensors"))
    return str(tmp / "mixtral-experts.safetensors")


CASES = {
    # --map llama on GPT-2 weights: the map is named as the one that fits
    "wrong_map": lambda tmp: (GPT2, "llama", SETS),
    # two tensors missing: both said, each at its box
    "missing_tensor": lambda tmp: (
        _without(tmp, "transformer.h.1.mlp.c_fc.bias", "transformer.ln_f.weight"),
        "gpt2",
        SETS,
    ),
    # the spec's sizes against the checkpoint's: every mismatch with both shapes
    "shape_mismatch": lambda tmp: (_wider(tmp), "gpt2", SETS),
    # a depth that differs: one problem, at the ×N group
    "layer_count": lambda tmp: (GPT2, "gpt2", [*SETS[1:], "N=3"]),
    # grouped-query k/v into LLaMA-2's one key/value head per query head: Mistral's spec named
    "gqa_into_llama2": lambda tmp: (LLAMA, "llama", ["N=2", "D=32", "H=4", "F=64", "V=64"]),
    # Mixtral's experts, one tensor each: a missing one, an extra one, a wrong shape, all said
    "mixtral_experts": lambda tmp: (_experts(tmp), "mixtral", MIXTRAL_SETS),
    # 4 experts a layer into a spec of 8: one problem at the moe box, and the router's shape
    "mixtral_expert_count": lambda tmp: (MIXTRAL, "mixtral", [*MIXTRAL_SETS[:-2], "E=8", "V=64"]),
}
SPECS = {  # the others: specs/gpt2.lbdl
    "gqa_into_llama2": "specs/llama2-7b.lbdl",
    "mixtral_experts": "specs/mixtral-8x7b.lbdl",
    "mixtral_expert_count": "specs/mixtral-8x7b.lbdl",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_error_matches_its_golden(case, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    weights, family, sets = CASES[case](tmp_path)
    out = tmp_path / "out.safetensors"
    spec = SPECS.get(case, "specs/gpt2.lbdl")
    argv = ["import", spec, weights, "--map", family, "--set", *sets]
    code = main([*argv, "-o", str(out)])
    err = capsys.readouterr().err.replace(str(tmp_path), "<tmp>")
    assert code == 1
    assert "Traceback" not in err
    assert not out.exists()  # nothing written, nothing of the user's touched
    golden = GOLDEN / f"{case}.txt"
    if ACCEPT:
        golden.write_text(err, "utf-8")
    assert golden.exists(), f"no golden for {case}: run with LBDL_ACCEPT=1"
    assert err == golden.read_text("utf-8")

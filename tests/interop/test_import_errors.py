"""The errors of `lbdl import`, as the user reads them: golden files in tests/golden/interop/.

Each case runs the command line on a checkpoint that does not fit (made from the GPT-2
fixture, one from the LLaMA fixture), and compares everything it prints with the golden text;
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

from lbdl_dsl.main import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "interop"
GPT2 = "tests/fixtures/interop/gpt2.safetensors"
LLAMA = "tests/fixtures/interop/llama.safetensors"
SETS = ["N=2", "D=32", "H=4", "V=64", "L=16", "T=16"]
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
}
SPECS = {"gqa_into_llama2": "specs/llama2-7b.lbdl"}  # the others: specs/gpt2.lbdl


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

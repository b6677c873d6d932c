"""Import maps by structure (`interop/structure.py`): a spec written independently, whose
boxes have other names than the map's spec, imports the same tensors into the same places;
where two arrays would fit one of the map's paths, the error names both."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.interop import import_weights
from lbdl_dsl.interop.structure import describe

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "interop"
TINY = (FIXTURES / "mixtral-tiny.lbdl").read_text(encoding="utf-8")
RENAMED = (
    TINY.replace("-> attn", "-> mixer").replace("-> norm", "-> pre").replace("-> moe", "-> sparse")
)


def test_a_spec_with_other_box_names_imports_the_same_tensors() -> None:
    assert "-> attn" not in RENAMED and "-> sparse" in RENAMED
    theirs = import_weights(
        lbdl_dsl.compile(FIXTURES / "mixtral-tiny.lbdl", T=16),
        FIXTURES / "mixtral.safetensors",
        "mixtral",
    )
    ours = import_weights(
        lbdl_dsl.compile("renamed.lbdl", text=RENAMED, T=16),
        FIXTURES / "mixtral.safetensors",
        "mixtral",
    )
    renamed = {
        k.replace("/attn/", "/mixer/").replace("/norm/", "/pre/").replace("/moe/", "/sparse/"): v
        for k, v in theirs.params.items()
    }
    assert renamed.keys() == ours.params.keys()
    for k, v in renamed.items():
        np.testing.assert_array_equal(ours.params[k], v)
    assert set(ours.state) == {k.replace("/moe/", "/sparse/") for k in theirs.state}


def test_the_structure_of_a_path_is_its_boxes_kinds_and_ranks() -> None:
    forms = describe(lbdl_dsl.check("renamed.lbdl", text=RENAMED, T=16).root)
    assert forms["repeat_0/mixer/att/wq"] == "repeat#0/self-att#0/mha#0/wq"
    assert forms["repeat_0/residual_0/sparse/router"] == "repeat#0/residual#0/moe#0/router"


def test_two_arrays_that_fit_one_path_are_named_in_the_error() -> None:
    """The router's rmsnorm replaced by a layernorm and a batchnorm: the map's `norm/scale`
    (the scale of the first norm of the layer's residual group) fits both boxes' scales."""
    text = RENAMED.replace(
        "      rmsnorm eps=1e-5                                       -> pre\n",
        "      layernorm eps=1e-5\n      batchnorm\n",
    )
    assert text != RENAMED
    with pytest.raises(LbdlError) as err:
        import_weights(
            lbdl_dsl.compile("ambiguous.lbdl", text=text, T=16),
            FIXTURES / "mixtral.safetensors",
            "mixtral",
        )
    assert "fits several arrays" in str(err.value)

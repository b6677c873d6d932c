"""Every ONNX lowering, through a one-box model, against the JAX model in onnxruntime.

Generated from the registry, as the JAX lowerings' test is: each entry that has an ONNX
lowering (`lbdl_dsl.backends.onnx.lowering.ONNX`) is compiled from its example and cases,
lowered, run in onnxruntime and compared with the JAX model on the same inputs. A case the
lowering refuses (an option with no ONNX form) must be refused by name, never crash.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import lbdl_dsl  # noqa: E402
from lbdl_dsl.backends.jax import weights as files  # noqa: E402
from lbdl_dsl.backends.onnx import to_onnx  # noqa: E402
from lbdl_dsl.backends.onnx.lowering import ONNX  # noqa: E402
from lbdl_dsl.interop.exporter import relative_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_registry import ENTRIES, example_spec  # noqa: E402

CASES = [
    pytest.param(layer, shape, line, id=f"{layer.name}: {line.strip()}")
    for layer in ENTRIES
    if layer.name in ONNX
    for shape, line in (layer.example, *layer.cases)
]


@pytest.mark.parametrize("layer,shape,line", CASES)
def test_every_onnx_lowering_computes_what_the_jax_model_does(layer, shape, line) -> None:
    sizes = {"T": 6} if "T" in re.split(r"[×\s]", shape) else {}
    model = lbdl_dsl.compile("case.lbdl", text=example_spec(shape, line), **sizes)
    params, state = model.init(jax.random.key(0))
    arrays = {k: np.asarray(v) for k, v in (files.flatten(params) | files.flatten(state)).items()}
    lowered = to_onnx(model.checked, arrays, functions=False)
    if lowered.model is None:  # an option without an ONNX form: named, with its reason
        assert [r.op for r in lowered.unsupported] == [layer.name]
        assert lowered.unsupported[0].reason and lowered.unsupported[0].span is not None
        pytest.skip(f"refused: {lowered.unsupported[0].reason}")
    xs = model.example_inputs(jax.random.key(1), batch=2)
    session = ort.InferenceSession(
        lowered.model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {i.name: np.asarray(x) for i, x in zip(session.get_inputs(), xs)})
    want, _ = model.apply(params, state, *xs)
    want = [want[k] for k in model.outputs] if isinstance(want, dict) else [want]
    assert [g.shape for g in got] == [np.shape(w) for w in want]
    if all(np.asarray(w).dtype == bool for w in want):
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    else:
        assert relative_error(got, want) <= 1e-5

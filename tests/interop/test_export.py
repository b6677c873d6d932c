"""Exports: every spec of specs/ (small configurations) to StableHLO and back through
``jax.export.deserialize``, and to ONNX in onnxruntime, each with the JAX model's outputs
within 1e-5 of the largest; the ONNX-only replacements against the runtime's functions; the
box a converter cannot express, named at its line.

The sizes are the forward tests' (`SMALL` of tests/backends/test_jax_models.py), made smaller
where the spec allows it (`TINIER`), so that all specs export in one process in seconds; the
specs whose sizes are fixed and large run in the slow test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbdl_dsl
from lbdl_dsl.cli import main
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.interop import export
from lbdl_dsl.interop.exporter import relative_error
from lbdl_dsl.interop.traced import forward

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "backends"))
from test_jax_models import SMALL  # noqa: E402

TINIER: dict[str, dict] = {
    "bert-base": dict(D=32, H=4, F=64, V=64, L=16),
    "clip": dict(E=16, Dv=32, Nv=1, Hv=4, Dt=32, Nt=1, Ht=4, V=64),
    "convnext-t": dict(I=32, C=8, classes=10),
    "dcgan-discriminator": dict(F=8),
    "dcgan-generator": dict(F=8),
    "densenet121": dict(L1=1, L2=1, L3=1, L4=1, G=8),
    "dit-s2": dict(I=8, D=48, N=2, H=2, classes=10),
    "efficientnet-b0": dict(I=32, classes=10),
    "gcn": dict(N=50, F=20, Hd=8),
    "gpt": dict(D=32, H=4, V=64),
    "gpt2": dict(D=32, H=4, V=64, L=16),
    "gpt3": dict(D=32, H=4, F=64, V=64, L=16),
    "gru-classifier": dict(V=100, D=16, Hd=16, T=20),
    "lstm-lm": dict(V=100, D=32, Hd=32),
    "mlp-mixer": dict(I=32, P=8, D=32, N=2, S=16, E=64, classes=10),
    "resnet18": dict(W=4, I=32, classes=10),
    "resnet50": dict(H=32, W=32),
    "resnet50-torchvision": dict(W=4, I=32, classes=10),
    "swin-t": dict(I=32, C=24, w=2, s=1, classes=10),
    "transformer": dict(D=32, H=4, F=64, V=64),
    "transformer_blocks": dict(D=32, H=4),
    "vit": dict(I=32, P=8, D=32, N=1, H=4, C=10),
    "vit-b16": dict(I=32, P=8, D=32, N=1, H=4, C=10),
    "whisper": dict(N=1, D=32, H=4, V=64, L=16),
}
SPECS = sorted(p.stem for p in (REPO / "specs").glob("*.lbdl"))
HEAVY = 100e6  # multiply-accumulates per sample above which a spec is checked in the slow test
TOLERANCE = 1e-5


def sizes(name: str) -> dict:
    return SMALL.get(name, {}) | TINIER.get(name, {})


def small(name: str):
    return lbdl_dsl.compile(REPO / "specs" / f"{name}.lbdl", **sizes(name))


def heavy(name: str) -> bool:
    checked = lbdl_dsl.check(REPO / "specs" / f"{name}.lbdl", **sizes(name))
    return checked.totals["macs"].as_int() > HEAVY


def round_trips(name: str, tmp: Path, batch: int = 2) -> dict[str, float]:
    """The relative difference of each export of a spec from the JAX model: StableHLO
    called after deserialization, ONNX in onnxruntime; both with a symbolic batch and the
    parameters as inputs (baking 25M of them in takes longer than the rest of the test)."""
    from lbdl_dsl.interop import onnx_export

    model = small(name)
    values = model.init(jax.random.key(0))
    xs = model.example_inputs(jax.random.key(1), batch=batch)
    want = jax.jit(forward(model, values, False))(*xs)
    want = list(want) if isinstance(want, tuple) else [want]
    errors = {}
    hlo = export(model, tmp / f"{name}.stablehlo", params="inputs", verify=False)
    back = jax.export.deserialize(bytearray(hlo.path.read_bytes()))
    assert str(back.in_avals[-1].shape[0]) == "b"  # the batch stayed symbolic
    got = back.call(*values, *xs)
    errors["stablehlo"] = relative_error(list(got) if isinstance(got, tuple) else [got], want)
    if name in NO_ONNX:  # refused at the box, before converting
        with pytest.raises(LbdlError, match=f"`{NO_ONNX[name]}` cannot be exported to ONNX"):
            export(model, tmp / f"{name}.onnx", params="inputs", verify=False)
        assert not (tmp / f"{name}.onnx").exists()
        return errors
    onnx = export(model, tmp / f"{name}.onnx", params="inputs", verify=False)
    errors["onnx"] = relative_error(onnx_export.run(onnx.path, values, xs), want)
    return errors


# specs with a box of onnx_export.NO_ONNX
NO_ONNX = {"mixtral-8x7b": "moe", "qwen3-30b-a3b": "moe", "mamba-130m": "mamba"}


@pytest.mark.parametrize("name", [n for n in SPECS if not heavy(n)])
def test_every_small_spec_exports_and_runs_back_the_same(name, tmp_path) -> None:
    errors = round_trips(name, tmp_path)
    assert max(errors.values()) <= TOLERANCE, errors


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SPECS if heavy(n)])
def test_every_large_spec_exports_and_runs_back_the_same(name, tmp_path) -> None:
    # a batch of one: the symbolic batch is checked all the same, and the small specs run
    # two samples (a heavy spec's three forward passes are most of its time)
    errors = round_trips(name, tmp_path, batch=1)
    assert max(errors.values()) <= TOLERANCE, errors


def test_parameters_as_inputs_export_a_model_larger_than_memory(tmp_path) -> None:
    # GPT-3: 175B parameters, 700 GB in float32. Taken as inputs and not checked, they are
    # needed as shapes alone, so nothing is drawn and the program is written in seconds.
    spec = REPO / "specs" / "gpt3.lbdl"
    out = tmp_path / "gpt3.stablehlo"
    result = export(spec, out, params="inputs", verify=False, overrides={"T": 2048})
    assert result.max_error is None
    back = jax.export.deserialize(bytearray(out.read_bytes()))
    *weights, tokens = back.in_avals
    assert str(tokens.shape) == "(b, 2048)"
    count = lbdl_dsl.check(spec, T=2048).totals["params"].as_int()
    assert count > 170e9 and sum(int(np.prod(a.shape)) for a in weights) == count


def test_baked_weights_from_a_file_and_a_fixed_batch(tmp_path) -> None:
    model = small("lenet")
    params, state = model.init(jax.random.key(3))
    weights = model.save(tmp_path / "lenet.safetensors", params, state)
    result = export(model, tmp_path / "lenet.onnx", weights=weights, batch=3)
    assert result.max_error is not None and result.max_error <= TOLERANCE
    assert not result.random_weights
    from lbdl_dsl.interop import onnx_export

    (x,) = model.example_inputs(jax.random.key(4), batch=3)
    (got,) = onnx_export.run(result.path, None, [x])
    want, _ = model.apply(params, state, x)
    assert relative_error([got], [want]) <= TOLERANCE
    with pytest.raises(Exception, match="(?i)dimension|shape|invalid"):
        onnx_export.run(result.path, None, [np.zeros((2, 1, 28, 28), np.float32)])


def test_onnx_replacements_compute_what_the_runtime_computes() -> None:
    import inspect

    from lbdl_dsl.backends.jax.runtime import conv as runtime
    from lbdl_dsl.backends.jax.runtime import module
    from lbdl_dsl.interop import onnx_ops

    for name, f in onnx_ops.REPLACEMENTS.items():  # called as the generated module calls them
        theirs = inspect.signature(getattr(module if name == "each_copy" else runtime, name))
        ours = inspect.signature(f)
        assert list(ours.parameters) == list(theirs.parameters), name
        assert [p.kind for p in ours.parameters.values()] == [
            p.kind for p in theirs.parameters.values()
        ], name
    key = jax.random.key(0)
    x = jax.random.normal(key, (2, 9, 11, 5))
    pool_args = ("window", "stride", "padding", "dilation")
    for k, s, p, d in [((3, 3), (2, 2), (1, 1), None), ((2, 3), (1, 2), (0, 1), (1, 2))]:
        pool = [jax.jit(f.max_pool, static_argnames=pool_args) for f in (runtime, onnx_ops)]
        a, b = (f(x, window=k, stride=s, padding=p, dilation=d) for f in pool)
        np.testing.assert_array_equal(a, b)
    tconv_args = ("stride", "padding", "output_padding", "dilation", "groups")
    for k, s, p, op, g in [(4, 2, 1, 0, 1), (3, 2, 1, 1, 5), (2, 1, 2, 0, 1)]:
        w = jax.random.normal(jax.random.fold_in(key, k), (k, k, 5, 10 // g))
        b = jnp.arange(10.0)
        kw = dict(stride=(s, s), padding=(p, p), output_padding=(op, op), groups=g)
        tconv = [jax.jit(f.conv_transpose, static_argnames=tconv_args) for f in (runtime, onnx_ops)]
        a, c = (f(x, w, b, **kw) for f in tconv)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


UNSUPPORTED = {
    # a box of the spec itself (bert's pooler)
    "bert-base": (("tanh", "jax.numpy.tanh", "jax.nn.tanh"), "specs/bert-base.lbdl:25:3", "tanh"),
    # a primitive inside a composite box (self-att's mha): the composite's line is named
    "gpt2": (
        ("dot_general", "jax.numpy.einsum", "jax.numpy.matmul"),
        "specs/blocks/transformer.lbdl:13:3",
        "self-att",
    ),
}


@pytest.mark.parametrize("spec", sorted(UNSUPPORTED))
def test_a_box_the_converter_cannot_express_is_named_at_its_line(
    spec, tmp_path, monkeypatch
) -> None:
    """As if jax2onnx had no translation for a primitive: the error names the box the user
    wrote, at its line, not a traceback. (With the parameters as inputs, the spec is traced
    even where every box has an ONNX lowering.)"""
    from jax2onnx.plugins import plugin_system

    from lbdl_dsl.interop import onnx_export

    onnx_export._converter()
    plugins, where, box = UNSUPPORTED[spec]
    for name in plugins:  # lax's, and jnp's patched ones
        monkeypatch.delitem(plugin_system.PLUGIN_REGISTRY, name)
    monkeypatch.chdir(REPO)
    sets = sizes(spec) | ({"N": 1} if spec == "gpt2" else {})
    with pytest.raises(LbdlError) as err:
        export(lbdl_dsl.compile(f"specs/{spec}.lbdl", **sets), tmp_path / "b.onnx", params="inputs")
    text = str(err.value)
    assert text.startswith(f"{where}: error: `{box}"), text
    assert f"JAX's `{plugins[0]}`" in text and not (tmp_path / "b.onnx").exists()


def test_the_command_line_exports_and_says_how_close(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "mlp.stablehlo"
    assert main(["export", "specs/mlp.lbdl", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"wrote {out} (stablehlo, symbolic batch, parameters baked in)" in err
    assert "checked in jax.export.deserialize" in err and "random" in err
    assert (
        main(["export", "specs/mlp.lbdl", "--format", "mlir", "-o", str(tmp_path / "m.mlir")]) == 0
    )
    assert "stablehlo." in (tmp_path / "m.mlir").read_text()
    assert "checked in" not in capsys.readouterr().err  # text for reading: nothing ran it
    assert main(["export", "specs/mlp.lbdl", "-o", str(tmp_path / "m.txt")]) == 1
    assert "--format" in capsys.readouterr().err

"""The layer registry: every entry complete, every example a spec that checks, defaults as decided.

One layer is one entry (STYLE.md), and docs/layers.md is generated from the entries, so an entry
without a doc, a category, an example or a lowering is a hole in the documentation and in the
backends at once. Each example is compiled as the smallest spec that holds it: the example's
input shape as ``X``, the tensors its box names in parentheses declared beside it with the same
shape, and the box line itself, whose annotation the checker then verifies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from lbdl_dsl.compiler import ast
from lbdl_dsl.compiler.hparams import normalise
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError, Span
from lbdl_dsl.core.layers import ALIASES, LAYERS, all_names, lookup
from lbdl_dsl.core.layers.base import REQUIRED, example_model
from lbdl_dsl.core.symbolic import Expr

ENTRIES = sorted(LAYERS.values(), key=lambda layer: layer.name)
ONE = ast.SizeExpr(Expr.lift(1), "1", Span.point("<test>", 1, 1))
CATEGORIES = {
    "Dense",
    "Convolution",
    "Pooling",
    "Normalisation",
    "Activation",
    "Maths",
    "Attention",
    "Transformer",
    "Tensor",
    "Combine",
    "Recurrent",
    "Constant",
}


def example_spec(input_shape: str, box_line: str) -> str:
    """The smallest model holding one registry example, its extra inputs declared first."""
    return example_model(input_shape, box_line, output="Y")


@pytest.mark.parametrize("layer", ENTRIES, ids=lambda layer: layer.name)
def test_every_entry_is_documented(layer) -> None:
    assert layer.doc.strip() and layer.doc.rstrip().endswith((".", ")")), layer.name
    assert layer.category in CATEGORIES
    for hp in layer.hparams:
        assert hp.doc, f"{layer.name}: hyper-parameter `{hp.name}` has no doc"
        with contextlib.suppress(LbdlError):  # a kind the normaliser reads: never AssertionError
            normalise(layer, hp, ONE, set(), set())
        if hp.kind == "choice":
            assert hp.choices and hp.default in hp.choices
    names = [hp.name for hp in layer.hparams]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("layer", ENTRIES, ids=lambda layer: layer.name)
def test_every_entry_has_a_reference_and_cases_that_check(
    layer, compile_text: Callable[..., Checked]
) -> None:
    """The NumPy reference sits with the entry; its extra cases are specs that check."""
    assert layer.reference is not None and callable(layer.reference)
    for i, (shape, line) in enumerate(layer.cases):
        assert line.split("(")[0].split()[0] in (layer.name, *layer.aliases)
        assert compile_text(example_spec(shape, line), name=f"case{i}.lbdl").ok


@pytest.mark.parametrize("layer", ENTRIES, ids=lambda layer: layer.name)
def test_every_entry_declares_what_the_annotation_may_fill(layer) -> None:
    lo, hi = layer.arity
    assert 1 <= lo <= hi or layer.source
    for name, _axis in layer.from_annotation:
        assert layer.hparam(name) is not None, f"{layer.name}: `{name}` is not declared"


@pytest.mark.parametrize("layer", ENTRIES, ids=lambda layer: layer.name)
def test_every_example_checks_on_its_input(layer, compile_text: Callable[..., Checked]) -> None:
    input_shape, box_line = layer.example
    assert input_shape or layer.source
    assert box_line.split("(")[0].split()[0] in (layer.name, *layer.aliases)
    compiled = compile_text(example_spec(input_shape, box_line))
    checked = compiled
    assert checked is not None and checked.ok
    (inst,) = [i for i in checked.root if i.node.kind == "layer"]
    assert inst.node.op == layer.name
    assert inst.output is not None
    if inst.node.annotation is not None:  # the annotation was checked; make sure it was used
        assert len(inst.output.shape) == len(inst.node.annotation.dims)


def test_names_and_aliases_resolve_to_their_entry() -> None:
    for alias, name in ALIASES.items():
        assert lookup(alias) is LAYERS[name]
    for name, layer in LAYERS.items():
        assert lookup(name) is layer
    assert lookup("leaky relu") is LAYERS["leaky-relu"]
    assert lookup("no-such-layer") is None
    assert all_names() == sorted(LAYERS) + sorted(ALIASES)
    assert not set(LAYERS) & set(ALIASES)


def test_the_book_s_box_names_are_all_known() -> None:
    """FIGURES.md, "Box names used in the figures"."""
    book = [
        "fc",
        "conv-1d",
        "conv-2d",
        "tconv-2d",
        "relu",
        "tanh",
        "leaky relu",
        "gelu",
        "maxpool",
        "avgpool",
        "dropout",
        "dropout-2d",
        "batchnorm",
        "layernorm",
        "reshape",
        "embed",
        "pos-enc",
        "mha",
        "self-att",
        "cross-att",
        "ffw",
        "+",
        "softargmax",
        "attention",
    ]
    assert [name for name in book if lookup(name) is None] == []


def _default(op: str, name: str):
    hp = LAYERS[op].hparam(name)
    assert hp is not None
    return hp.default


def test_defaults_where_the_sources_are_silent() -> None:
    """FIGURES.md, "Where the sources are silent", rules 3 and 5."""
    assert _default("dropout", "p") == 0.5
    assert _default("dropout-2d", "p") == 0.5
    assert _default("leaky-relu", "a") == 0.01
    assert _default("batchnorm", "eps") == 1e-5
    assert _default("batchnorm", "momentum") == 0.1
    assert _default("layernorm", "eps") == 1e-5
    assert _default("conv-2d", "s") == 1
    assert _default("conv-2d", "p") == 0
    assert _default("maxpool", "s") is None  # None: the window size
    assert _default("avgpool", "s") is None
    assert _default("fc", "bias") is True  # rule 10: fc and convolutions carry a bias
    assert _default("conv-2d", "bias") is True
    assert _default("mha", "bias") is False  # the book's attention has none
    assert _default("fc", "out") is REQUIRED


def test_a_pool_s_stride_is_its_window(compile_text: Callable[..., Checked]) -> None:
    checked = compile_text("model m:\n  input X: 32×24×24\n  maxpool k=3\n")
    assert checked.outputs["Y"].shape == (Expr.lift(32), Expr.lift(8), Expr.lift(8))
    (inst,) = checked.root
    assert inst.attrs.stride == (3, 3) and inst.attrs.pads == ((0, 0), (0, 0))
    checked = compile_text("model m:\n  input X: 32×24×24\n  conv-2d k=3  8×22×22\n")
    assert checked.root[0].attrs.stride == (1, 1)


def test_every_entry_s_parameters_count_on_its_example(
    compile_text: Callable[..., Checked],
) -> None:
    """Known counts for the examples: a guard against a parameter rule drifting unnoticed."""
    counts = {"fc": 50 * 25 + 25, "conv-2d": 5 * 5 * 32 + 32, "batchnorm": 64, "layernorm": 128}
    for op, want in counts.items():
        shape, line = LAYERS[op].example
        checked = compile_text(example_spec(shape, line), name=f"{op}.lbdl")
        assert checked.params == want, op

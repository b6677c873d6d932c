"""Stage 3, check: the book's figures give the published numbers, box by box.

Shapes, parameter counts and multiply-accumulates are the checker's whole output, so they are
tested against numbers that come from outside this project: the book's figures as FIGURES.md
records them, and the published counts of ResNet-50 and GPT-2. The rest covers what the language
promises around them: symbolic inputs, the annotation as the source of a left-out size, the
receptive field of § 4.2, assertions, ``--set``, and a checker whose work does not grow with ×N.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lbdl_dsl.compiler import infer
from lbdl_dsl.compiler.driver import CheckFailed, compile_spec
from lbdl_dsl.compiler.instance import Checked
from lbdl_dsl.core.errors import LbdlError
from lbdl_dsl.core.layers.base import fmt_shape
from lbdl_dsl.core.symbolic import Expr, sym

REPO = Path(__file__).resolve().parents[2]
T = sym("T")

Compile = Callable[..., Checked]


def shapes(checked: Checked) -> list[tuple[str, str]]:
    """(box, output shape) for each top-level box, as a figure lists them."""
    return [(i.node.op or i.kind, fmt_shape(i.output.shape)) for i in checked.root]


def out_shape(checked: Checked, name: str = "Y") -> tuple[int | str, ...]:
    tensor = checked.outputs[name]
    assert tensor is not None
    return tuple(d.as_int() if d.as_int() is not None else str(d) for d in tensor.shape)


# -- the book's figures --------------------------------------------------------------------

MLP = """\
# Fig. 5.1
model mlp:
  input X: 50
  fc    25
  relu
  fc    10
  relu
  fc    2
  output Y
"""

LENET = """\
# Fig. 5.2
model lenet:
  input X: 1×28×28
  conv-2d k=5   32×24×24
  maxpool k=3   32×8×8
  relu
  conv-2d k=5   64×4×4
  maxpool k=2   64×2×2
  relu
  reshape       256
  fc            200
  relu
  fc            10
  output Ŷ
"""


def test_fig_5_1_the_multi_layer_perceptron(compile_text: Compile) -> None:
    checked = compile_text(MLP)
    assert checked.params == 1_557
    assert shapes(checked) == [
        ("fc", "25"),
        ("relu", "25"),
        ("fc", "10"),
        ("relu", "10"),
        ("fc", "2"),
    ]
    assert checked.totals["macs"] == 50 * 25 + 25 * 10 + 10 * 2


def test_fig_5_2_lenet_box_by_box(compile_text: Compile) -> None:
    checked = compile_text(LENET)
    assert checked.params == 105_506
    assert shapes(checked) == [
        ("conv-2d", "32×24×24"),
        ("maxpool", "32×8×8"),
        ("relu", "32×8×8"),
        ("conv-2d", "64×4×4"),
        ("maxpool", "64×2×2"),
        ("relu", "64×2×2"),
        ("reshape", "256"),
        ("fc", "200"),
        ("relu", "200"),
        ("fc", "10"),
    ]
    assert out_shape(checked, "Ŷ") == (10,)


def test_fig_5_5_resnet_50_from_the_specs_folder() -> None:
    checked = compile_spec(REPO / "specs" / "resnet50.lbdl")
    assert checked.params == 25_557_032
    assert checked.totals["macs"] == 3_857_973_248
    assert out_shape(checked, "Ŷ") == (1000,)
    stages = [(op, shape) for op, shape in shapes(checked) if op in ("dresblock", "avgpool")]
    assert stages == [
        ("dresblock", "256×56×56"),
        ("dresblock", "512×28×28"),
        ("dresblock", "1024×14×14"),
        ("dresblock", "2048×7×7"),
        ("avgpool", "2048×1×1"),
    ]
    assert checked.totals["state"] == 2 * 26_560  # running mean and variance of 53 batchnorms


# The same network with a bias on every convolution: FIGURES.md gives 25,583,592.
RESNET50_BIASED = """\
block resblock on C×H×W:
  residual:
    conv-2d k=1          C/4×H×W
    batchnorm
    relu
    conv-2d k=3 p=1      C/4×H×W
    batchnorm
    relu
    conv-2d k=1          C×H×W
    batchnorm
  relu

block dresblock(S) on C×H×W:
  residual:
    conv-2d k=1 s=S      C/S×H/S×W/S
    batchnorm
    relu
    conv-2d k=3 p=1      C/S×H/S×W/S
    batchnorm
    relu
    conv-2d k=1          4C/S×H/S×W/S
    batchnorm
  shortcut:
    conv-2d k=1 s=S      4C/S×H/S×W/S
    batchnorm
  relu

model resnet50_biased(classes=1000):
  input X: 3×224×224
  conv-2d k=7 s=2 p=3    64×112×112
  batchnorm
  relu
  maxpool k=3 s=2 p=1    64×56×56
  dresblock S=1          256×56×56
  resblock ×2
  dresblock S=2          512×28×28
  resblock ×3
  dresblock S=2          1024×14×14
  resblock ×5
  dresblock S=2          2048×7×7
  resblock ×2
  avgpool k=7            2048×1×1
  reshape                2048
  fc                     classes
  output Ŷ
"""


def test_resnet_50_with_a_bias_on_every_convolution(compile_text: Compile) -> None:
    checked = compile_text(RESNET50_BIASED)
    assert checked.params == 25_583_592
    assert out_shape(checked, "Ŷ") == (1000,)


# Fig. 5.8 as GPT-2 small writes it: learned positions, a final layernorm, a tied output.
GPT2 = """\
model gpt2(N=12, D=768, V=50_257, context=1024):
  input X: context int<V>
  embed                                   context×D  -> tokens
  pos-embed len=context
  ×N:
    self-att h=12 causal=true bias=true
    ffw
  layernorm
  fc bias=false tie=tokens                context×V
  output Ŷ
"""


def test_fig_5_8_gpt_2_small(compile_text: Compile) -> None:
    checked = compile_text(GPT2)
    assert checked.params == 124_439_808
    assert out_shape(checked, "Ŷ") == (1024, 50_257)
    (rep,) = [i for i in checked.root if i.kind == "repeat"]
    assert rep.totals["params"] == 12 * 7_087_872  # one transformer layer of GPT-2 small


def test_gpt_2_counts_its_embedding_twice_when_untied(compile_text: Compile) -> None:
    checked = compile_text(GPT2.replace(" tie=tokens", ""))
    assert checked.params == 124_439_808 + 768 * 50_257


# -- symbolic inputs -----------------------------------------------------------------------

GPT_FREE_T = """\
model gpt(N=12, D=768, V=50_257):
  input X: T int<V>
  embed                       T×D  -> tokens
  pos-enc
  ×N:
    self-att h=12 causal=true
    ffw
  layernorm
  fc bias=false tie=tokens    T×V
  output Ŷ
"""


def test_a_free_sequence_length_gives_costs_as_polynomials(compile_text: Compile) -> None:
    checked = compile_text(GPT_FREE_T)
    assert checked.free == ["T"]
    assert out_shape(checked, "Ŷ") == ("T", 50_257)
    macs = checked.totals["macs"]
    quadratic = {m: c for m, c in macs.terms if m == (("T", 2),)}
    assert quadratic == {(("T", 2),): 2 * 12 * 768}  # Q·Kᵀ and A·V in each of the 12 layers
    assert "T²" in str(macs)
    assert checked.params.is_const  # parameters do not depend on the length
    assert checked.params == 123_616_512


def test_set_gives_the_free_symbol_a_value(compile_text: Compile) -> None:
    free = compile_text(GPT_FREE_T)
    fixed = compile_text(GPT_FREE_T, T=1024)
    assert fixed.free == []
    assert fixed.totals["macs"] == 145_824_153_600
    assert free.totals["macs"].evaluate({"T": 1024}) == 145_824_153_600
    assert out_shape(fixed, "Ŷ") == (1024, 50_257)


def test_a_symbolic_image_size_with_a_pool(compile_text: Compile) -> None:
    checked = compile_text(
        "model m:\n  input X: 3×H×W\n  conv-2d k=3 p=1  8×H×W\n  maxpool k=2  8×H/2×W/2\n"
    )
    assert checked.outputs["Y"].shape == (Expr.lift(8), sym("H").floordiv(2), sym("W").floordiv(2))
    assert any("H/2 is whole" in a for a in checked.assumptions)
    assert checked.totals["macs"] == 8 * 27 * sym("H") * sym("W")


# -- the annotation ------------------------------------------------------------------------


def test_the_annotation_supplies_a_left_out_size(compile_text: Compile) -> None:
    checked = compile_text(
        "model m:\n  input X: 1×28×28\n  conv-2d k=5  32×24×24\n  reshape  18432\n  fc  10\n"
    )
    conv, reshape, fc = checked.root
    assert conv.hp["c"] == 32 and fc.hp["out"] == 10
    assert reshape.hp["to"] == (Expr.lift(18432),)
    tokens = compile_text("model m:\n  input X: T int<100>\n  embed  T×64\n  lstm  T×32\n")
    embed, lstm = tokens.root
    assert embed.hp["d"] == 64 and lstm.hp["h"] == 32


def test_the_annotation_is_also_a_check(compile_text: Compile) -> None:
    with pytest.raises(CheckFailed) as info:
        compile_text("model m:\n  input X: 1×28×28\n  conv-2d k=5  32×20×20\n")
    message = info.value.render()
    assert "`conv-2d` gives 32×24×24, but the annotation says 32×20×20" in message
    assert "its input is 1×28×28, from input `X`" in message
    assert info.value.first.span.line == 3


def test_a_hyper_parameter_written_out_agrees_with_the_annotation(compile_text: Compile) -> None:
    checked = compile_text("model m:\n  input X: 8\n  fc out=4  4\n")
    assert checked.root[0].hp["out"] == 4
    with pytest.raises(CheckFailed, match="annotation says 5"):
        compile_text("model m:\n  input X: 8\n  fc out=4  5\n")


def test_without_the_annotation_a_required_size_is_missing(compile_text: Compile) -> None:
    with pytest.raises(LbdlError, match="`fc` needs `out`"):
        compile_text("model m:\n  input X: 8\n  fc\n")


def test_block_patterns_bind_and_check_sizes(compile_text: Compile) -> None:
    spec = (
        "block down(c) on C×H×W:\n  conv-2d k=3 s=2 p=1  c×H/2×W/2\n"
        "model m:\n  input X: 3×32×32\n  down c=8  8×16×16\n  down c=16\n"
    )
    checked = compile_text(spec)
    first, second = checked.root
    assert first.bindings == {"c": 8, "C": 3, "H": 32, "W": 32}
    assert second.bindings["C"] == 8 and out_shape(checked) == (16, 8, 8)
    with pytest.raises(CheckFailed, match="H/2 = 31/2 is not a whole number for H=31"):
        compile_text(spec.replace("3×32×32", "3×31×31"))


# -- receptive field (book § 4.2) ----------------------------------------------------------


def test_receptive_field_and_stride_of_a_convolution_stack(compile_text: Compile) -> None:
    checked = compile_text(
        "model m:\n  input X: 1×32×32\n"
        "  conv-2d k=3 p=1       8×32×32  -> a\n"
        "  conv-2d k=3 s=2 p=1   8×16×16\n"
        "  conv-2d k=3 p=1       8×16×16\n"
        "  maxpool k=2           8×8×8\n"
        "  conv-2d k=3 d=2 p=2   8×8×8\n"
        "  relu\n"
        "  upsample f=4          8×32×32\n"
        "  +(a)\n"
    )
    rfs = [tuple(int(v.as_int()) for v in i.output.rf) for i in checked.root]
    # Each k×k window with dilation d widens the field by (k − 1)·d input steps of the layer's
    # input, which are `stride` pixels apart; strides multiply.
    assert rfs[:6] == [(3, 1), (5, 2), (9, 2), (11, 4), (27, 4), (27, 4)]
    assert rfs[-1][0] == 27  # a sum sees the wider of its two inputs


def test_receptive_field_of_resnet_50_s_stem() -> None:
    checked = compile_spec(REPO / "specs" / "resnet50.lbdl")
    conv, _bn, _relu, pool = checked.root[:4]
    assert conv.output.rf == (7, 2) and pool.output.rf == (11, 4)


# -- assertions ----------------------------------------------------------------------------


def test_assertions_that_hold(compile_text: Compile) -> None:
    compile_text(
        MLP + "  assert params == 1_557\n  assert params < 2K\n  assert macs >= 1K\n"
        "  assert state == 0\n  assert Y: 2\n"
    )


def test_assertions_that_fail_are_all_reported(compile_text: Compile) -> None:
    with pytest.raises(CheckFailed) as info:
        compile_text(MLP + "  assert params < 1K\n  assert Y: 3\n  assert macs > 1M\n")
    messages = [d.message for d in info.value.diagnostics]
    assert messages == [
        "assertion failed: params = 1,557, which is not < 1,000",
        "assertion failed: `Y` has shape 2, not 3",
        "assertion failed: macs = 1,520, which is not > 1,000,000",
    ]
    assert [d.span.line for d in info.value.diagnostics] == [10, 11, 12]


def test_a_count_assertion_on_a_free_symbol_asks_for_a_value(compile_text: Compile) -> None:
    spec = GPT_FREE_T + "  assert macs < 200B\n"
    with pytest.raises(CheckFailed, match="depends on T"):
        compile_text(spec)
    compile_text(spec, T=1024)
    with pytest.raises(CheckFailed, match="which is not < 200,000,000,000"):
        compile_text(spec, T=2048)


# -- --set ---------------------------------------------------------------------------------


def test_set_overrides_a_model_parameter_and_those_derived_from_it(compile_text: Compile) -> None:
    spec = "model m(D=8, H=D*4):\n  input X: D\n  fc  H\n  fc  D\n"
    assert compile_text(spec).params == (8 * 32 + 32) + (32 * 8 + 8)
    checked = compile_text(spec, D=16)
    assert checked.env["H"] == 64
    assert checked.params == (16 * 64 + 64) + (64 * 16 + 16)
    assert compile_text(spec, H=10).params == (8 * 10 + 10) + (10 * 8 + 8)


def test_count_assertions_describe_the_defaults() -> None:
    """Under --set of a model parameter the spec's counts no longer apply: skipped, and said."""
    checked = compile_spec(REPO / "specs" / "resnet50.lbdl", overrides={"classes": 10})
    assert checked.params == 25_557_032 - 2_049_000 + 20_490
    assert any("not checked" in a and "overridden" in a for a in checked.assumptions)


def test_set_with_an_unknown_key_is_an_error(compile_text: Compile) -> None:
    with pytest.raises(LbdlError, match="no parameter `Q`") as info:
        compile_text(MLP, Q=3)
    assert info.value.first.hint is not None


# -- the checker's work does not grow with ×N ----------------------------------------------


def _work(compile_text: Compile, monkeypatch: pytest.MonkeyPatch, spec: str, **overrides):
    """(boxes the checker visited, instances in the checked tree) for one compile."""
    visited = []
    original = infer.Checker.box

    def counting(self, inst, *args):
        visited.append(inst.node.id)
        return original(self, inst, *args)

    monkeypatch.setattr(infer.Checker, "box", counting)
    checked = compile_text(spec, **overrides)
    monkeypatch.setattr(infer.Checker, "box", original)
    return len(visited), sum(1 for _ in checked.walk()), checked


def test_repeated_identical_groups_are_checked_once(
    compile_text: Compile, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = GPT_FREE_T.replace("model gpt(N=12,", "model gpt(N=2,")
    small = _work(compile_text, monkeypatch, spec, T=128)
    large = _work(compile_text, monkeypatch, spec, T=128, N=96)
    assert small[:2] == large[:2]
    assert large[2].params - small[2].params == 94 * 7_084_800  # but all 96 are counted


def test_repeated_block_calls_are_checked_once(
    compile_text: Compile, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = (
        "block res on C×H×W:\n  residual:\n    conv-2d k=3 p=1  C×H×W\n    batchnorm\n  relu\n"
        "model m(N=2):\n  input X: 16×8×8\n  res ×N\n  res\n  res\n"
    )
    small = _work(compile_text, monkeypatch, spec)
    large = _work(compile_text, monkeypatch, spec, N=96)
    assert small[:2] == large[:2]
    assert large[2].params == 98 * (16 * 16 * 9 + 16 + 32)

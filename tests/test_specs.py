"""The spec library: every spec checks, and reproduces the figures its header cites.

Each row of `FIGURES` is one spec with the ``--set`` values it is checked under, its output
shapes and its trainable parameter count. The counts are the published ones where the header
cites one (torchvision, Hugging Face, the book's figures) and otherwise the arithmetic its header
writes out; a comment on each row says which. The checker allocates nothing, so the whole file
runs in a few seconds.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lbdl_dsl.compiler.driver import compile_spec
from lbdl_dsl.compiler.instance import Checked

SPECS = Path(__file__).resolve().parents[1] / "specs"


def compile_named(name: str, **overrides: Any) -> Checked:
    return compile_spec(SPECS / f"{name}.lbdl", overrides=overrides)


def params(compiled: Checked) -> int:
    return compiled.totals["params"].as_int()


def outputs(compiled: Checked) -> dict[str, tuple[int | None, ...]]:
    return {k: tuple(d.as_int() for d in t.shape) for k, t in compiled.outputs.items()}


# (spec, --set values, outputs, trainable parameters)
FIGURES: list[tuple[str, dict[str, Any], dict[str, tuple[int, ...]], int]] = [
    # The book's figures (FIGURES.md).
    ("mlp", {}, {"Y": (2,)}, 1_557),  # Fig. 5.1
    ("lenet", {}, {"Ŷ": (10,)}, 105_506),  # Fig. 5.2
    ("digits-cnn", {}, {"Ŷ": (10,)}, 160 + 4_640 + 9_248 + 1_290),  # `lbdl train`'s example
    ("resnet50", {}, {"Ŷ": (1000,)}, 25_557_032),  # Fig. 5.5; torchvision
    ("transformer_blocks", {"T": 10, "S": 12}, {"Y": (10, 512)}, 16 * 512**2 + 11 * 512),
    ("transformer", {"T": 10, "S": 12}, {"P": (12, 37_000)}, 63_082_632),  # Fig. 5.7, as drawn
    ("gpt", {"T": 1024}, {"P": (1024, 50_257)}, 162_262_609),  # Fig. 5.8, book's conventions
    ("vit", {}, {"Ŷ": (1000,)}, 87_710_440),  # Fig. 5.9; trunk = timm's ViT-B/16, see header
    # Chapters 4, 6, 7 and "the missing bits".
    ("unet", {}, {"Ŷ": (2, 388, 388)}, 31_030_658),  # Ronneberger's Fig. 1 shapes
    ("dqn", {}, {"Q": (18,)}, 1_693_362),  # Mnih et al. 2015's layers, 18 actions
    ("clip", {}, {"image": (512,), "text": (512,), "similarity": (1, 1)}, 151_277_313),  # HF
    ("whisper", {"S": 448}, {"Z": (1500, 384), "P": (448, 51_865)}, 37_184_640),
    (
        "ssd-like",
        {},
        {f"head{s}": (4 * (4 + 20 + 1), s, s) for s in (32, 16, 8, 4, 2, 1)},
        4_395_896,
    ),
    (
        "pspnet-head",
        {},
        {"Ŷ": (150, 480, 480)},
        4 * (2048 * 512 + 1024) + 4096 * 512 * 9 + 1024 + 512 * 150 + 150,
    ),
    ("ddpm-unet", {}, {"ε̂": (3, 32, 32)}, 4_011_331),
    (
        "autoencoder",
        {},
        {"code": (20,), "X̂": (784,)},
        784 * 400 + 400 + 400 * 20 + 20 + 20 * 400 + 400 + 400 * 784 + 784,
    ),
    ("vae", {}, {"X̂": (784,), "μ": (20,), "logvar": (20,)}, 652_824),  # pytorch/examples
    ("dcgan-generator", {}, {"X̂": (3, 64, 64)}, 3_576_704),  # PyTorch DCGAN tutorial
    ("dcgan-discriminator", {}, {"P": (1, 1, 1)}, 2_765_568),  # PyTorch DCGAN tutorial
    (
        "lstm-lm",
        {"T": 35},
        {"P": (35, 10_000)},
        10_000 * 650 + 2 * (4 * 650 * (650 + 650) + 8 * 650) + 650 * 10_000 + 10_000,
    ),
    (
        "gru-classifier",
        {},
        {"Ŷ": (2,)},
        10_000 * 128 + 3 * 256 * (128 + 256) + 6 * 256 + 3 * 256 * 512 + 6 * 256 + 256 * 2 + 2,
    ),
    ("gcn", {}, {"Ŷ": (2708, 7)}, 1433 * 16 + 16 * 7),  # Kipf & Welling, no biases
    # Classics beyond the book: torchvision and Hugging Face counts.
    ("resnet18", {}, {"Ŷ": (1000,)}, 11_689_512),
    ("resnet50-torchvision", {}, {"Ŷ": (1000,)}, 25_557_032),  # torchvision's (v1.5)
    ("resnet101", {}, {"Ŷ": (1000,)}, 44_549_160),
    ("vgg16", {}, {"Ŷ": (1000,)}, 138_357_544),
    ("densenet121", {}, {"Ŷ": (1000,)}, 7_978_856),
    ("mobilenetv2", {}, {"Ŷ": (1000,)}, 3_504_872),
    ("vit-b16", {}, {"Ŷ": (1000,)}, 86_567_656),  # Hugging Face's and timm's ViT-B/16
    ("bert-base", {"T": 128}, {"Z": (128, 768), "pooled": (768,)}, 109_482_240),
    ("gpt2", {"T": 1024}, {"P": (1024, 50_257)}, 124_439_808),
    # GPT-3 175B (Brown et al. 2020, Table 2.1; FIGURES.md note 7): learned positions, biases
    ("gpt3", {"T": 2048}, {"P": (2048, 50_257)}, 174_604_259_328),
    # Language models since 2023: Hugging Face's configurations (meta-llama, mistralai).
    ("llama2-7b", {"T": 4096}, {"P": (4096, 32_000)}, 6_738_415_616),
    ("mistral-7b", {"T": 4096}, {"P": (4096, 32_000)}, 7_241_732_096),
    ("llama3-8b", {"T": 8192}, {"P": (8192, 128_256)}, 8_030_261_248),  # meta-llama/Llama-3.1-8B
    ("gemma-7b", {"T": 8192}, {"P": (8192, 256_000)}, 8_537_680_896),  # google/gemma-7b
    ("qwen2-7b", {"T": 4096}, {"P": (4096, 152_064)}, 7_615_616_512),  # Qwen/Qwen2(.5)-7B
    ("qwen3-8b", {"T": 4096}, {"P": (4096, 151_936)}, 8_190_735_360),  # Qwen/Qwen3-8B
    ("gemma2-9b", {"T": 8192}, {"P": (8192, 256_000)}, 9_241_705_984),  # google/gemma-2-9b
    ("gemma3-4b", {"T": 4096}, {"P": (4096, 262_208)}, 3_880_263_168),  # google/gemma-3-4b
    ("qwen3-30b-a3b", {"T": 4096}, {"P": (4096, 151_936)}, 30_532_122_624),  # Qwen3-30B-A3B
    ("olmo2-13b", {"T": 4096}, {"P": (4096, 100_352)}, 13_716_198_400),  # OLMo-2-1124-13B
    ("phi3-mini", {"T": 4096}, {"P": (4096, 32_064)}, 3_821_079_552),  # microsoft/Phi-3-mini-4k
    ("mixtral-8x7b", {"T": 4096}, {"P": (4096, 32_000)}, 46_702_792_704),
    # Encoder-decoder with relative positions computed in the spec (issue 41): transformers'
    ("t5-small", {}, {"Z": (64, 512), "P": (64, 32_128)}, 60_506_624),  # google-t5/t5-small
    ("mamba-130m", {"T": 64}, {"P": (64, 50_280)}, 129_135_360),  # state-spaces/mamba-130m
    # Vision and diffusion (issue 13): torchvision, timm and the DiT authors' code.
    ("convnext-t", {}, {"Ŷ": (1000,)}, 28_589_128),  # torchvision convnext_tiny
    ("swin-t", {}, {"Ŷ": (1000,)}, 28_288_354),  # torchvision swin_t
    ("efficientnet-b0", {}, {"Ŷ": (1000,)}, 5_288_548),  # torchvision efficientnet_b0
    ("mlp-mixer", {}, {"Ŷ": (1000,)}, 59_880_472),  # timm mixer_b16_224
    ("dit-s2", {}, {"out": (8, 32, 32)}, 32_865_056),  # DiT's models.py, trainable
    # Their small configurations (tests/backends/test_vision_models.py runs them).
    ("convnext-t", {"I": 32, "C": 8, "classes": 10}, {"Ŷ": (10,)}, 223_890),
    ("swin-t", {"I": 32, "C": 24, "w": 2, "s": 1, "classes": 10}, {"Ŷ": (10,)}, 1_734_268),
    ("efficientnet-b0", {"I": 32, "classes": 10}, {"Ŷ": (10,)}, 5_288_548 - 990 * 1281),
    (
        "mlp-mixer",
        {"I": 32, "P": 8, "D": 32, "N": 2, "S": 16, "E": 64, "classes": 10},
        {"Ŷ": (10,)},
        # stem; per layer two layernorms, token MLP 16↔16, channel MLP 32↔64; norm; head
        3 * 64 * 32
        + 32
        + 2 * (4 * 32 + 2 * 16 * 16 + 16 + 16 + 2 * 32 * 64 + 64 + 32)
        + 2 * 32
        + 32 * 10
        + 10,
    ),
    ("dit-s2", {"I": 8, "D": 48, "N": 2, "H": 2, "classes": 10}, {"out": (8, 8, 8)}, 106_688),
]

# Multiply-accumulates per sample where the spec's header cites a published figure (the header
# says what is counted): (spec, MACs).
MACS: list[tuple[str, int]] = [
    ("convnext-t", 4_455_531_264),  # torchvision: 4.46 GFLOPS (multiply-adds)
    ("swin-t", 4_490_566_656),  # torchvision: 4.49
    ("efficientnet-b0", 385_814_752),  # the paper and torchvision: 0.39
    ("dit-s2", 6_055_673_856),  # the paper's Table 4: 6.06 Gflops
]

# Members of a family, made from one spec with --set: (spec, --set values, parameters).
FAMILIES: list[tuple[str, dict[str, Any], int]] = [
    ("gpt2", {"N": 24, "D": 1024, "H": 16}, 354_823_168),  # GPT-2 medium (Hugging Face)
    ("gpt2", {"N": 36, "D": 1280, "H": 20}, 774_030_080),  # GPT-2 large
    ("gpt2", {"N": 48, "D": 1600, "H": 25}, 1_557_611_200),  # GPT-2 XL
    ("resnet101", {"L3": 6}, 25_557_032),  # ResNet-50 (torchvision)
    ("resnet101", {"L2": 8, "L3": 36}, 60_192_808),  # ResNet-152
    ("resnet18", {"L1": 3, "L2": 4, "L3": 6, "L4": 3}, 21_797_672),  # ResNet-34
    ("resnet50-torchvision", {"L3": 23}, 44_549_160),  # torchvision's resnet101
    ("resnet50-torchvision", {"L2": 8, "L3": 36}, 60_192_808),  # torchvision's resnet152
    ("densenet121", {"L3": 32, "L4": 32}, 14_149_480),  # DenseNet-169
    ("densenet121", {"L3": 48, "L4": 32}, 20_013_928),  # DenseNet-201
    ("dqn", {"A": 4}, 1_686_180),  # the often-quoted DQN count is the four-action network
    # LLaMA-2 13B: F follows from D by LLaMA's rule, the spec's default (13,824)
    ("llama2-7b", {"N": 40, "D": 5120, "H": 40}, 13_015_864_320),
]


def _id(name: str, overrides: dict[str, Any]) -> str:
    return " ".join([name, *(f"{k}={v}" for k, v in overrides.items())])


@pytest.mark.parametrize(
    ("name", "overrides", "shapes", "count"), FIGURES, ids=[_id(r[0], r[1]) for r in FIGURES]
)
def test_spec_reproduces_its_figures(name, overrides, shapes, count) -> None:
    compiled = compile_named(name, **overrides)
    assert outputs(compiled) == shapes
    assert params(compiled) == count


@pytest.mark.parametrize(("name", "macs"), MACS, ids=[r[0] for r in MACS])
def test_spec_reproduces_published_macs(name, macs) -> None:
    assert compile_named(name).totals["macs"].as_int() == macs
    assert round(macs / 1e9, 2) == float(
        re.search(r"(\d\.\d\d) G", (SPECS / f"{name}.lbdl").read_text(encoding="utf-8"))[1]
    )


@pytest.mark.parametrize(
    ("name", "overrides", "count"), FAMILIES, ids=[_id(r[0], r[1]) for r in FAMILIES]
)
def test_family_member_from_set(name, overrides, count) -> None:
    assert params(compile_named(name, **overrides)) == count


def test_gpt3_through_the_book_s_gpt() -> None:
    """§ 7.1: 96 blocks of 96 heads, D=12,288, MLP hidden 49,152, about 175 billion."""
    compiled = compile_named("gpt", N=96, D=12_288, H=96, T=2048)
    assert outputs(compiled) == {"P": (2048, 50_257)}
    assert 174.5e9 < params(compiled) < 175.5e9


def test_vit_trunk_is_vit_b16_s() -> None:
    """timm's ViT-B/16 (86,567,656) less its head, final layernorm and attention biases."""
    root = compile_named("vit").root
    ops = [inst.node.op for inst in root]
    trunk = root[: ops.index("take")]
    assert sum(inst.totals["params"].as_int() for inst in trunk) == (
        86_567_656 - (768 * 1000 + 1000) - 2 * 768 - 12 * 4 * 768
    )


def test_lenet_draws_every_shape_of_fig_5_2() -> None:
    compiled = compile_named("lenet")
    rows = [(inst.node.op, tuple(d.as_int() for d in inst.output.shape)) for inst in compiled.root]
    assert rows == [
        ("conv-2d", (32, 24, 24)),
        ("maxpool", (32, 8, 8)),
        ("relu", (32, 8, 8)),
        ("conv-2d", (64, 4, 4)),
        ("maxpool", (64, 2, 2)),
        ("relu", (64, 2, 2)),
        ("reshape", (256,)),
        ("fc", (200,)),
        ("relu", (200,)),
        ("fc", (10,)),
    ]


ALL_SPECS = sorted(p.stem for p in SPECS.glob("*.lbdl"))
BLOCK_FILES = sorted(p.name for p in (SPECS / "blocks").glob("*.lbdl"))


@pytest.mark.parametrize("name", ALL_SPECS)
def test_every_spec_checks_as_written(name: str) -> None:
    """Without --set: symbols such as a sequence length stay symbolic, and that checks too."""
    compiled = compile_named(name)
    assert compiled is not None and compiled.ok


@pytest.mark.parametrize("name", ALL_SPECS)
def test_every_spec_is_headed_by_its_source(name: str) -> None:
    """Issue #6: a spec opens with a comment naming its source and what it reproduces."""
    text = (SPECS / f"{name}.lbdl").read_text(encoding="utf-8")
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    assert header, f"{name}.lbdl has no header comment"
    assert re.search(r"Reproduces", "\n".join(header)), f"{name}.lbdl: say what it reproduces"


def test_every_spec_has_a_row_in_the_table() -> None:
    assert sorted({row[0] for row in FIGURES}) == ALL_SPECS


@pytest.mark.parametrize("name", BLOCK_FILES)
def test_block_libraries_parse(name: str) -> None:
    compile_spec(SPECS / "blocks" / name, stop_after="parse")

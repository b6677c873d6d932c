"""ResNet (torchvision's parameter names) into specs/resnet18.lbdl (basic blocks: ResNet-18 and,
with ``--set``, -34) or into the bottleneck specs (specs/resnet50-torchvision.lbdl, and the
book's specs/resnet50.lbdl and resnet101.lbdl).

torchvision writes stage s as ``layer{s}.{b}``; our specs write a stage's first block apart
(``dbasicblock``, ``dresblock``: it changes the shape, and carries the shortcut convolution,
torchvision's ``downsample``) and the others as a ×N group, so ``layer{s}.{i+1}`` fills copy i
of that group (ResNet-18's first stage, which keeps its shape, is a ×N group from block 0).
Convolution weights go from OIHW to HWIO; batchnorm's running averages go into the state.
"""

from lbdl_dsl.interop.layout import FamilyMap, Rule, conv_weight, transpose

CONV = (conv_weight(),)


def _conv_bn(src: str, conv: str, bn: str) -> tuple[Rule, ...]:
    """A convolution and the batchnorm after it: torchvision's ``conv1``/``bn1`` pairs."""
    conv_name, bn_name = src.split("|")
    return (
        Rule(conv_name + ".weight", conv + "/w", CONV),
        Rule(bn_name + ".weight", bn + "/scale"),
        Rule(bn_name + ".bias", bn + "/bias"),
        Rule(bn_name + ".running_mean", bn + "/mean"),
        Rule(bn_name + ".running_var", bn + "/var"),
    )


def _block(src: str, dst: str, convs: int, shortcut: bool) -> tuple[Rule, ...]:
    rules: tuple[Rule, ...] = ()
    for j in range(convs):
        res = f"{dst}/residual_0/"
        rules += _conv_bn(
            f"{src}.conv{j + 1}|{src}.bn{j + 1}", res + f"conv_2d_{j}", res + f"batchnorm_{j}"
        )
    if shortcut:
        res = f"{dst}/residual_0/shortcut/"
        rules += _conv_bn(
            f"{src}.downsample.0|{src}.downsample.1", res + "conv_2d_0", res + "batchnorm_0"
        )
    return rules


STEM = _conv_bn("conv1|bn1", "conv_2d_0", "batchnorm_0")
HEAD = (Rule("fc.weight", "fc_0/w", (transpose(),)), Rule("fc.bias", "fc_0/b"))
IGNORE = ("{*}num_batches_tracked",)


def _basic() -> tuple[Rule, ...]:
    rules = _block("layer1.{i}", "repeat_0/basicblock_0", 2, False)
    for s in (2, 3, 4):
        rules += _block(f"layer{s}.0", f"dbasicblock_{s - 2}", 2, True)
        rules += _block(f"layer{s}.{{i+1}}", f"repeat_{s - 1}/basicblock_0", 2, False)
    return rules


def _bottleneck(down: str) -> tuple[Rule, ...]:
    rules: tuple[Rule, ...] = ()
    for s in (1, 2, 3, 4):
        rules += _block(f"layer{s}.0", f"{down}_{s - 1}", 3, True)
        rules += _block(f"layer{s}.{{i+1}}", f"repeat_{s - 1}/resblock_0", 3, False)
    return rules


BASIC = FamilyMap(
    name="resnet",
    doc="ResNet-18/34 (torchvision names: conv1, bn1, layer1.0.conv1, ..., fc)",
    spec="specs/resnet18.lbdl",
    rules=STEM + _basic() + HEAD,
    ignore=IGNORE,
)

TORCHVISION = FamilyMap(
    name="resnet",
    doc="ResNet-50/101/152 (torchvision names)",
    spec="specs/resnet50-torchvision.lbdl",
    rules=STEM + _bottleneck("tvdresblock") + HEAD,
    ignore=IGNORE,
)

BOOK = FamilyMap(
    name="resnet",
    doc="ResNet-50/101 as the book draws them (torchvision names)",
    spec="specs/resnet50.lbdl",
    rules=STEM + _bottleneck("dresblock") + HEAD,
    ignore=IGNORE,
    note="this spec strides the first 1×1 convolution of each downscaling block, as the book's "
    "Fig. 5.4 (ResNet v1); torchvision's ResNet-50 strides the 3×3 (v1.5). The weights fit "
    "both; to compute what torchvision computes, import them into "
    "specs/resnet50-torchvision.lbdl",
)

VARIANTS = (BASIC, TORCHVISION, BOOK)

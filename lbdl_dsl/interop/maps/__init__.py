"""The weight maps, one module per family; ``MAPS`` names them as ``--map`` takes them.

A family may have several variants (ResNet's basic and bottleneck blocks have different
parameters): the importer takes the variant whose parameter paths the spec has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lbdl_dsl.interop.layout import FamilyMap
from lbdl_dsl.interop.maps import (
    bert,
    gemma2,
    gemma3,
    gpt2,
    gpt_bigcode,
    gpt_neox,
    llama,
    mixtral,
    olmo2,
    phi,
    phi3,
    qwen2,
    qwen3,
    resnet,
    starcoder2,
    vit,
)

MAPS: dict[str, tuple[FamilyMap, ...]] = {
    "gpt2": gpt2.VARIANTS,
    "llama": llama.VARIANTS,
    "mistral": (llama.MAP,),
    "mixtral": mixtral.VARIANTS,
    "resnet": resnet.VARIANTS,
    "vit": (vit.MAP,),
    "bert": bert.VARIANTS,
    "qwen2": (qwen2.MAP,),
    "qwen3": qwen3.VARIANTS,
    "gemma2": gemma2.VARIANTS,
    "gemma3": gemma3.build(),
    "starcoder2": starcoder2.VARIANTS,
    "qwen3_moe": qwen3.MOE,
    "phi": phi.VARIANTS,
    "phi3": (phi3.MAP,),
    "olmo2": olmo2.VARIANTS,
    "olmo": (olmo2.OLMO, olmo2.OLMO_BIASED),
    "gpt_bigcode": gpt_bigcode.VARIANTS,
}


@dataclass(frozen=True)
class Built:
    """A family whose map is made for one model: what its number is, and an example."""

    build: Callable[[int], tuple[FamilyMap, ...]]
    number: str  # what K in FAMILY@K says, as errors name it
    example: str  # a --map value and the model it is for


BUILT: dict[str, Built] = {
    "gemma3": Built(
        gemma3.build,
        "the first layer left over",
        "--map gemma3@30 for 34 layers (30 in groups of six, 4 left over)",
    ),
    "gpt_neox": Built(gpt_neox.build, "the head count", "--map gpt_neox@8 for Pythia-70M"),
    "gpt_bigcode": Built(gpt_bigcode.build, "the head count", "--map gpt_bigcode@16 for 16 heads"),
}
"""Maps made for one model, named ``FAMILY@K``: Gemma 3's ``gemma3@S``, whose layers from S on
are left over from its groups of six (S depends on the layer count); GPT-NeoX's
``gpt_neox@H`` and GPTBigCode's without multi-query attention ``gpt_bigcode@H``, whose fused
projections are cut by their H heads."""
